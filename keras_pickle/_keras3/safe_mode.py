"""What safe mode needs from Keras 3: its registry, what the caller names, and how its deserializer
resolves a config's names.

The rules (the vocabulary, Keras's base classes, its refused layers) and
the decision are safe mode's own (:mod:`keras_pickle._safe_mode`); this module only looks up what Keras
alone knows: :func:`registered_with_keras`, :func:`named_by_caller` and :func:`resolver`, every object
Keras 3's deserializer could resolve a config node to.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import keras
from keras.src.api_export import get_symbol_from_name
from keras.src.backend.common import global_state
from keras.src.saving import object_registration, serialization_lib

from .._options import load_options
from .._safe_mode import resolution
from .._safe_mode.decision import Candidates, package_of
from .._wire import config_walk
from .._wire.refs import is_carried, unwrap
from .._wire.schema import DIALECT_KERAS3
from . import convert as _convert

_LEGACY_MODELS = {"Functional": keras.src.models.Functional, "Model": keras.Model, "Sequential": keras.Sequential}
"""What Keras's legacy ``model_from_config`` adds to the layer namespace it resolves module-less names in."""


def registered_with_keras(function: Any) -> bool:
    """Whether ``function`` was registered for deserialization (``@register_keras_serializable``)."""
    name = object_registration.GLOBAL_CUSTOM_NAMES.get(function)
    return name is not None and object_registration.GLOBAL_CUSTOM_OBJECTS.get(name) is function


def named_by_caller() -> frozenset[int]:
    """``id()`` of every object the loading code named: ``keras_pickle.loads(custom_objects=...)`` and the
    ``keras.saving.custom_object_scope`` it holds (Keras consults both before its own names)."""
    options = load_options()
    scope = global_state.get_global_attribute("custom_objects_scope_dict", {}) or {}
    return frozenset(id(obj) for obj in (*options.custom_objects.values(), *scope.values()))


def resolver(table: dict[str, Any], caller_objects: dict[str, Any]) -> Candidates:
    """Every object Keras 3's deserializer could resolve a config node to, as it looks names up:
    custom objects (the payload's ``table``, the caller's, a held ``custom_object_scope``, Keras's
    registry, and the registered-name suffix match Keras applies to ``builtins`` functions), Keras's
    legacy layer namespace (module-less layer configs in ``Sequential`` and Functional models),
    Keras's public API and built-in function modules, and the attribute of an imported module
    (:func:`~keras_pickle._safe_mode.resolution.module_candidates`). A name in a module Keras would import
    is refused: safe mode never imports."""
    legacy_namespace = {**vars(keras.src.layers), **_LEGACY_MODELS}

    def candidates(node: dict) -> Iterator[tuple[Any, bool]]:
        spelt = config_walk.spellings(node)
        scope = global_state.get_global_attribute("custom_objects_scope_dict", {}) or {}
        for name in spelt:
            for source in (table, caller_objects, scope, object_registration.GLOBAL_CUSTOM_OBJECTS):
                if name in source:
                    yield unwrap(source[name]), is_carried(source[name])
            for key, value in table.items():
                if isinstance(key, str) and key.endswith(f">{name}"):
                    yield unwrap(value), is_carried(value)
            if node["class_name"] != "function":
                yield legacy_namespace.get(name), False
        module = node.get("module")
        if not (isinstance(module, str) and module):
            return
        if module == "builtins":
            for namespace in serialization_lib.BUILTIN_MODULES:
                for name in spelt:
                    yield get_symbol_from_name(f"keras.{namespace}.{name}"), False
        if package_of(module) == "keras":
            # Keras finds its public names (and keras_pickle a backend's own optimizer, by its public class)
            # without importing the module the config names: where one is found, that is all it resolves.
            found = [
                obj
                for name in spelt
                for obj in (get_symbol_from_name(f"{module}.{name}"), _convert.public_optimizer(module, name))
                if obj is not None
            ]
            if found:
                yield from ((obj, False) for obj in found)
                return
        yield from resolution.module_candidates(node, DIALECT_KERAS3)

    return candidates
