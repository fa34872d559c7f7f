"""Giving a rebuilt layer or model every saved value: variables matched by their keys (by position
where keys do not pair one to one), each checked for shape and dtype, converted from another
backend's integer dtypes where needed; layer state, the optimizer, held optimizers and metrics."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from .. import _blueprint
from .._keras3 import backend as _backend
from .._keras3 import convert as _convert
from .._keras3 import deferred as _deferred
from .._keras3 import layer_state as _layer_state
from .._keras3 import order as _order
from .._keras3 import survey as _survey
from .._keras3.census import census_of
from .._keras3.recorded import compile_metrics as _compile_metrics
from .._keras3.state import CapturedState, describe, metric_variables, optimizer_of
from ..errors import StateMismatchError


def fits(obj: Any, state: CapturedState, *, skip: set[int] = frozenset()) -> bool:
    """Whether ``obj``'s variables pair with the payload's one to one, with the same shapes.

    Here and in the ``apply_to_*`` functions, ``obj`` is the rebuilt object or its census
    (:class:`~keras_pickle._keras3.census.Census`), which they read instead of walking the model again.
    """
    pairs = [(v, key) for v, key in census_of(obj).references if id(v) not in skip]
    if len(pairs) != len(state.variables):
        return False
    targets = in_saved_order([v for v, _ in pairs], [key for _, key in pairs], state.variables)
    return all(tuple(v.shape) == tuple(array.shape) for v, (_key, array) in zip(targets, state.variables))


def apply_to_layers(obj: Any, state: CapturedState, *, skip: set[int] = frozenset()) -> None:
    """Load variables and layer state into ``obj``, a freshly rebuilt copy.

    ``skip``: ``id()`` of variables that are not in the payload (see :func:`capture`).
    Optimizer and metric state is loaded separately (:func:`apply_to_optimizer`,
    :func:`apply_to_held_optimizers`, :func:`apply_to_metrics`), after the model is compiled.
    Each layer then lists its variables in the original's order (:mod:`keras_pickle._keras3.order`).
    """
    census = census_of(obj)
    obj = census.root
    pairs = [(v, key) for v, key in census.references if id(v) not in skip]
    targets = in_saved_order([v for v, _ in pairs], [key for _, key in pairs], state.variables)
    assign_in_order(targets, state.variables, owner=describe(obj), written_backend=state.backend)
    _order.follow_saved_order(census, [key for key, _value in state.variables])

    def assign_carried(targets: list, values: list, *, owner: str) -> None:
        assign_in_order(targets, values, owner=owner)

    _layer_state.apply(census, state.layer_states, describe(obj), assign_carried)


def apply_to_metrics(obj: Any, state: CapturedState) -> None:
    """Load the variables of the metrics ``obj`` holds as attributes, and the running totals of its compile
    metrics: after compiling, which may create some (a custom ``compile()`` that makes its trackers), and
    builds the compile metrics the payload carries (:func:`_compile_metrics.build_to_receive`)."""
    if not state.metric_variables:
        return
    census = census_of(obj)
    obj = census.root
    _compile_metrics.build_to_receive(obj, [key for key, _value in state.metric_variables])
    pairs = metric_variables(census)
    targets = in_saved_order([v for _, v in pairs], [key for key, _ in pairs], state.metric_variables)
    owner = f"the metrics held by {describe(obj)}"
    assign_in_order(targets, state.metric_variables, owner=owner, written_backend=state.backend)


def apply_to_held_optimizers(obj: Any, state: CapturedState, resolve: Any) -> None:
    """Build each held optimizer of the rebuilt model (found by ``resolve(obj, path)``) and load its state."""
    if not state.held_optimizers:
        return
    census = census_of(obj)
    obj, variables, references = census.root, census.variables, census.references
    for held in state.held_optimizers:
        optimizer = resolve(obj, held.path)
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise StateMismatchError(
                f"The payload holds the state of optimizer '{held.path}' of {describe(obj)}, but the rebuilt "
                f"model holds {type(optimizer).__name__} there: its compile() did not set that attribute again.",
                path=held.path,
            )
        if held.built and not optimizer.built:
            if not all(0 <= position < len(variables) for position in held.targets):
                raise StateMismatchError(
                    f"Optimizer '{held.path}' of {describe(obj)} was built for variables the rebuilt model "
                    f"does not have (it has {len(variables)}).",
                    path=held.path,
                )
            optimizer.build([variables[position] for position in held.targets])
        keys = _survey.optimizer_variable_keys(optimizer, references)
        targets = in_saved_order(list(optimizer.variables), keys, held.variables)
        owner = f"optimizer '{held.path}' of {describe(obj)}"
        assign_in_order(targets, held.variables, owner=owner, written_backend=state.backend)


def apply_to_optimizer(obj: Any, state: CapturedState) -> None:
    if not state.optimizer_variables:
        return
    census = census_of(obj)
    obj = census.root
    optimizer = optimizer_of(obj)
    if optimizer is None:
        raise StateMismatchError(
            f"The payload holds optimizer state, but the rebuilt {describe(obj)} "
            "has no optimizer: its compile config did not restore one."
        )
    deferred = []
    if state.optimizer_built and not optimizer.built:
        # Its slots are created below from their saved values, not from their initializers.
        deferred = _deferred.build_optimizer(optimizer, obj.trainable_variables)
    targets, values = list(optimizer.variables), state.optimizer_variables
    if not state.optimizer_built and optimizer.built:
        # Built anyway (by a custom compile_from_config, say; see
        # _rebuild._optimizer_left_unbuilt): the other variables keep the
        # initial values the first training step would give them.
        targets = _unbuilt_counterparts(optimizer, len(values))
    else:
        keys = _survey.optimizer_variable_keys(optimizer, census.references)
        targets, keys, values = without_unread_slots(targets, keys, values, census.references)
        targets = in_saved_order(targets, keys, values)
    owner = f"optimizer of {describe(obj)}"
    assign_in_order(targets, values, owner=owner, written_backend=state.backend)
    _deferred.initialize_leftovers(deferred)


def without_unread_slots(
    targets: list, target_keys: list[str], saved: list[tuple[str, Any]], references: list[tuple[Any, str]]
) -> tuple[list, list[str], list[tuple[str, Any]]]:
    """The optimizer's variables and the saved ones, less the slots of variables Keras overwrites with
    their gradient that only one side has.

    Keras never reads or updates an optimizer's slot of a variable with ``overwrite_with_gradient``
    (a float8 layer's scales and amax histories): it filters them out before the update. Keras 3.8
    still created such slots, later Keras creates none, so a float8 model's optimizer has more
    variables on one side. A saved slot of that kind that holds only zeros (its value ever since it
    was created) is dropped, and a slot the rebuilt optimizer has but the payload lacks keeps its
    initial value: nothing the optimizer reads is lost. Anything else is left for
    :func:`in_saved_order` and :func:`assign_in_order` to match or refuse, unchanged.
    """
    saved_keys = [key for key, _value in saved]
    extra = set(saved_keys) - set(target_keys)
    missing = set(target_keys) - set(saved_keys)
    if not (extra or missing) or len(set(saved_keys)) != len(saved_keys) or len(set(target_keys)) != len(target_keys):
        return targets, target_keys, saved
    overwritten = {key for variable, key in references if getattr(variable, "overwrite_with_gradient", False)}
    if not all(key.rpartition("/")[0] in overwritten for key in extra | missing):
        return targets, target_keys, saved
    if any(np.any(np.asarray(_backend.to_numpy(value))) for key, value in saved if key in extra):
        return targets, target_keys, saved
    kept = [(target, key) for target, key in zip(targets, target_keys) if key not in missing]
    return [t for t, _ in kept], [k for _, k in kept], [(key, value) for key, value in saved if key not in extra]


def in_saved_order(targets: list, target_keys: list[str], saved: list[tuple[str, Any]]) -> list:
    """``targets`` in the order of ``saved``, each matched by its place in the model (its key).

    A rebuilt layer may create its variables in another order than the
    original did (a float8-quantized Dense does); keys name the place, so
    they match them whatever the order. When the keys do not pair one to one
    (payloads written before keys named places hold Keras's process-numbered
    paths; two variables may share a key), the order is kept and
    :func:`assign_in_order` matches by position, naming any variable that
    does not fit.
    """
    saved_keys = [key for key, _value in saved]
    if target_keys == saved_keys or len(set(saved_keys)) != len(saved_keys) or set(target_keys) != set(saved_keys):
        return targets
    if len(set(target_keys)) != len(target_keys):
        return targets
    by_key = dict(zip(target_keys, targets))
    return [by_key[key] for key in saved_keys]


def _unbuilt_counterparts(optimizer: Any, count: int) -> list:
    """The variables of the built ``optimizer`` that an unbuilt optimizer of its config has, in order.

    Building does not only append: a LossScaleOptimizer adds its loss scale
    between its own iterations / learning rate and its inner optimizer's. A
    fresh unbuilt optimizer from the same config names the variables to look
    for; each is the next variable of that name. Without such a copy (or if
    the names do not all match), the first ``count`` variables: Keras's
    optimizers create iterations and learning rate before any slot.
    """
    variables = list(optimizer.variables)
    try:
        names = [v.name for v in type(optimizer).from_config(optimizer.get_config()).variables]
    except Exception:
        return variables[:count]
    matched, remaining = [], iter(variables)
    for name in names:
        found = next((v for v in remaining if v.name == name), None)
        if found is None:
            return variables[:count]
        matched.append(found)
    return matched if len(matched) == count else variables[:count]


def assign_in_order(
    targets: list, values: list[tuple[str, Any]], *, owner: str, written_backend: str | None = None
) -> None:
    """Assign ``values`` (arrays or tensors) to ``targets`` position by position, checking each
    (:func:`keras_pickle._blueprint.assign_in_order`).

    ``written_backend`` is the backend that wrote the values when they come
    from a payload (None: from this process). From another backend, integer
    dtypes that differ between backends are converted
    (:func:`_convert.converted`), and nothing else; from any payload, a value
    this backend would hold with fewer bits is refused (:func:`_convert.check_held`).
    """
    foreign = _convert.is_foreign(written_backend)

    def assign_one(variable: Any, path: str, array: Any, where: str) -> None:
        target = _dtype_name(variable.dtype)
        if target != _dtype_name(array.dtype) and foreign and tuple(variable.shape) == tuple(array.shape):
            conversion = _convert.converted(variable, array, target, where=where, path=path)
            array = array if conversion is None else conversion
        if target != _dtype_name(array.dtype) and _convert.held_dtype(target) != _dtype_name(array.dtype):
            raise StateMismatchError(
                f"{where} has dtype {_dtype_name(array.dtype)} in the payload "
                f"but {_dtype_name(variable.dtype)} in the object rebuilt from its config "
                f"('{variable.path}'). Check the dtype policy the layer's config records.",
                path=path,
            )
        if tuple(variable.shape) != tuple(array.shape):
            raise StateMismatchError(
                f"{where} has shape {tuple(array.shape)} in the payload "
                f"but {tuple(variable.shape)} in the object rebuilt from its config "
                f"('{variable.path}'). Check get_config() of the layer that owns it.",
                path=path,
            )
        if written_backend is not None:
            _convert.check_held(target, array, where=where, path=path)
        _backend.assign(variable, array)

    _blueprint.assign_in_order(targets, values, owner=owner, assign_one=assign_one)


def _dtype_name(dtype: Any) -> str:
    return keras.backend.standardize_dtype(dtype)
