"""State a layer keeps outside ``model.variables``, keyed by the layer's place in the model.

* What Keras's own saving hooks write: ``save_assets`` (StringLookup and
  TextVectorization vocabularies, KerasHub tokenizers' vocabularies and
  merges) and a ``save_own_variables`` of the layer's own.
* A stateful RNN's carried ``states`` (Keras variables that
  ``model.variables`` leaves out).

Each piece is keyed by the layer's place (:attr:`keras_pickle._keras3.survey.Survey.places`:
``preprocessor/tokenizer``), so that a layer the original created late (a
KerasHub preprocessor builds its packer on first use) shifts nothing; a
piece with no layer at its place in the rebuilt object is an error that
names both. A positional place (``#3/``, :func:`keras_pickle._wire.layout.positional_place`)
names a layer by its index in the rebuilt object's ``_flatten_layers()`` order instead: it is what
the index of a format version 1 or 2 payload becomes when :mod:`keras_pickle._wire.upgrade`
brings it to the current shape.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import keras
import numpy as np

from .._blueprint import LayerState as LayerState
from .._safe_mode.opens import ASSET_DIRECTORY_PREFIX
from .._wire.layout import place_position
from ..errors import StateMismatchError
from . import backend as _backend
from .census import census_of

# Keys of state Keras keeps outside ``model.variables``, in a layer's own-variables store.
STATES_PREFIX = "keras_pickle:states/"


def capture(obj: Any) -> list[LayerState]:
    """The state of every layer of ``obj`` (or of its census) that keeps any outside its variables."""
    census = census_of(obj)
    return [_capture_layer(census.place_of(layer), layer) for layer in census.layers if _has_custom_hooks(layer)]


def apply(obj: Any, states: list[LayerState], describe: str, assign: Any) -> None:
    """Load ``states`` into the layers of ``obj`` (freshly rebuilt, or its census), found by place (or position).

    ``assign(targets, values, owner=...)`` assigns carried RNN states. A
    preprocessing layer that got no state derives what Keras's loader lets
    it derive (:func:`_reload_own_variables`).
    """
    census = census_of(obj)
    layers = census.layers
    by_place = {census.places.get(id(layer), f"#layer{index}"): layer for index, layer in enumerate(layers)}
    loaded: set[int] = set()
    for state in states:
        layer = _find(state.place, layers, by_place, describe)
        _apply_layer(layer, state, assign)
        loaded.add(id(layer))
    for layer in layers:
        if id(layer) not in loaded and _derives_state_on_load(layer):
            _reload_own_variables(layer)


def _find(place: str, layers: list, by_place: dict[str, Any], describe: str) -> Any:
    position = place_position(place)
    if position is not None:
        if position >= len(layers):
            raise StateMismatchError(
                f"The payload holds state for layer #{position}, but the rebuilt {describe} has only "
                f"{len(layers)} layers."
            )
        return layers[position]
    layer = by_place.get(place)
    if layer is None:
        shown = ", ".join(repr(p or "(the object itself)") for p in sorted(by_place)[:12])
        raise StateMismatchError(
            f"The payload holds state (a vocabulary, assets or a layer's own variables) for the layer at "
            f"'{place}' of {describe}, but the object rebuilt from its config has no layer there (it has: "
            f"{shown}{', ...' if len(by_place) > 12 else ''}). Its config does not recreate that layer.",
            path=place,
        )
    return layer


def _has_custom_hooks(layer: Any) -> bool:
    """Layers whose state Keras's variables do not fully describe."""
    return _has_saving_hooks(layer) or bool(carried_states(layer))


def _has_saving_hooks(layer: Any) -> bool:
    """Layers with assets, or with ``save_own_variables`` / ``load_own_variables`` of their own."""
    if hasattr(layer, "save_assets"):
        return True
    for name in ("save_own_variables", "load_own_variables"):
        hook = getattr(type(layer), name, None)
        if hook is not None and not hook.__module__.startswith("keras."):
            return True
    return False


def carried_states(layer: Any) -> list:
    """A stateful RNN's carried states: Keras variables that ``model.variables`` leaves out."""
    if not getattr(layer, "stateful", False):
        return []
    states = getattr(layer, "states", None)
    if not isinstance(states, (list, tuple)) or not all(isinstance(s, keras.Variable) for s in states):
        return []
    return list(states)


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


def _capture_layer(place: str, layer: Any) -> LayerState:
    store: dict[str, Any] = {}
    if _has_saving_hooks(layer):
        layer.save_own_variables(store)
    for position, carried in enumerate(carried_states(layer)):
        store[f"{STATES_PREFIX}{position}"] = carried
    own_variables = [(str(key), _backend.to_numpy(value)) for key, value in store.items()]
    assets: list[tuple[str, bytes]] = []
    if hasattr(layer, "save_assets"):
        with tempfile.TemporaryDirectory(prefix=ASSET_DIRECTORY_PREFIX) as directory:
            layer.save_assets(directory)
            for root, _dirs, files in os.walk(directory):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    with open(full, "rb") as f:
                        assets.append((os.path.relpath(full, directory).replace(os.sep, "/"), f.read()))
    return LayerState(place=place, own_variables=own_variables, assets=assets)


def _apply_layer(layer: Any, state: LayerState, assign: Any) -> None:
    own = [(key, array) for key, array in state.own_variables if not key.startswith(STATES_PREFIX)]
    carried = [(key, array) for key, array in state.own_variables if key.startswith(STATES_PREFIX)]
    # Keras's own loader calls load_own_variables before load_assets.
    if own:
        # The layer's own code may keep what it is given: arrays of its own,
        # never views of the caller's buffers or the payload.
        layer.load_own_variables({key: np.array(array, copy=True) for key, array in own})
    if carried:
        assign(carried_states(layer), carried, owner=f"the carried states of {type(layer).__name__} '{layer.name}'")
    if state.assets and hasattr(layer, "load_assets"):
        with tempfile.TemporaryDirectory(prefix=ASSET_DIRECTORY_PREFIX) as directory:
            root = os.path.realpath(directory)
            for relative, content in state.assets:
                target = os.path.realpath(os.path.join(root, relative))
                if not target.startswith(root + os.sep):
                    raise StateMismatchError(f"Refusing asset path outside its directory: {relative!r}.")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(content)
            layer.load_assets(directory)
