"""Capture and restore every piece of state a Keras layer or model holds.

* ``variables``: ``obj.variables`` in order. That is every weight, every
  non-trainable variable (BatchNormalization statistics, Normalization
  mean/variance) and every ``SeedGenerator`` state (Dropout & co).
* ``optimizer_variables``: ``obj.optimizer.variables`` (iterations, learning
  rate, slots) of a compiled model.
* ``layer_states``: for layers that keep state outside Keras variables
  (``save_assets`` such as StringLookup / TextVectorization vocabularies, or a
  custom ``save_own_variables``), what Keras's own saving hooks write.

Variables are matched by position, and every position is checked for shape
and dtype: Keras orders ``obj.variables`` deterministically from the config,
while paths carry auto-generated names (``seed_generator_3``) that differ
between processes. Each value is stored with a key for errors and inspection,
a name that does not depend on the process (``_names.variable_keys``:
``block/dense/kernel``); keys are never interpreted on load.

A payload written under another backend may hold an integer variable in
another dtype (int64 iterations on TensorFlow, int32 on JAX and PyTorch;
seed-generator state): :mod:`keras_pickle._convert` converts it, exactly or
not at all. A payload of the same backend is assigned untouched.

Metric state of a compiled model (the running totals of ``model.metrics``) is
not captured: Keras resets it at the start of every ``fit`` / ``evaluate``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any

import keras
import numpy as np

from . import _backend, _convert, _names
from .errors import StateMismatchError


@dataclasses.dataclass
class LayerState:
    index: int
    own_variables: list[tuple[str, np.ndarray]]
    assets: list[tuple[str, bytes]]


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


def capture(obj: Any) -> CapturedState:
    """Every piece of ``obj``'s state, as numpy snapshots: training or assigning ``obj`` later never changes them."""
    read = _backend.to_numpy
    variables = list(obj.variables)
    keys = _names.variable_keys(obj)
    optimizer = _optimizer_of(obj)
    optimizer_variables = []
    if optimizer is not None:
        optimizer_keys = _names.optimizer_variable_keys(optimizer, list(zip(variables, keys)))
        optimizer_variables = [(key, read(v)) for key, v in zip(optimizer_keys, optimizer.variables)]
    return CapturedState(
        variables=[(key, read(v)) for key, v in zip(keys, variables)],
        optimizer_variables=optimizer_variables,
        layer_states=[_capture_layer(i, layer) for i, layer in _hooked_layers(obj)],
        optimizer_built=bool(getattr(optimizer, "built", False)),
    )


def apply_to_layers(obj: Any, state: CapturedState) -> None:
    """Load variables and layer hook state into ``obj``, a freshly rebuilt copy.

    The optimizer's state is loaded separately (:func:`apply_to_optimizer`),
    after the model is compiled.
    """
    targets = in_saved_order(list(obj.variables), _names.variable_keys(obj), state.variables)
    assign_in_order(targets, state.variables, owner=_describe(obj), written_backend=state.backend)
    layers = _flat_layers(obj)
    for layer_state in state.layer_states:
        if not 0 <= layer_state.index < len(layers):
            raise StateMismatchError(
                f"The payload holds state for layer #{layer_state.index}, but the rebuilt "
                f"{_describe(obj)} has only {len(layers)} layers."
            )
        _apply_layer(layers[layer_state.index], layer_state)
    hooked = {layer_state.index for layer_state in state.layer_states}
    for index, layer in enumerate(layers):
        if index not in hooked and _derives_state_on_load(layer):
            _reload_own_variables(layer)


def _derives_state_on_load(layer: Any) -> bool:
    """A preprocessing layer (it has ``finalize_state``) whose Keras ``load_own_variables`` is its own."""
    return callable(getattr(layer, "finalize_state", None)) and (
        type(layer).load_own_variables is not keras.Layer.load_own_variables
    )


def _reload_own_variables(layer: Any) -> None:
    """What Keras's loader does for a preprocessing layer: call its ``load_own_variables``, in which
    it derives state from its variables (Normalization: its mean and variance).

    The variables already hold their values; the store is the layer's own ``save_own_variables``.
    Nothing else is finalized: a layer whose derived state Keras's loader leaves alone
    (Discretization's bin boundaries, which its config records) keeps it. Other layers' own
    ``load_own_variables`` are not called: Dense and Embedding with LoRA enabled would merge
    their LoRA weights into the kernel, which the variables carried exactly already.
    """
    store: dict[str, Any] = {}
    layer.save_own_variables(store)
    layer.load_own_variables(store)


def apply_to_optimizer(obj: Any, state: CapturedState) -> None:
    if not state.optimizer_variables:
        return
    optimizer = _optimizer_of(obj)
    if optimizer is None:
        raise StateMismatchError(
            f"The payload holds optimizer state, but the rebuilt {_describe(obj)} "
            "has no optimizer: its compile config did not restore one."
        )
    targets = list(optimizer.variables)
    if state.optimizer_built and not optimizer.built:
        optimizer.build(obj.trainable_variables)
        targets = list(optimizer.variables)
    if not state.optimizer_built and optimizer.built:
        # Built anyway (by a custom compile_from_config, say; see
        # _rebuild._optimizer_left_unbuilt): the other variables keep the
        # initial values the first training step would give them.
        targets = _unbuilt_counterparts(optimizer, len(state.optimizer_variables))
    else:
        references = list(zip(obj.variables, _names.variable_keys(obj)))
        keys = _names.optimizer_variable_keys(optimizer, references)
        targets = in_saved_order(targets, keys, state.optimizer_variables)
    owner = f"optimizer of {_describe(obj)}"
    assign_in_order(targets, state.optimizer_variables, owner=owner, written_backend=state.backend)


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


def _flat_layers(obj: Any) -> list:
    if hasattr(obj, "_flatten_layers"):
        return list(obj._flatten_layers(include_self=True, recursive=True))
    return [obj]


def _has_custom_hooks(layer: Any) -> bool:
    """Layers whose state Keras's variables do not fully describe."""
    return _has_saving_hooks(layer) or bool(_carried_states(layer))


def _has_saving_hooks(layer: Any) -> bool:
    """Layers with assets, or with ``save_own_variables`` / ``load_own_variables`` of their own."""
    if hasattr(layer, "save_assets"):
        return True
    for name in ("save_own_variables", "load_own_variables"):
        hook = getattr(type(layer), name, None)
        if hook is not None and not hook.__module__.startswith("keras."):
            return True
    return False


# Keys of state Keras keeps outside ``model.variables``, in a layer's own-variables store.
_STATES_PREFIX = "keras_pickle:states/"


def _carried_states(layer: Any) -> list:
    """A stateful RNN's carried states: Keras variables that ``model.variables`` leaves out."""
    if not getattr(layer, "stateful", False):
        return []
    states = getattr(layer, "states", None)
    if not isinstance(states, (list, tuple)) or not all(isinstance(s, keras.Variable) for s in states):
        return []
    return list(states)


def _hooked_layers(obj: Any):
    for index, layer in enumerate(_flat_layers(obj)):
        if _has_custom_hooks(layer):
            yield index, layer


def _capture_layer(index: int, layer: Any) -> LayerState:
    store: dict[str, Any] = {}
    if _has_saving_hooks(layer):
        layer.save_own_variables(store)
    for position, carried in enumerate(_carried_states(layer)):
        store[f"{_STATES_PREFIX}{position}"] = carried
    own_variables = [(str(key), _backend.to_numpy(value)) for key, value in store.items()]
    assets: list[tuple[str, bytes]] = []
    if hasattr(layer, "save_assets"):
        with tempfile.TemporaryDirectory(prefix="keras_pickle_assets_") as directory:
            layer.save_assets(directory)
            for root, _dirs, files in os.walk(directory):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    with open(full, "rb") as f:
                        assets.append((os.path.relpath(full, directory).replace(os.sep, "/"), f.read()))
    return LayerState(index=index, own_variables=own_variables, assets=assets)


def _apply_layer(layer: Any, state: LayerState) -> None:
    own = [(key, array) for key, array in state.own_variables if not key.startswith(_STATES_PREFIX)]
    carried = [(key, array) for key, array in state.own_variables if key.startswith(_STATES_PREFIX)]
    # Keras's own loader calls load_own_variables before load_assets.
    if own:
        # The layer's own code may keep what it is given: arrays of its own,
        # never views of the caller's buffers or the payload.
        layer.load_own_variables({key: np.array(array, copy=True) for key, array in own})
    if carried:
        targets = _carried_states(layer)
        assign_in_order(targets, carried, owner=f"the carried states of {_describe(layer)}")
    if state.assets and hasattr(layer, "load_assets"):
        with tempfile.TemporaryDirectory(prefix="keras_pickle_assets_") as directory:
            root = os.path.realpath(directory)
            for relative, content in state.assets:
                target = os.path.realpath(os.path.join(root, relative))
                if not target.startswith(root + os.sep):
                    raise StateMismatchError(f"Refusing asset path outside its directory: {relative!r}.")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(content)
            layer.load_assets(directory)
