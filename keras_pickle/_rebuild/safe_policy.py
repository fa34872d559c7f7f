"""Safe mode's Keras 3 facts: what Keras vouches for, how its deserializer resolves a config's names,
and Keras's own safe mode held for the whole rebuild.

The decision itself is :func:`keras_pickle._reader.allowlist.refusal` (one function, Keras-free);
this module gives it what only Keras knows: :func:`globals_policy` (Keras's base classes, its
refused layers, the functions it vouches for, what the caller named) and :func:`resolver` (every
object Keras could resolve a config node to). :func:`vet_body` judges, before Keras builds
anything, every custom object of a body and every node of every config it holds, in the payload's
dialect. :func:`keras_safe_mode` holds Keras's safe-mode scope meanwhile, so that a process-wide
``keras.config.enable_unsafe_deserialization()`` never weakens a safe load.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import Any

import keras
from keras.src.api_export import get_symbol_from_name
from keras.src.backend.common import global_state
from keras.src.saving import object_registration, serialization_lib

from .. import _dialect
from .._keras3 import convert as _convert
from .._options import load_options
from .._reader.allowlist import (
    KERAS_PACKAGES,
    Candidates,
    GlobalsPolicy,
    dotted_attribute,
    exported_functions,
    judge_config,
    package_of,
    provide_policy,
    refusal,
)
from .._tfkeras import build as _tfkeras_build
from .._tfkeras import classes as _tfkeras_classes
from .._tfkeras import safe as _tfkeras_safe
from .._wire import configs, schema
from .._wire.refs import InertReference, is_carried, unwrap
from .._wire.reprs import bounded_repr
from ..errors import UnsafePayloadError

_PURE_NAMESPACES = ("activations", "losses", "metrics", "ops")
_LEGACY_MODELS = {"Functional": keras.src.models.Functional, "Model": keras.Model, "Sequential": keras.Sequential}
"""What Keras's legacy ``model_from_config`` adds to the layer namespace it resolves module-less names in."""


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
    refused = {}
    for name, runs in configs.REFUSED_LAYERS.items():
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
    """Whether Keras vouches for ``function``: a built-in activation, loss, metric or op, or registered."""
    return id(function) in _pure_keras_functions() or registered_with_keras(function)


def named_by_caller() -> frozenset[int]:
    """``id()`` of every object the loading code named: ``keras_pickle.loads(custom_objects=...)`` and the
    ``keras.saving.custom_object_scope`` it holds (Keras consults both before its own names)."""
    options = load_options()
    scope = global_state.get_global_attribute("custom_objects_scope_dict", {}) or {}
    return frozenset(id(obj) for obj in (*options.custom_objects.values(), *scope.values()))


def globals_policy() -> GlobalsPolicy:
    """Safe mode's policy for this load (see :mod:`keras_pickle._reader.allowlist`): Keras 3's bases,
    and tf-keras's where tf-keras is imported (a payload never makes safe mode import it before its
    checks: :func:`keras_pickle._protocol.reconstruct.restore`); the caller's custom objects and
    ``allow_callbacks`` from the enclosing ``keras_pickle.loads``."""
    options = load_options()
    allowed, refused = safe_mode_bases(), tuple(refused_layer_classes())
    callbacks, records = (keras.callbacks.Callback,), (keras.callbacks.History,)
    vouched, caller = vouched_function, named_by_caller()
    if _tfkeras_classes.is_imported():
        caller |= _tfkeras_safe.named_by_caller()
        allowed += _tfkeras_safe.safe_mode_bases()
        refused += tuple(_tfkeras_safe.refused_layer_classes())
        callbacks += (_tfkeras_classes.tf_keras().callbacks.Callback,)
        records += (_tfkeras_classes.tf_keras().callbacks.History,)

        def vouched(f: Any) -> bool:
            return vouched_function(f) or _tfkeras_safe.vouched_function(f)

    return GlobalsPolicy(
        allowed_bases=allowed,
        refused_bases=refused,
        vouched_function=vouched,
        named_by_caller=caller,
        callback_bases=callbacks,
        record_classes=records,
        allow_callbacks=options.allow_callbacks,
    )


def dialect_resolver(table: dict[str, Any], dialect: str = _dialect.KERAS3) -> Candidates:
    """The resolver of ``dialect`` (tf-keras's only where tf-keras is imported: nothing is imported here)."""
    caller = load_options().custom_objects
    if dialect == _dialect.TF_KERAS and _tfkeras_classes.is_imported():
        return _tfkeras_safe.resolver(table, caller)
    return resolver(table, caller)


provide_policy(globals_policy, dialect_resolver)


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


def vet_body(body: dict, dialect: str = _dialect.KERAS3, decoded: list | None = None) -> None:
    """Refuse, before Keras builds anything, a body whose objects stand for what safe mode refuses.

    ``body`` has passed the schema's checks (its custom objects are inert references). Every custom
    object is judged by :func:`~keras_pickle._reader.allowlist.refusal`, and may never be Keras's own
    (Keras names its own); every config the body holds is judged by
    :func:`~keras_pickle._reader.allowlist.judge_config`, resolved as the payload's dialect resolves it.
    ``decoded``: those configs already decoded (what :func:`vet_names` returns), else they are decoded here.
    """
    table = body.get("custom_objects", {})
    policy = globals_policy()
    for key, value in table.items():
        obj = unwrap(value)
        reason = refusal(obj, policy, carried=is_carried(value))
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
    candidates, name = dialect_resolver(table, dialect), _dialect.name(dialect)
    for config in _decoded_configs(body) if decoded is None else decoded:
        judge_config(config, policy, candidates, dialect=name)


def vet_names(body: dict) -> list:
    """What safe mode refuses in a checked body by name alone, before anything is imported for it
    (a tf-keras payload's dialect included): a Lambda or foreign-format layer spelt any way, an
    inline Python lambda, at any depth of any config it holds. Returns those configs decoded, for
    :func:`vet_body`."""
    decoded, policy = _decoded_configs(body), globals_policy()
    for config in decoded:
        judge_config(config, policy, lambda node: ())
    return decoded


def _decoded_configs(body: dict) -> list:
    """Every config the body holds (the model's, held optimizers', compile objects'), decoded; never changed
    by the judging, so one decoding serves both :func:`vet_names` and :func:`vet_body`."""
    texts = [body["config"], *(held[1] for held in body.get("held_optimizers") or ())]
    texts += (body.get("compile_objects") or {}).values()
    return [schema.parse_config(text, "a config it holds") for text in texts]


_KERAS_IMPORTS = ("keras", "keras_hub", "keras_cv", "keras_nlp")
"""The packages whose modules Keras 3's deserializer imports to resolve a config's ``module``."""


def resolver(table: dict[str, Any], caller_objects: dict[str, Any]) -> Candidates:
    """Every object Keras 3's deserializer could resolve a config node to, as it looks names up:
    custom objects (the payload's ``table``, the caller's, a held ``custom_object_scope``, Keras's
    registry, and the registered-name suffix match Keras applies to ``builtins`` functions), Keras's
    legacy layer namespace (module-less layer configs in ``Sequential`` and Functional models),
    Keras's public API and built-in function modules, and the attribute of an imported module.
    A name in a module Keras would import is refused: safe mode never imports."""
    legacy_namespace = {**vars(keras.src.layers), **_LEGACY_MODELS}

    def candidates(node: dict) -> Iterator[tuple[Any, bool]]:
        names = configs.spellings(node)
        scope = global_state.get_global_attribute("custom_objects_scope_dict", {}) or {}
        for name in names:
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
                for name in names:
                    yield get_symbol_from_name(f"keras.{namespace}.{name}"), False
        package = package_of(module)
        if package == "keras":
            # Keras finds its public names (and keras_pickle a backend's own optimizer, by its public class)
            # without importing the module the config names: where one is found, that is all it resolves.
            found = [
                obj
                for name in names
                for obj in (get_symbol_from_name(f"{module}.{name}"), _convert.public_optimizer(module, name))
                if obj is not None
            ]
            if found:
                yield from ((obj, False) for obj in found)
                return
        if package in _KERAS_IMPORTS:
            loaded = sys.modules.get(module)
            if loaded is None:
                what = f"{module}.{names[0] if names else '?'}"
                raise UnsafePayloadError(
                    f"Safe mode refused {bounded_repr(what)}, named by the Keras config: its module is not imported, "
                    "Keras would import it to resolve the name, and safe mode never imports modules. Import it "
                    "first if you trust it.",
                    what=what,
                )
            for name in names:
                yield vars(loaded).get(name), False
            for dotted in configs.dotted_names(node):
                yield dotted_attribute(vars(loaded), dotted), False

    return candidates


def _qualified(obj: Any) -> str:
    if isinstance(obj, InertReference):
        return obj.qualified_name
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
