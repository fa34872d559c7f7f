"""What safe mode needs from tf-keras: its registry, the scope the caller holds, and how its deserializer
resolves a config's names.

The rules (the vocabulary, tf-keras's base classes, its refused layers, what its op layers
may call) and the decision are safe mode's own (:mod:`keras_pickle._safe_mode`); this module only looks
up what tf-keras alone knows. tf-keras's deserializer resolves a config's ``module`` + ``class_name`` by
importing any module and taking any attribute of it, resolves module-less names at every depth, and keeps
only Lambda bytecode behind its safe mode: :func:`resolver` yields every object it could resolve a node
to, refusing a name whose module is not imported (tf-keras would import it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._safe_mode import resolution
from .._safe_mode.decision import Candidates
from .._wire import config_walk
from .._wire.refs import is_carried, unwrap
from .._wire.schema import DIALECT_TF_KERAS
from . import classes

_MODULES = ("keras", "tf_keras")


def _registry() -> Any:
    return classes.tf_keras().src.saving.object_registration


def registries() -> list[dict[str, Any]]:
    """Where tf-keras looks a name up before anything of its own: a held custom-object scope, its registry."""
    return [_registry()._THREAD_LOCAL_CUSTOM_OBJECTS.__dict__, _registry()._GLOBAL_CUSTOM_OBJECTS]


def registered_with_tf_keras(function: Any) -> bool:
    """Whether ``function`` was registered with ``tf_keras.saving.register_keras_serializable``."""
    registry = _registry()
    name = registry._GLOBAL_CUSTOM_NAMES.get(function)
    return name is not None and registry._GLOBAL_CUSTOM_OBJECTS.get(name) is function


def named_by_caller() -> frozenset[int]:
    """``id()`` of the objects a ``tf_keras.saving.custom_object_scope`` the loading code holds names."""
    return frozenset(id(obj) for obj in _registry()._THREAD_LOCAL_CUSTOM_OBJECTS.__dict__.values())


def resolver(table: dict[str, Any], caller_objects: dict[str, Any]) -> Candidates:
    """Every object tf-keras's deserializer could resolve a config node to: custom objects (the payload's
    ``table``, the caller's, a held ``custom_object_scope``, the registry), tf-keras's layer namespaces
    (it resolves module-less names at every depth), its public API and built-in function modules, the
    attribute of an imported module (:func:`~keras_pickle._safe_mode.resolution.module_candidates`: tf-keras
    imports any module a config names, so a module not imported is refused), and what an op layer calls
    (:func:`~keras_pickle._safe_mode.resolution.op_layer_calls`)."""
    namespaces = (vars(classes.tf_keras().layers), vars(classes.tf_keras().src.layers), _legacy_objects())

    def candidates(node: dict) -> Iterator[tuple[Any, bool]]:
        found = list(named(node))
        yield from found
        layers = resolution.op_layer_kinds(obj for obj, _ in found if isinstance(obj, type))
        yield from resolution.op_layer_calls(layers, node)

    def named(node: dict) -> Iterator[tuple[Any, bool]]:
        spelt = config_walk.spellings(node)
        scope = _registry()._THREAD_LOCAL_CUSTOM_OBJECTS.__dict__
        for name in spelt:
            for source in (table, caller_objects, scope, _registry()._GLOBAL_CUSTOM_OBJECTS):
                if name in source:
                    yield unwrap(source[name]), is_carried(source[name])
            if node["class_name"] != "function":
                for namespace in namespaces:
                    yield namespace.get(name), False
        module = node.get("module")
        if not (isinstance(module, str) and module):
            return
        if module in _MODULES or module.startswith(tuple(f"{m}." for m in _MODULES)):
            for name in spelt:
                yield resolution.public_symbol(f"{module}.{name}"), False
        if module == "builtins":
            for namespace in classes.tf_keras().src.saving.serialization_lib.BUILTIN_MODULES:
                for name in spelt:
                    yield resolution.public_symbol(f"keras.{namespace}.{name}"), False
            # Where none is found, tf-keras goes on to the builtins module itself, as below.
        yield from resolution.module_candidates(node, DIALECT_TF_KERAS)

    return candidates


def _legacy_objects() -> dict[str, Any]:
    """The namespace tf-keras's layer deserializer resolves module-less class names in."""
    serialization = classes.tf_keras().src.layers.serialization
    serialization.populate_deserializable_objects()
    return dict(getattr(serialization.LOCAL, "ALL_OBJECTS", {}))
