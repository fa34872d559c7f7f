"""Capture and restore every piece of state a Keras layer or model holds.

* ``variables``: ``obj.variables``. That is every weight, every
  non-trainable variable (BatchNormalization statistics, Normalization
  mean/variance) and every ``SeedGenerator`` state (Dropout & co).
* ``metric_variables``: the variables of the metrics a layer holds as
  attributes (keras.io's ``self.total_loss_tracker = keras.metrics.Mean()``).
* ``optimizer_variables``: ``obj.optimizer.variables`` (iterations, learning
  rate, slots) of a compiled model; ``held_optimizers``: any other optimizer
  the model holds as an attribute (keras.io's GAN: ``d_optimizer``,
  ``g_optimizer``), with the variables it was built for.
* ``layer_states``: state kept outside Keras variables
  (:mod:`keras_pickle._layer_state`): vocabularies, assets, carried RNN states.

Each value is stored with a key that names its place in the model and does
not depend on the process (``_names.variable_keys``: ``block/dense/kernel``).
On load, values are matched to the rebuilt object's variables by key (a
rebuilt layer may create its variables in another order: a float8-quantized
Dense does), by position where the keys do not pair one to one (older
payloads), and every pair is checked for shape and dtype.

A payload written under another backend may hold an integer variable in
another dtype (int64 iterations on TensorFlow, int32 on JAX and PyTorch;
seed-generator state): :mod:`keras_pickle._convert` converts it, exactly or
not at all. A payload of the same backend is assigned untouched.

The running totals of a compiled model's compile metrics are not captured:
Keras resets them at the start of every ``fit`` / ``evaluate``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import numpy as np

from . import _backend, _convert, _deferred, _layer_state, _names
from ._census import census_of
from ._layer_state import LayerState
from .errors import StateMismatchError


@dataclasses.dataclass
class HeldOptimizer:
    """An optimizer a model holds as an attribute, other than ``model.optimizer``."""

    path: str
    config_json: str
    built: bool
    # Positions, in the model's variables, of those it was built for (its trainable variables).
    targets: list[int]
    variables: list[tuple[str, np.ndarray]]


@dataclasses.dataclass
class CapturedState:
    variables: list[tuple[str, np.ndarray]]
    optimizer_variables: list[tuple[str, np.ndarray]]
    layer_states: list[LayerState]
    # An unbuilt optimizer holds only iterations and learning rate; the
    # rebuilt one may already be built (compile_from_config builds it).
    optimizer_built: bool = True
    # The backend that wrote the payload (loading only); None: this process.
    backend: str | None = None
    metric_variables: list[tuple[str, np.ndarray]] = dataclasses.field(default_factory=list)
    held_optimizers: list[HeldOptimizer] = dataclasses.field(default_factory=list)


def capture(obj: Any, *, skip: set[int] = frozenset(), held: list[tuple[Any, str, str]] = ()) -> CapturedState:
    """Every piece of ``obj``'s state, as numpy snapshots: training or assigning ``obj`` later never changes them.

    ``obj``: a layer or model, or its :class:`~keras_pickle._census.Census` (read, never walked again).

    ``skip``: ``id()`` of variables that travel elsewhere (those of layers given
    to a recorded constructor, :mod:`keras_pickle._construct`). ``held``:
    ``(optimizer, path, config_json)`` of the optimizers the model holds besides
    ``model.optimizer``.
    """
    read = _backend.to_numpy
    census = census_of(obj)
    obj = census.root
    references = census.references
    optimizer = _optimizer_of(obj)
    optimizer_variables = []
    if optimizer is not None:
        optimizer_keys = _names.optimizer_variable_keys(optimizer, references)
        optimizer_variables = [(key, read(v)) for key, v in zip(optimizer_keys, optimizer.variables)]
    return CapturedState(
        variables=[(key, read(v)) for v, key in references if id(v) not in skip],
        optimizer_variables=optimizer_variables,
        layer_states=_layer_state.capture(census),
        optimizer_built=bool(getattr(optimizer, "built", False)),
        metric_variables=[(key, read(v)) for key, v in _metric_variables(census)],
        held_optimizers=[_capture_held(part, path, config, references) for part, path, config in held],
    )


def _metric_variables(obj: Any) -> list[tuple[str, Any]]:
    """``(key, variable)`` of every metric a layer of ``obj`` (or of its census) holds as an attribute
    (Keras tracks them in ``_metrics``; a compiled model's compile metrics and loss tracker are not
    among them)."""
    census = census_of(obj)
    found = []
    for layer in census.layers:
        if not getattr(layer, "_metrics", None):
            continue
        prefix = census.place_of(layer)
        for metric in getattr(layer, "_metrics", ()):
            for v in metric.variables:
                found.append((f"{prefix}/{metric.name}/{v.name}".lstrip("/"), v))
    return found


def _capture_held(optimizer: Any, path: str, config_json: str, references: list[tuple[Any, str]]) -> HeldOptimizer:
    position_of = {id(v): position for position, (v, _key) in enumerate(references)}
    targets = []
    for v in getattr(optimizer, "_trainable_variables", None) or []:
        if id(v) not in position_of:
            raise StateMismatchError(
                f"Cannot pickle: optimizer '{path}' was built for variable '{v.path}', which is not a variable "
                "of the model that holds it, so it could not be built again for the rebuilt model.",
                path=path,
            )
        targets.append(position_of[id(v)])
    keys = _names.optimizer_variable_keys(optimizer, references)
    return HeldOptimizer(
        path=path,
        config_json=config_json,
        built=bool(optimizer.built),
        targets=targets,
        variables=[(key, _backend.to_numpy(v)) for key, v in zip(keys, optimizer.variables)],
    )


def fits(obj: Any, state: CapturedState, *, skip: set[int] = frozenset()) -> bool:
    """Whether ``obj``'s variables pair with the payload's one to one, with the same shapes.

    Here and in the ``apply_to_*`` functions, ``obj`` is the rebuilt object or its census
    (:class:`~keras_pickle._census.Census`), which they read instead of walking the model again.
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
    """
    census = census_of(obj)
    obj = census.root
    pairs = [(v, key) for v, key in census.references if id(v) not in skip]
    targets = in_saved_order([v for v, _ in pairs], [key for _, key in pairs], state.variables)
    assign_in_order(targets, state.variables, owner=_describe(obj), written_backend=state.backend)

    def assign_carried(targets: list, values: list, *, owner: str) -> None:
        assign_in_order(targets, values, owner=owner)

    _layer_state.apply(census, state.layer_states, _describe(obj), assign_carried)


def apply_to_metrics(obj: Any, state: CapturedState) -> None:
    """Load the variables of the metrics ``obj`` holds as attributes: after compiling, which may create some
    (a custom ``compile()`` that makes its trackers)."""
    if not state.metric_variables:
        return
    census = census_of(obj)
    obj = census.root
    pairs = _metric_variables(census)
    targets = in_saved_order([v for _, v in pairs], [key for key, _ in pairs], state.metric_variables)
    owner = f"the metrics held by {_describe(obj)}"
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
                f"The payload holds the state of optimizer '{held.path}' of {_describe(obj)}, but the rebuilt "
                f"model holds {type(optimizer).__name__} there: its compile() did not set that attribute again.",
                path=held.path,
            )
        if held.built and not optimizer.built:
            if not all(0 <= position < len(variables) for position in held.targets):
                raise StateMismatchError(
                    f"Optimizer '{held.path}' of {_describe(obj)} was built for variables the rebuilt model "
                    f"does not have (it has {len(variables)}).",
                    path=held.path,
                )
            optimizer.build([variables[position] for position in held.targets])
        keys = _names.optimizer_variable_keys(optimizer, references)
        targets = in_saved_order(list(optimizer.variables), keys, held.variables)
        owner = f"optimizer '{held.path}' of {_describe(obj)}"
        assign_in_order(targets, held.variables, owner=owner, written_backend=state.backend)


def apply_to_optimizer(obj: Any, state: CapturedState) -> None:
    if not state.optimizer_variables:
        return
    census = census_of(obj)
    obj = census.root
    optimizer = _optimizer_of(obj)
    if optimizer is None:
        raise StateMismatchError(
            f"The payload holds optimizer state, but the rebuilt {_describe(obj)} "
            "has no optimizer: its compile config did not restore one."
        )
    deferred = []
    if state.optimizer_built and not optimizer.built:
        # Its slots are created below from their saved values, not from their initializers.
        deferred = _deferred.build_optimizer(optimizer, obj.trainable_variables)
    targets = list(optimizer.variables)
    if not state.optimizer_built and optimizer.built:
        # Built anyway (by a custom compile_from_config, say; see
        # _rebuild._optimizer_left_unbuilt): the other variables keep the
        # initial values the first training step would give them.
        targets = _unbuilt_counterparts(optimizer, len(state.optimizer_variables))
    else:
        keys = _names.optimizer_variable_keys(optimizer, census.references)
        targets = in_saved_order(targets, keys, state.optimizer_variables)
    owner = f"optimizer of {_describe(obj)}"
    assign_in_order(targets, state.optimizer_variables, owner=owner, written_backend=state.backend)
    _deferred.initialize_leftovers(deferred)


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
    """Assign ``values`` (arrays or tensors) to ``targets`` position by position, checking each.

    ``written_backend`` is the backend that wrote the values when they come
    from a payload (None: from this process). From another backend, integer
    dtypes that differ between backends are converted
    (:func:`_convert.converted`), and nothing else; from any payload, a value
    this backend would hold with fewer bits is refused (:func:`_convert.check_held`).
    """
    foreign = _convert.is_foreign(written_backend)
    if len(targets) != len(values):
        raise StateMismatchError(
            f"The payload holds {len(values)} variables for {owner}, but the object rebuilt "
            f"from its config has {len(targets)}. The config does not describe the object "
            "that was pickled: a custom layer or model whose get_config() omits a "
            "constructor argument, or whose build() depends on something the config does "
            "not record."
        )
    for position, (variable, (path, array)) in enumerate(zip(targets, values)):
        target, where = _dtype_name(variable.dtype), f"Variable #{position} '{path}' of {owner}"
        if target != _dtype_name(array.dtype) and foreign and tuple(variable.shape) == tuple(array.shape):
            conversion = _convert.converted(variable, array, target, where=where, path=path)
            array = array if conversion is None else conversion
        if target != _dtype_name(array.dtype) and _convert.held_dtype(target) != _dtype_name(array.dtype):
            raise StateMismatchError(
                f"Variable #{position} '{path}' of {owner} has dtype {_dtype_name(array.dtype)} in the payload "
                f"but {_dtype_name(variable.dtype)} in the object rebuilt from its config "
                f"('{variable.path}'). Check the dtype policy the layer's config records.",
                path=path,
            )
        if tuple(variable.shape) != tuple(array.shape):
            raise StateMismatchError(
                f"Variable #{position} '{path}' of {owner} has shape {tuple(array.shape)} in the payload "
                f"but {tuple(variable.shape)} in the object rebuilt from its config "
                f"('{variable.path}'). Check get_config() of the layer that owns it.",
                path=path,
            )
        if written_backend is not None:
            _convert.check_held(target, array, where=where, path=path)
        _backend.assign(variable, array)


def _dtype_name(dtype: Any) -> str:
    return keras.backend.standardize_dtype(dtype)


def _optimizer_of(obj: Any):
    optimizer = getattr(obj, "optimizer", None)
    if optimizer is None or not hasattr(optimizer, "variables"):
        return None
    return optimizer


def _describe(obj: Any) -> str:
    return f"{type(obj).__name__} '{getattr(obj, 'name', '?')}'"
