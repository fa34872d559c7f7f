"""Safe mode's tf-keras facts: its base classes, what it vouches for, and how its deserializer
resolves a config's names.

tf-keras's deserializer resolves a config's ``module`` + ``class_name`` by importing any module and
taking any attribute of it, resolves module-less names at every depth, and keeps only Lambda
bytecode behind its safe mode. The decision is safe mode's one
(:func:`keras_pickle._reader.allowlist.refusal`, through ``judge_config``); this module gives it
tf-keras's bases, refused layers and vouched functions, and :func:`resolver`, every object tf-keras
could resolve a node to, refusing a name whose module is not imported (tf-keras would import it).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from typing import Any

from .._reader.allowlist import Candidates, dotted_attribute, exported_functions
from .._wire import configs
from .._wire.refs import is_carried, unwrap
from .._wire.reprs import bounded_repr
from ..errors import UnsafePayloadError
from . import classes

_PURE_NAMESPACES = ("activations", "losses", "metrics")
_MODULES = ("keras", "tf_keras")


def safe_mode_bases() -> tuple[type, ...]:
    """tf-keras's classes whose subclasses a payload may name (as safe mode's inert references)."""
    k = classes.tf_keras()
    return (
        k.layers.Layer,
        k.losses.Loss,
        k.metrics.Metric,
        k.optimizers.Optimizer,
        k.initializers.Initializer,
        k.regularizers.Regularizer,
        k.constraints.Constraint,
        k.optimizers.schedules.LearningRateSchedule,
        k.callbacks.Callback,
    )


def refused_layer_classes() -> dict[type, str]:
    """tf-keras layers whose loading runs code or another format stored in the config, and what it runs."""
    layers = classes.tf_keras().layers
    return {
        cls: runs
        for name, runs in configs.REFUSED_LAYERS.items()
        if isinstance(cls := getattr(layers, name, None), type)
    }


@functools.cache
def _pure_functions() -> frozenset[int]:
    return exported_functions(classes.tf_keras(), _PURE_NAMESPACES)


def _registry() -> Any:
    return classes.tf_keras().src.saving.object_registration


def registered_with_tf_keras(function: Any) -> bool:
    registry = _registry()
    name = registry._GLOBAL_CUSTOM_NAMES.get(function)
    return name is not None and registry._GLOBAL_CUSTOM_OBJECTS.get(name) is function


def vouched_function(function: Any) -> bool:
    """Whether tf-keras deserializes ``function`` as part of a model: a built-in activation, loss or
    metric, or a function registered with ``tf_keras.saving.register_keras_serializable``."""
    return id(function) in _pure_functions() or registered_with_tf_keras(function)


def named_by_caller() -> frozenset[int]:
    """``id()`` of the objects a ``tf_keras.saving.custom_object_scope`` the loading code holds names."""
    return frozenset(id(obj) for obj in _registry()._THREAD_LOCAL_CUSTOM_OBJECTS.__dict__.values())


def resolver(table: dict[str, Any], caller_objects: dict[str, Any]) -> Candidates:
    """Every object tf-keras's deserializer could resolve a config node to: custom objects (the payload's
    ``table``, the caller's, a held ``custom_object_scope``, the registry), tf-keras's layer namespaces
    (it resolves module-less names at every depth), its public API and built-in function modules, and
    the attribute of an imported module. tf-keras imports any module a config names: a module not
    imported is refused (safe mode never imports)."""
    namespaces = (vars(classes.tf_keras().layers), vars(classes.tf_keras().src.layers), _legacy_objects())

    def candidates(node: dict) -> Iterator[tuple[Any, bool]]:
        names = configs.spellings(node)
        scope = _registry()._THREAD_LOCAL_CUSTOM_OBJECTS.__dict__
        for name in names:
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
            for name in names:
                yield _public_symbol(f"{module}.{name}"), False
        if module == "builtins":
            for namespace in classes.tf_keras().src.saving.serialization_lib.BUILTIN_MODULES:
                for name in names:
                    yield _public_symbol(f"keras.{namespace}.{name}"), False
            return
        tf_keras_module = "tf_" + module if module == "keras" or module.startswith("keras.") else module
        loaded = sys.modules.get(tf_keras_module)
        if loaded is None:
            what = f"{module}.{names[0] if names else '?'}"
            raise UnsafePayloadError(
                f"Safe mode refused {bounded_repr(what)}, named by the tf-keras config: tf-keras would import module "
                f"{bounded_repr(module)} to resolve it, and safe mode never imports modules.",
                what=what,
            )
        for name in names:
            yield vars(loaded).get(name), False
        for dotted in configs.dotted_names(node):
            yield dotted_attribute(vars(loaded), dotted), False

    return candidates


def _legacy_objects() -> dict[str, Any]:
    """The namespace tf-keras's layer deserializer resolves module-less class names in."""
    serialization = classes.tf_keras().src.layers.serialization
    serialization.populate_deserializable_objects()
    return dict(getattr(serialization.LOCAL, "ALL_OBJECTS", {}))


def _public_symbol(api_name: str) -> Any:
    from_tf = sys.modules.get("tensorflow.python.util.tf_export")
    return None if from_tf is None else from_tf.get_symbol_from_name(api_name)
