"""Safe mode's Keras-aware half: which Keras classes and functions a payload may reach, decided on
what each name resolves to, and Keras's own safe mode held for the whole rebuild.

The restricted reader (:mod:`keras_pickle._reader`) resolves every global of the stream exactly and
judges the object with :func:`globals_policy`. After the body's structure is checked,
:func:`vet_body` judges what the stream's objects *stand for*: the payload's custom objects (which
Keras consults before its own names, so the table can rename anything) may never be Keras's own
classes or functions, nor the class of a recorded constructor call a Keras built-in; and every class or function a
config names is resolved as Keras will resolve it, with the payload's custom objects applied,
then refused if it is a Lambda or foreign-format layer, a Keras function that is not a built-in
activation, loss, metric or op (``keras.config`` setters, ``set_random_seed``,
``enable_unsafe_deserialization``...), or a name in a module that is not imported (Keras would
import it). :func:`keras_safe_mode` holds Keras's safe-mode scope meanwhile, so that a process-wide
``keras.config.enable_unsafe_deserialization()`` never weakens a safe load.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Iterator
from typing import Any

import keras
from keras.src.api_export import get_symbol_from_name
from keras.src.saving import object_registration, serialization_lib

from .. import _dialect
from .._keras3 import convert as _convert
from .._reader.allowlist import KERAS_PACKAGES, GlobalsPolicy, exported_functions, package_of, refusal
from .._tfkeras import build as _tfkeras_build
from .._tfkeras import classes as _tfkeras_classes
from .._tfkeras import safe as _tfkeras_safe
from .._wire import configs, schema
from .._wire.refs import InertReference, unwrap
from .._wire.reprs import bounded_repr
from ..errors import LambdaLayerError, UnsafePayloadError

_PURE_NAMESPACES = ("activations", "losses", "metrics", "ops")


def safe_mode_bases() -> tuple[type, ...]:
    """The Keras classes whose subclasses safe mode lets a payload name (as inert references)."""
    return (
        keras.src.saving.keras_saveable.KerasSaveable,
        keras.initializers.Initializer,
        keras.regularizers.Regularizer,
        keras.constraints.Constraint,
        keras.optimizers.schedules.LearningRateSchedule,
        keras.callbacks.Callback,
        keras.DTypePolicy,
    )


def refused_layer_classes() -> dict[type, str]:
    """Keras layers whose loading runs code or another format stored in the config, and what it runs."""
    refused = {keras.layers.Lambda: "the Python code stored in the payload"}
    for name, runs in configs.FOREIGN_LAYERS.items():
        cls = getattr(keras.layers, name, None)
        if isinstance(cls, type):
            refused[cls] = runs
    return refused


@functools.cache
def _pure_keras_functions() -> frozenset[int]:
    """``id()`` of every function Keras exports as an activation, loss, metric or op (deserializers aside)."""
    return exported_functions(keras, _PURE_NAMESPACES)


def registered_with_keras(function: Any) -> bool:
    """Whether ``function`` was registered for deserialization (``@register_keras_serializable``)."""
    name = object_registration.GLOBAL_CUSTOM_NAMES.get(function)
    return name is not None and object_registration.GLOBAL_CUSTOM_OBJECTS.get(name) is function


def vouched_function(function: Any) -> bool:
    """Whether Keras deserializes ``function`` (a function of a library package) as part of a model."""
    return id(function) in _pure_keras_functions() or registered_with_keras(function)


def globals_policy() -> GlobalsPolicy:
    """What the restricted reader lets a stream name (see :mod:`keras_pickle._reader.allowlist`):
    Keras 3's saveable classes, and tf-keras's where tf-keras is imported (a tf-keras payload imports
    it before the stream is read: :func:`keras_pickle._dialect.require`)."""
    if not _tfkeras_classes.is_imported():
        return GlobalsPolicy(
            allowed_bases=safe_mode_bases(),
            refused_bases=tuple(refused_layer_classes()),
            vouched_function=vouched_function,
        )
    return GlobalsPolicy(
        allowed_bases=safe_mode_bases() + _tfkeras_safe.safe_mode_bases(),
        refused_bases=tuple(refused_layer_classes()) + tuple(_tfkeras_safe.refused_layer_classes()),
        vouched_function=lambda f: vouched_function(f) or _tfkeras_safe.vouched_function(f),
    )


@contextlib.contextmanager
def keras_safe_mode(safe_mode: bool, dialect: str = _dialect.KERAS3) -> Iterator[None]:
    """Within, when ``safe_mode``: Keras's own safe mode is on for this thread, whatever
    ``keras.config.enable_unsafe_deserialization()`` said before (Keras's scope is thread-local and
    is restored on exit); tf-keras's, for a tf-keras payload."""
    if not safe_mode:
        yield
        return
    if dialect == _dialect.TF_KERAS:
        with _tfkeras_build.safe_mode_scope(True):
            yield
        return
    with serialization_lib.SafeModeScope(True):
        yield


# --------------------------------------------------------------------------
# What the body's objects stand for
# --------------------------------------------------------------------------


def is_keras_builtin(obj: Any) -> bool:
    """Whether Keras itself defines ``obj`` (a class or function)."""
    return package_of(getattr(obj, "__module__", "") or "") in KERAS_PACKAGES


def vet_body(body: dict, dialect: str = _dialect.KERAS3) -> None:
    """Refuse, before Keras builds anything, a body whose objects stand for what safe mode refuses.

    ``body`` has passed the schema's checks (its custom objects are inert references). A tf-keras
    body's configs are judged as tf-keras resolves them (:mod:`keras_pickle._tfkeras.safe`).
    """
    custom_objects = {key: unwrap(value) for key, value in body.get("custom_objects", {}).items()}
    policy = globals_policy()
    for key, obj in custom_objects.items():
        reason = refusal(obj, policy)
        if reason is None and is_keras_builtin(obj):
            reason = "it is Keras's own, and no custom object stands for a Keras built-in class (Keras names its own)"
        if reason is not None:
            what = f"custom object {bounded_repr(key)} ({_qualified(obj)})"
            raise UnsafePayloadError(f"Safe mode refused {what}: {reason}.", what=what)
    for entry in body.get("constructed") or ():
        cls = unwrap(entry[0]) if isinstance(entry, tuple) and entry else None
        if isinstance(cls, type) and is_keras_builtin(cls):
            what = f"constructed class {_qualified(cls)}"
            raise UnsafePayloadError(
                f"Safe mode refused {what}: recorded constructor calls are made for user classes only.", what=what
            )
    vet = _tfkeras_safe.vet_config if dialect == _dialect.TF_KERAS else vet_config
    for text in _config_texts(body):
        vet(schema.parse_config(text, "a config it holds"), custom_objects)


def _config_texts(body: dict) -> Iterator[str]:
    yield body["config"]
    for held in body.get("held_optimizers") or ():
        yield held[1]
    yield from (body.get("compile_objects") or {}).values()


def vet_config(config: Any, custom_objects: dict[str, Any]) -> None:
    """Refuse a config naming anything Keras would resolve to a refused class or function (see module)."""
    refused_layers = refused_layer_classes()
    for ref in configs.object_refs(config):
        resolved = resolve_like_keras(ref, custom_objects)
        if isinstance(resolved, type):
            matches = [cls for cls in refused_layers if issubclass(resolved, cls)]
            if matches:
                closest = max(matches, key=lambda cls: len(cls.__mro__))  # FlaxLayer, not its base JaxLayer
                _refuse_layer(ref, resolved, closest, refused_layers[closest])
        elif isinstance(resolved, types.FunctionType) and package_of(resolved.__module__) in KERAS_PACKAGES:
            if not vouched_function(resolved):
                what = f"Keras function {_qualified(resolved)}"
                raise UnsafePayloadError(
                    f"Safe mode refused {what}, named by the config: only Keras's built-in activations, losses, "
                    "metrics and ops (and functions registered with Keras) may be part of a model; this one "
                    "changes process state or touches files.",
                    what=what,
                )


def _refuse_layer(ref: dict, resolved: type, refused: type, runs: str) -> None:
    inner = ref.get("config")
    layer = bounded_repr(inner.get("name", "?") if isinstance(inner, dict) else "?")
    named = "" if resolved is refused else f" (named {bounded_repr(ref.get('class_name'))})"
    what = f"{refused.__name__} layer {layer}"
    message = (
        f"Safe mode refused {what}{named}: loading it would run {runs}. If you trust the source of this "
        "payload, load it with keras_pickle.loads(data, safe_mode=False)."
    )
    raise (LambdaLayerError if refused is keras.layers.Lambda else UnsafePayloadError)(message, what=what)


def resolve_like_keras(ref: dict, custom_objects: dict[str, Any]) -> Any:
    """What Keras's deserializer resolves ``ref`` to, as ``serialization_lib`` looks it up
    (custom objects and registered names first, then Keras's public names, its built-in function
    modules, then a module's attribute), without importing; ``None`` if Keras would not find it.

    A name in a module that is not imported is refused: Keras would import the module.
    """
    class_name, module = ref.get("class_name"), ref.get("module")
    is_function = class_name == "function"
    name = ref.get("config") if is_function else class_name
    key = configs.custom_object_key(ref)
    if not isinstance(name, str):
        return None
    for table in (custom_objects, object_registration.GLOBAL_CUSTOM_OBJECTS):
        if isinstance(key, str) and key in table:
            return unwrap(table[key])
    if not isinstance(module, str) or not module:
        return None
    if package_of(module) in KERAS_PACKAGES:
        found = get_symbol_from_name(f"{module}.{name}") or _convert.public_optimizer(module, name)
        if found is not None:
            return found  # a backend's own optimizer: rebuilt as its public class (_convert.portable_config)
    if is_function and module == "builtins":
        for namespace in serialization_lib.BUILTIN_MODULES:
            found = get_symbol_from_name(f"keras.{namespace}.{name}")
            if found is not None:
                return found
        return None
    if package_of(module) not in {"keras", "keras_hub", "keras_cv", "keras_nlp"}:
        return None  # Keras does not look there
    loaded = sys.modules.get(module)
    if loaded is None:
        what = f"{module}.{name}"
        raise UnsafePayloadError(
            f"Safe mode refused {bounded_repr(what)}, named by the config: its module is not imported, Keras would "
            "import it to resolve the name, and safe mode never imports modules.",
            what=what,
        )
    return vars(loaded).get(name)


def _qualified(obj: Any) -> str:
    if isinstance(obj, InertReference):
        return obj.qualified_name
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
