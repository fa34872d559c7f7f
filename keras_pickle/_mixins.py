"""The pickle protocol for Keras classes, and ``install()`` / ``uninstall()``.

Each mixin is usable on its own (``class MyModel(LayerPickleMixin,
keras.Model)``); ``install()`` copies the mixins' protocol methods onto
Keras's own base classes so that ``pickle``, ``copy``, joblib, cloudpickle
and friends use keras_pickle for every Keras object.

A class that defines its own ``__reduce__`` / ``__reduce_ex__`` keeps it:
keras_pickle only supplies the protocol where Keras's would apply.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterable
from typing import Any

from . import _allow, _copy, _format, _payload
from .errors import PickleRefusedError

_PROTOCOL_ATTRS = ("__reduce_ex__", "__reduce__", "__deepcopy__", "__copy__")
_MARK = "__keras_pickle__"
_MISSING = object()
_lock = threading.RLock()


def _ours(function: Callable) -> Callable:
    setattr(function, _MARK, True)
    return function


def _user_reducer(obj: Any) -> Callable[[int], Any] | None:
    """The pickling hook a user class below the Keras base defines, if any."""
    for cls in type(obj).__mro__:
        hooks = [cls.__dict__.get(name) for name in ("__reduce_ex__", "__reduce__")]
        if any(getattr(hook, _MARK, False) for hook in hooks):
            return None
        if cls.__module__.startswith(("keras.", "builtins")) or not any(hooks):
            continue
        reduce_ex, reduce = hooks
        if reduce_ex is not None:
            return lambda protocol: reduce_ex(obj, protocol)
        return lambda protocol: reduce(obj)
    return None


class LayerPickleMixin:
    """Pickle a layer or model as a keras_pickle payload; copy it in-process.

    ``pickle`` stores config, every variable (weights, optimizer state, RNG
    seed state, lookup tables and vocabularies) and the custom objects the
    config needs. ``copy.deepcopy`` and ``copy.copy`` both return an
    independent copy that shares no variable with the original.
    """

    @_ours
    def __reduce_ex__(self, protocol):
        custom = _user_reducer(self)
        if custom is not None:
            return custom(protocol)
        return _format.restore, _payload.layer_payload(self, protocol)

    @_ours
    def __reduce__(self):
        # Never consults user hooks: a user __reduce__ may call super().__reduce__().
        return _format.restore, _payload.layer_payload(self, pickle.DEFAULT_PROTOCOL)

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_layer(self, memo)

    @_ours
    def __copy__(self):
        return _copy.copy_layer(self, {})


class LossPickleMixin:
    """Pickle a (stateless) loss as its config plus the custom objects it names."""

    @_ours
    def __reduce_ex__(self, protocol):
        custom = _user_reducer(self)
        if custom is not None:
            return custom(protocol)
        return _format.restore, _payload.config_payload(self, _payload.KIND_LOSS)

    @_ours
    def __reduce__(self):
        return self.__reduce_ex__(pickle.DEFAULT_PROTOCOL)


def _refusal(why: str, instead: str, kind: str) -> tuple[Callable, Callable]:
    """``__reduce_ex__`` / ``__reduce__`` that refuse with ``why`` and ``instead``.

    Under ``install(allow=(kind,))`` they pickle the object with its complete
    state instead (see :func:`._allow.allowed_reduce`). The hooks are closures, not
    methods reading class attributes, because ``install()`` copies them onto
    Keras classes that lack those attributes.
    """

    def refuse(obj):
        cls = type(obj)
        opt_in = f" Or opt in: keras_pickle.install(allow=({kind!r},)) pickles {kind} with their complete state."
        if kind == "optimizers":
            opt_in = "" if getattr(obj, "built", False) else opt_in.replace(" with", " that are not built yet, with")
        name = _allow.public_name(cls)
        return PickleRefusedError(f"Refusing to pickle {name}: {why} {instead}{opt_in}", obj_type=cls)

    @_ours
    def __reduce_ex__(self, protocol):
        custom = _user_reducer(self)
        if custom is not None:
            return custom(protocol)
        if _allow.allows(kind, self):
            return _allow.allowed_reduce(self, kind, protocol)
        raise refuse(self)

    @_ours
    def __reduce__(self):
        if _allow.allows(kind, self):
            return _allow.allowed_reduce(self, kind, pickle.DEFAULT_PROTOCOL)
        raise refuse(self)

    return __reduce_ex__, __reduce__


class OptimizerPickleMixin:
    """Refuse to pickle an optimizer; copy it with its iterations and slots.

    ``copy.copy`` and ``copy.deepcopy`` both return an optimizer with its own
    variables: one that shared them would corrupt both.
    """

    __reduce_ex__, __reduce__ = _refusal(
        why="an optimizer's state (its iterations and one slot per model weight) belongs to "
        "the variables of the model it trains and would not survive pickling on its own.",
        instead="Pickle the compiled model instead (it carries its optimizer with the full "
        "optimizer state), or pass the class and its config: "
        "(type(optimizer), optimizer.get_config()).",
        kind="optimizers",
    )

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_optimizer(self, memo)

    @_ours
    def __copy__(self):
        return _copy.copy_optimizer(self, {})


class MetricPickleMixin:
    """Refuse to pickle a metric; copy it with its accumulated state.

    ``copy.copy`` and ``copy.deepcopy`` both return a metric with its own
    variables.
    """

    __reduce_ex__, __reduce__ = _refusal(
        why="a metric's accumulated state (its variables) is not part of its config and would be silently reset.",
        instead="Pickle the compiled model (its compile config recreates its metrics), send the value "
        "(float(metric.result())), or pass the class and its config: "
        "(type(metric), metric.get_config()).",
        kind="metrics",
    )

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_metric(self, memo)

    @_ours
    def __copy__(self):
        return _copy.copy_metric(self, {})


class CallbackPickleMixin:
    """Refuse to pickle a callback; copy it attribute by attribute.

    ``copy.deepcopy`` copies every attribute deeply; ``copy.copy`` is the
    usual shallow copy.
    """

    __reduce_ex__, __reduce__ = _refusal(
        why="a callback's runtime state (the model it is attached to, counters, open "
        "writers) is not part of any config and would not survive.",
        instead="Pass the class and its arguments and create the callback where it runs, "
        "e.g. functools.partial(keras.callbacks.EarlyStopping, patience=3).",
        kind="callbacks",
    )

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_plain(self, memo)

    @_ours
    def __copy__(self):
        return _copy.shallow_copy_plain(self)


# --------------------------------------------------------------------------
# install / uninstall
# --------------------------------------------------------------------------

_originals: dict[tuple[type, str], Any] = {}
_uninstalled_explicitly = False


def _targets() -> list[tuple[type, type]]:
    import keras

    return [
        (keras.Layer, LayerPickleMixin),
        # scikeras patches Model directly; Model's own attributes must be ours.
        (keras.Model, LayerPickleMixin),
        (keras.losses.Loss, LossPickleMixin),
        (keras.optimizers.Optimizer, OptimizerPickleMixin),
        (keras.metrics.Metric, MetricPickleMixin),
        (keras.callbacks.Callback, CallbackPickleMixin),
    ]


def _patches() -> list[tuple[type, str, Callable]]:
    patches = []
    for cls, mixin in _targets():
        for klass in mixin.__mro__:
            for name in _PROTOCOL_ATTRS:
                if name in klass.__dict__ and not any(p[:2] == (cls, name) for p in patches):
                    patches.append((cls, name, klass.__dict__[name]))
    return patches


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
    from . import integrations

    with _lock:
        if allow is not None:
            _allow.set_allowed(allow)
        for cls, name, function in _patches():
            if cls.__dict__.get(name, _MISSING) is function:
                continue
            _originals.setdefault((cls, name), cls.__dict__.get(name, _MISSING))
            setattr(cls, name, function)
        _uninstalled_explicitly = False
        integrations.activate()


def reapply() -> None:
    """Re-apply the hooks if keras_pickle is installed (after a library replaced them)."""
    with _lock:
        if _originals and not _uninstalled_explicitly:
            install()


def uninstall() -> None:
    """Restore exactly the hooks Keras's classes had before ``install()``."""
    global _uninstalled_explicitly
    from . import integrations

    with _lock:
        integrations.deactivate()
        _allow.reset()
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
    return all(cls.__dict__.get(name) is function for cls, name, function in _patches())


def install_on_first_load() -> None:
    """Install when a payload is loaded, unless the user uninstalled explicitly.

    A worker that receives a keras_pickle payload then sends its results back
    in the same format.
    """
    if not _uninstalled_explicitly and not is_installed():
        install()
