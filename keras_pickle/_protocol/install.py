"""``install()`` / ``uninstall()``: the mixins' protocol methods on Keras's own classes.

``install()`` copies the protocol methods of :mod:`keras_pickle._protocol.mixins` onto the
base classes each dialect names (``Dialect.protocol_bases``: ``keras.Layer``, ``keras.Model``,
``keras.losses.Loss``, ``keras.optimizers.Optimizer``, ``keras.metrics.Metric``,
``keras.callbacks.Callback``, and tf-keras's once it is imported), so that ``pickle``, ``copy``,
joblib, cloudpickle and friends use keras_pickle for every Keras object; ``uninstall()`` puts back
exactly what was there. Importing this module registers "install on first
load" with the reconstructor: a process that loads a payload pickles the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import keras
from keras.src.backend.common.variables import Variable as KerasVariable
from keras.src.layers import layer as keras_layer
from keras.src.ops import operation as keras_operation

from .. import integrations
from .._keras3 import deferred as _deferred
from .._keras3.recorded import compile_objects as _compile_objects
from .._keras3.recorded import records as _records
from .._keras3.recorded.signatures import CACHED_INSPECT
from . import dialects as _dialects
from . import opt_in as _opt_in
from .mixins import (
    PROTOCOL_ATTRS,
    CallbackPickleMixin,
    LayerPickleMixin,
    LossPickleMixin,
    MetricPickleMixin,
    OptimizerPickleMixin,
)
from .reconstruct import after_restore

_MISSING = object()
_lock = threading.RLock()

_originals: dict[tuple[type, str], Any] = {}
_uninstalled_explicitly = False


_REDUCERS = ("__reduce_ex__", "__reduce__")
MIXIN_OF_ROLE = {
    "layer": LayerPickleMixin,
    "model": LayerPickleMixin,  # each dialect's Model defines protocol methods of its own
    "loss": LossPickleMixin,
    "optimizer": OptimizerPickleMixin,
    "legacy_optimizer": OptimizerPickleMixin,
    "metric": MetricPickleMixin,
    "callback": CallbackPickleMixin,
}
"""The mixin each role of a dialect's :attr:`~keras_pickle._dialect.Dialect.protocol_bases` receives."""
_STATEFUL_PARTS = ("optimizer", "legacy_optimizer", "metric")


def _targets() -> list[tuple[type, type, tuple[str, ...]]]:
    """Each base class of each dialect, the mixin it receives and which of its methods. Optimizers and metrics
    of a dialect that records no calls receive the refusal only: their copies stay the dialect's own."""
    return [
        (
            cls,
            MIXIN_OF_ROLE[role],
            PROTOCOL_ATTRS if dialect.records_calls or role not in _STATEFUL_PARTS else _REDUCERS,
        )
        for dialect in _dialects.BY_NAME.values()
        for role, cls in dialect.protocol_bases().items()
    ]


def _patches() -> list[tuple[type, str, Callable]]:
    patches, patched = [], set()
    for cls, mixin, names in _targets():
        for klass in mixin.__mro__:
            for name in names:
                if name in klass.__dict__ and (cls, name) not in patched:
                    patched.add((cls, name))
                    patches.append((cls, name, klass.__dict__[name]))
    for cls in (keras.Layer, keras.Model):
        patches.append((cls, "__new__", _wrapped(cls, "__new__", _records.recording_new)))
    for cls in _compile_objects.bases():  # none has a __new__ of its own
        patches.append((cls, "__new__", _plain_new(cls)))
    patches.append((KerasVariable, "__init__", _wrapped(KerasVariable, "__init__", _deferred.variable_init_hook)))
    for module in (keras_operation, keras_layer):
        patches.append((module, "inspect", CACHED_INSPECT))
    return patches


_wrappers: dict[tuple[type, str], Any] = {}


def _wrapped(cls: type, name: str, wrap: Callable[[Any], Any]) -> Any:
    """``wrap(Keras's own cls.name, unbound)``, made once per class and name: a hook around Keras's method.

    ``Layer.__new__`` / ``Model.__new__`` record constructor and compile() calls
    (:mod:`keras_pickle._keras3.recorded.records`); ``Variable.__init__`` lets the deferred rebuild create a
    variable that has a concrete value (:func:`keras_pickle._keras3.deferred.variable_init_hook`).
    """
    hook = _wrappers.get((cls, name))
    if hook is None:
        original = _originals.get((cls, name), cls.__dict__.get(name, _MISSING))
        if original is _MISSING or getattr(original, "__keras_pickle__", False):
            raise RuntimeError(f"keras_pickle: {cls.__name__} has no {name} of Keras's own to wrap.")
        hook = _wrappers[cls, name] = wrap(original.__get__(None, cls) if name == "__new__" else original)
    return hook


def _plain_new(cls: type) -> Any:
    """The ``__new__`` that records a user subclass's constructor arguments
    (:mod:`keras_pickle._keras3.recorded.compile_objects`)."""
    hook = _wrappers.get((cls, "__new__"))
    if hook is None:
        hook = _wrappers[cls, "__new__"] = _compile_objects.recording_new(cls)
    return hook


def install(allow: Iterable[str] | None = None) -> None:
    """Make ``pickle`` and ``copy`` use keras_pickle for Keras objects.

    Idempotent. Calling it again re-applies any hook that another library
    replaced since; a library known to replace them on import (scikeras) is
    watched, and the hooks are re-applied right after it is imported.

    ``allow`` opts in to pickling objects that are refused by default, with
    their complete state: ``"metrics"`` (config and every variable, so the
    accumulated state), ``"callbacks"`` (every attribute; one that cannot be
    pickled fails naming it) and ``"optimizers"`` (only optimizers that are
    not built: a built optimizer's slots belong to its model's variables).
    ``None`` (the default) keeps the current setting; ``()`` refuses again.
    """
    global _uninstalled_explicitly
    with _lock:
        if allow is not None:
            _opt_in.set_allowed(allow)
        for cls, name, function in _patches():
            if cls.__dict__.get(name, _MISSING) is function:
                continue
            original = cls.__dict__.get(name, _MISSING)
            if original is _MISSING and name == "__new__":
                # Deleting it again would break subclasses already constructed: CPython keeps their
                # __new__ slot, which then hands the constructor's arguments to object.__new__.
                original = _compile_objects.passthrough_new(cls)
            _originals.setdefault((cls, name), original)
            setattr(cls, name, function)
        _uninstalled_explicitly = False
        integrations.activate(reapply_hooks=reapply)


def reapply() -> None:
    """Re-apply the hooks if keras_pickle is installed (after a library replaced them)."""
    with _lock:
        if _originals and not _uninstalled_explicitly:
            install()


def uninstall() -> None:
    """Restore exactly the hooks Keras's classes had before ``install()``."""
    global _uninstalled_explicitly
    with _lock:
        integrations.deactivate()
        _opt_in.reset()
        for (cls, name), original in _originals.items():
            if original is _MISSING:
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                setattr(cls, name, original)
        _originals.clear()
        _uninstalled_explicitly = True


def is_installed() -> bool:
    """True when every keras_pickle hook is in place on Keras's classes."""
    return all(_deferred.unbound(cls.__dict__.get(name)) is function for cls, name, function in _patches())


def install_on_first_load() -> None:
    """Install when a payload is loaded, unless the user uninstalled explicitly.

    A worker that receives a keras_pickle payload then sends its results back
    in the same format.
    """
    if not _uninstalled_explicitly and not is_installed():
        install()


after_restore(install_on_first_load)
