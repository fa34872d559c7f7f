"""Safe mode at load, before Keras builds anything: a body's custom objects and every config it holds
judged by safe mode's policy, and Keras's own safe mode held for the whole rebuild.

The rules and the decision are :mod:`keras_pickle._safe_mode`'s; :func:`globals_policy` gives it what
the dialects know in this load (each imported Keras's registry: :mod:`keras_pickle._keras3.safe_mode`,
:mod:`keras_pickle._tfkeras.safe_mode`; the caller's custom objects and ``allow_callbacks``), and the
payload's dialect (a :class:`~keras_pickle._dialect.Dialect`) how its deserializer resolves a config's
names. :func:`vet_names` judges what needs no Keras (before a tf-keras payload imports tf-keras),
:func:`vet_body` the rest. :func:`safe_rebuild` holds the dialect's safe-mode scope meanwhile, so that a
process-wide ``keras.config.enable_unsafe_deserialization()`` never weakens a safe load, and
:mod:`keras_pickle._safe_mode.opens`'s guard on the paths the configs name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from keras.src.backend.common import global_state
from keras.src.saving.object_registration import GLOBAL_CUSTOM_OBJECTS

from .. import _dialect
from .._dialect import Dialect
from .._keras3 import safe_mode as _keras3_safe_mode
from .._options import load_options
from .._safe_mode import decision, judge_config, judge_names, opens
from .._safe_mode.decision import GlobalsPolicy, is_keras_own, refusal
from .._tfkeras import classes as _tfkeras_classes
from .._tfkeras import safe_mode as _tfkeras_safe_mode
from .._wire import schema
from .._wire.refs import InertReference, is_carried, unwrap
from .._wire.reprs import bounded_repr
from ..errors import UnsafePayloadError


def globals_policy() -> GlobalsPolicy:
    """Safe mode's policy for this load (:func:`keras_pickle._safe_mode.decision.policy_here`): Keras 3's
    classes and registry, and tf-keras's where tf-keras is imported (a payload never makes safe mode
    import it before its checks: :func:`keras_pickle._protocol.reconstruct.restore`); the caller's custom
    objects and ``allow_callbacks`` from the enclosing ``keras_pickle.loads``."""
    caller = _keras3_safe_mode.named_by_caller()
    registered = _keras3_safe_mode.registered_with_keras
    if _tfkeras_classes.is_imported():
        caller |= _tfkeras_safe_mode.named_by_caller()

        def registered(function: Any) -> bool:
            return _keras3_safe_mode.registered_with_keras(function) or _tfkeras_safe_mode.registered_with_tf_keras(
                function
            )

    options = load_options()
    return decision.policy_here(registered, caller, options.allow_callbacks, options.allow_control_flow)


@contextlib.contextmanager
def safe_rebuild(body: dict, dialect: Dialect, decoded: list | None) -> Iterator[None]:
    """Within: a safe load's rebuild of ``body``, vetted (:func:`vet_body`) under the dialect's own safe
    mode (Keras's scope is thread-local and restored on exit, whatever
    ``keras.config.enable_unsafe_deserialization()`` said before), touching no path its configs name
    (:func:`keras_pickle._safe_mode.opens.never_touching`)."""
    with dialect.safe_mode_scope():
        configs = vet_body(body, dialect, decoded)
        with opens.never_touching(configs):
            yield


def vet_body(body: dict, dialect: Dialect, decoded: list | None = None) -> list:
    """Refuse, before Keras builds anything, a body whose objects stand for what safe mode refuses.

    ``body`` has passed the schema's checks (its custom objects are inert references). Every custom
    object is judged by :func:`~keras_pickle._safe_mode.decision.refusal`, and may never be Keras's own
    (Keras names its own); every config the body holds is judged by
    :func:`~keras_pickle._safe_mode.config_judge.judge_config`, resolved as the payload's dialect resolves it.
    ``decoded``: those configs already decoded (what :func:`vet_names` returns), else they are decoded here.
    Returns the configs it judged, decoded.
    """
    table = body.get("custom_objects", {})
    policy = globals_policy()
    for key, value in table.items():
        obj = unwrap(value)
        reason = refusal(obj, policy, carried=is_carried(value))
        if reason is None and is_keras_own(obj, policy):
            reason = "it is Keras's own, and no custom object stands for a Keras built-in class (Keras names its own)"
        if reason is not None:
            what = f"custom object {bounded_repr(key)} ({_qualified(obj)})"
            raise UnsafePayloadError(f"Safe mode refused {what}: {reason}.", what=what)
    for entry in body.get("constructed") or ():
        cls = unwrap(entry[0]) if isinstance(entry, tuple) and entry else None
        if isinstance(cls, type) and is_keras_own(cls, policy):
            what = f"constructed class {_qualified(cls)}"
            raise UnsafePayloadError(
                f"Safe mode refused {what}: recorded constructor calls are made for user classes only.", what=what
            )
    candidates, name = dialect.resolver(table, load_options().custom_objects), _dialect.name(dialect.name)
    configs = _decoded_configs(body) if decoded is None else decoded
    named = named_objects(table, dialect)
    custom_names = frozenset().union(*named)
    for config in configs:
        judge_config(
            config,
            policy,
            candidates,
            dialect=name,
            vocabulary=dialect.name,
            custom_names=custom_names,
            resolve_string=lambda text: ((unwrap(at[text]), is_carried(at[text])) for at in named if text in at),
        )
    return configs


def named_objects(table: dict[str, Any], dialect: Dialect) -> list[dict[str, Any]]:
    """Where the dialect's deserializer looks a name up before anything of its own, a plain string included:
    the payload's custom objects, the caller's, a held custom-object scope, the registry."""
    scope = global_state.get_global_attribute("custom_objects_scope_dict", {}) or {}
    return [table, load_options().custom_objects, scope, GLOBAL_CUSTOM_OBJECTS, *dialect.registries()]


def vet_names(body: dict) -> list:
    """What safe mode refuses in a checked body by name alone, before anything is imported for it
    (a tf-keras payload's dialect included): a Lambda or foreign-format layer spelt any way, an
    inline Python lambda, a layer that would read a file or merge a module its config names, at any
    depth of any config it holds (:func:`~keras_pickle._safe_mode.config_judge.judge_names`). Returns those
    configs decoded, for :func:`vet_body`."""
    decoded = _decoded_configs(body)
    for config in decoded:
        judge_names(config)
    return decoded


def _decoded_configs(body: dict) -> list:
    """Every config the body holds (the model's, held optimizers', compile objects'), decoded; never changed
    by the judging, so one decoding serves both :func:`vet_names` and :func:`vet_body`."""
    texts = [body["config"], *(held[1] for held in body.get("held_optimizers") or ())]
    texts += (body.get("compile_objects") or {}).values()
    return [schema.parse_config(text, "a config it holds") for text in texts]


def _qualified(obj: Any) -> str:
    if isinstance(obj, InertReference):
        return obj.qualified_name
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
