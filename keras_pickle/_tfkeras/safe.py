"""What safe mode refuses in a tf-keras payload, and lets it name.

tf-keras's deserializer resolves a config's ``module`` + ``class_name`` by importing any module
and taking any attribute of it, and keeps only Lambda bytecode behind its safe mode. So in safe
mode every object a tf-keras config names must resolve without importing anything, as tf-keras's
deserializer would: to a custom object the payload carries (which the restricted reader has judged),
to a registered one, or to tf-keras's own public names. A class must be one of tf-keras's
saveable kinds (layers, models, losses, metrics, optimizers, initializers, regularizers,
constraints, schedules) and not a Lambda layer; a function must be a built-in activation, loss or
metric, or registered. Anything else is refused before tf-keras builds anything.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from .._reader.allowlist import exported_functions
from .._wire import configs
from .._wire.refs import unwrap
from .._wire.reprs import bounded_repr
from ..errors import LambdaLayerError, UnsafePayloadError
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
    """tf-keras layers whose loading runs code stored in the config, and what it runs."""
    return {classes.tf_keras().layers.Lambda: "the Python code stored in the payload"}


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


def vet_config(config: Any, custom_objects: dict[str, Any]) -> None:
    """Refuse a tf-keras config naming anything safe mode refuses (see the module)."""
    refused_layers = refused_layer_classes()
    bases = safe_mode_bases()
    for ref in configs.object_refs(config):
        resolved = _resolve(ref, custom_objects)
        if resolved is None:
            continue  # tf-keras would fail to find it: nothing runs
        if isinstance(resolved, type):
            for refused, runs in refused_layers.items():
                if issubclass(resolved, refused):
                    _refuse_lambda(ref, refused, runs)
            if not issubclass(resolved, bases):
                _refuse(ref, f"{_qualified(resolved)} is not a tf-keras layer, model, loss, metric or optimizer")
        elif not (callable(resolved) and (vouched_function(resolved) or _is_custom(ref, custom_objects))):
            _refuse(ref, f"{_qualified(resolved)} is neither a built-in activation, loss or metric nor registered")


def _is_custom(ref: dict, custom_objects: dict[str, Any]) -> bool:
    key = configs.custom_object_key(ref)
    return isinstance(key, str) and key in custom_objects


def _resolve(ref: dict, custom_objects: dict[str, Any]) -> Any:
    """What tf-keras's deserializer resolves ``ref`` to, without importing; refuses a name it would import."""
    class_name, module = ref.get("class_name"), ref.get("module")
    is_function = class_name == "function"
    name = ref.get("config") if is_function else class_name
    if not isinstance(name, str):
        return None
    key = configs.custom_object_key(ref)
    if isinstance(key, str):
        if key in custom_objects:
            return unwrap(custom_objects[key])
        if key in _registry()._GLOBAL_CUSTOM_OBJECTS:
            return _registry()._GLOBAL_CUSTOM_OBJECTS[key]
    if not module:
        return None  # tf-keras looks nowhere else
    if module in _MODULES or module.startswith(tuple(f"{m}." for m in _MODULES)):
        found = _public_symbol(f"{module}.{name}")
        if found is not None:
            return found
    if is_function and module == "builtins":
        for namespace in classes.tf_keras().src.saving.serialization_lib.BUILTIN_MODULES:
            found = _public_symbol(f"keras.{namespace}.{name}")
            if found is not None:
                return found
        return None
    tf_keras_module = "tf_" + module if module.startswith("keras") else module
    loaded = sys.modules.get(tf_keras_module)
    if loaded is not None and tf_keras_module.startswith("tf_keras"):
        return vars(loaded).get(name)
    _refuse(ref, f"tf-keras would import module {bounded_repr(module)} to resolve it, and safe mode never imports")


def _public_symbol(api_name: str) -> Any:
    from_tf = sys.modules.get("tensorflow.python.util.tf_export")
    return None if from_tf is None else from_tf.get_symbol_from_name(api_name)


def _refuse(ref: dict, why: str) -> None:
    what = f"{bounded_repr(ref.get('module'))}.{bounded_repr(ref.get('class_name'))}"
    raise UnsafePayloadError(f"Safe mode refused {what}, named by the tf-keras config: {why}.", what=what)


def _refuse_lambda(ref: dict, refused: type, runs: str) -> None:
    inner = ref.get("config")
    layer = bounded_repr(inner.get("name", "?") if isinstance(inner, dict) else "?")
    what = f"{refused.__name__} layer {layer}"
    raise LambdaLayerError(
        f"Safe mode refused {what}: loading it would run {runs}. If you trust the source of this payload, "
        "load it with keras_pickle.loads(data, safe_mode=False).",
        what=what,
    )


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
