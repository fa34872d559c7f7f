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

from . import _copy, _format, _payload
from .errors import PickleRefusedError

_PROTOCOL_ATTRS = ("__reduce_ex__", "__reduce__", "__deepcopy__", "__copy__")
_MARK = "__keras_pickle__"
_MISSING = object()
_lock = threading.RLock()


def _ours(function: Callable) -> Callable:
    setattr(function, _MARK, True)
    return function


def _public_name(cls: type) -> str:
    """``keras.optimizers.Adam`` rather than ``keras.src.optimizers.adam.Adam``."""
    from keras.src.api_export import get_name_from_symbol

    return get_name_from_symbol(cls) or f"{cls.__module__}.{cls.__qualname__}"


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
    state instead (see :func:`_allowed_reduce`). The hooks are closures, not
    methods reading class attributes, because ``install()`` copies them onto
    Keras classes that lack those attributes.
    """

    def refuse(obj):
        cls = type(obj)
        opt_in = f" Or opt in: keras_pickle.install(allow=({kind!r},)) pickles {kind} with their complete state."
        if kind == "optimizers":
            opt_in = "" if getattr(obj, "built", False) else opt_in.replace(" with", " that are not built yet, with")
        return PickleRefusedError(f"Refusing to pickle {_public_name(cls)}: {why} {instead}{opt_in}", obj_type=cls)

    @_ours
    def __reduce_ex__(self, protocol):
        custom = _user_reducer(self)
        if custom is not None:
            return custom(protocol)
        if _allows(kind, self):
            return _allowed_reduce(self, kind, protocol)
        raise refuse(self)

    @_ours
    def __reduce__(self):
        if _allows(kind, self):
            return _allowed_reduce(self, kind, pickle.DEFAULT_PROTOCOL)
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
# Opt-in: metrics, callbacks and unbuilt optimizers with their complete state
# --------------------------------------------------------------------------

ALLOWABLE = ("metrics", "callbacks", "optimizers")
_allowed: frozenset[str] = frozenset()
# False until the user calls install(allow=...): until then, loading an
# allowed object allows its kind, so a worker can send it back.
_allow_explicit = False


def _allows(kind: str, obj: Any) -> bool:
    if kind == "callbacks" and _is_history(obj):
        return True  # What fit() returns: plain records, nothing to lose.
    return kind in _allowed


def _is_history(obj: Any) -> bool:
    import keras

    return isinstance(obj, keras.callbacks.History)


def _allowed_reduce(obj: Any, kind: str, protocol: int) -> tuple:
    if kind == "callbacks":
        return restore_callback, (type(obj), _callback_attributes(obj, protocol))
    if kind == "optimizers" and getattr(obj, "built", False):
        raise PickleRefusedError(
            f"Refusing to pickle {_public_name(type(obj))}: it is built, and its slots belong to the "
            "variables of the model it trains; allow=('optimizers',) covers only optimizers that "
            "are not built yet. Pickle the compiled model (it carries its optimizer with the full "
            "optimizer state), or pass the optimizer as a string or class with its arguments "
            "(scikeras: optimizer='adam', optimizer__learning_rate=0.01).",
            obj_type=type(obj),
        )
    # The config travels as a config-only payload; _format.KINDS has no kind
    # for metrics or optimizers yet, and "loss" means exactly that.
    header, body = _payload.config_payload(obj, _payload.KIND_LOSS)
    state = _stateful_state(obj)
    encoded = dict(state, kind=kind, variables=[_format.encode_array(p, a, protocol) for p, a in state["variables"]])
    return restore_with_state, (header, body, encoded)


def _stateful_state(obj: Any) -> dict:
    """Every variable, and the plain attributes that differ from a fresh instance.

    A fresh instance is rebuilt from the config here, and the state is applied
    to it, so that an object this cannot restore exactly is refused now rather
    than restored wrong later.
    """
    from . import _backend

    twin = _copy._rebuild_twin(obj)
    own = {id(v): i for i, v in enumerate(getattr(obj, "_variables", ()))}
    attributes, variable_attributes = {}, {}
    for name, value in vars(obj).items():
        if id(value) in own:
            variable_attributes[name] = own[id(value)]
        elif _is_plain(value) and not _same(vars(twin).get(name, _MISSING), value):
            attributes[name] = value
    state = {
        "variables": [(v.path, _backend.to_numpy(v)) for v in obj.variables],
        "attributes": attributes,
        "variable_attributes": variable_attributes,
    }
    try:
        _apply_state(twin, state)
    except Exception as e:
        raise PickleRefusedError(
            f"Refusing to pickle {_public_name(type(obj))}: its state cannot be restored exactly onto an "
            f"instance rebuilt from its config ({type(e).__name__}: {e}).",
            obj_type=type(obj),
        ) from e
    return state


def _apply_state(obj: Any, state: dict) -> None:
    from . import _state

    saved = state["variables"]
    current = list(obj.variables)
    if (
        len(current) < len(saved)
        and isinstance(getattr(obj, "_variables", None), list)
        and not getattr(obj, "_metrics", None)
    ):
        # Variables created on first use (F1Score, R2Score, AUC with multi_label):
        # create the missing ones as that first use did, and bind them by name.
        import keras

        for path, array in saved[len(current) :]:
            obj.add_variable(
                shape=tuple(array.shape),
                initializer="zeros",
                dtype=keras.backend.standardize_dtype(array.dtype),
                name=str(path).rsplit("/", 1)[-1],
            )
        for name, index in state["variable_attributes"].items():
            obj.__dict__[name] = obj._variables[index]
    for name, value in state["attributes"].items():
        obj.__dict__[name] = value
    _state.assign_in_order(list(obj.variables), saved, owner=f"{type(obj).__name__} '{getattr(obj, 'name', '?')}'")


def restore_with_state(header, body, state):
    """Rebuild an allowed metric or unbuilt optimizer: its config, then its state.

    Part of the format (pickles reference it by name); never rename it.
    """
    from .errors import KerasPickleError, KerasUnpicklingError

    obj = _format.restore(header, body)
    try:
        variables = [_format.decode_array(e) for e in state["variables"]]
        _apply_state(obj, dict(state, variables=variables))
    except KerasPickleError:
        raise
    except Exception as e:
        raise KerasUnpicklingError(
            f"Could not restore the state of {header.get('class', 'the object')}: {type(e).__name__}: {e}",
            original_error=e,
        ) from e
    _allow_on_load(str(state.get("kind")))
    return obj


def restore_callback(cls, attributes):
    """Rebuild an allowed callback from every attribute it had.

    Part of the format (pickles reference it by name); never rename it.
    """
    from . import _options

    obj = cls.__new__(cls)
    obj.__dict__.update(attributes)
    if not _is_history(obj):
        _allow_on_load("callbacks")
    _options.note_restored()
    return obj


def _allow_on_load(kind: str) -> None:
    global _allowed
    with _lock:
        if not _allow_explicit and kind in ALLOWABLE:
            _allowed = _allowed | {kind}


def _callback_attributes(callback: Any, protocol: int) -> dict:
    """The callback's attributes, each checked so that a failure names its attribute."""
    attributes = dict(vars(callback))
    for name, value in attributes.items():
        _check_picklable(callback, name, value, protocol)
    return attributes


class _Discard:
    def write(self, data) -> int:
        return len(memoryview(data))


def _check_picklable(owner: Any, name: str, value: Any, protocol: int) -> None:
    import keras
    import numpy as np

    from .errors import KerasPickleError, KerasPicklingError

    if isinstance(value, (type(None), bool, int, float, str, bytes, np.ndarray, keras.Layer)):
        return  # Layers are keras_pickle's own payloads; their errors name them.
    picklers = [pickle.Pickler]
    try:
        import cloudpickle

        picklers.append(cloudpickle.CloudPickler)
    except ImportError:
        pass
    buffers = (lambda buffer: None) if protocol >= 5 else None
    where = f"attribute {name!r} of {_public_name(type(owner))}"
    error: BaseException | None = None
    for pickler in picklers:
        try:
            pickler(_Discard(), protocol, buffer_callback=buffers).dump(value)
            return
        except PickleRefusedError as e:
            raise PickleRefusedError(f"Cannot pickle the {where}: {e}", obj_type=e.obj_type) from e
        except KerasPickleError as e:
            raise KerasPicklingError(f"Cannot pickle the {where}: {e}", original_error=e) from e
        except Exception as e:
            error = error or e
    raise KerasPicklingError(
        f"Cannot pickle the {where}: a {type(value).__module__}.{type(value).__qualname__} cannot be "
        f"pickled ({type(error).__name__}: {error}). Close or delete that attribute before pickling, "
        "or create the callback where it runs.",
        original_error=error,
    ) from error


_PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes)


def _is_plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, _PLAIN_TYPES):
        return True
    if depth > 4:
        return False
    if isinstance(value, (list, tuple)):
        return all(_is_plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _set_allowed(allow: Any) -> None:
    global _allowed, _allow_explicit
    if isinstance(allow, str):
        raise TypeError(f"allow must be a tuple of kinds, e.g. allow=({allow!r},); received the string {allow!r}.")
    kinds = frozenset(allow)
    unknown = sorted(kinds - set(ALLOWABLE))
    if unknown:
        raise ValueError(f"Unknown kind(s) in allow: {', '.join(map(repr, unknown))}. Choose from {ALLOWABLE}.")
    _allowed = kinds
    _allow_explicit = True


def allowed() -> frozenset[str]:
    """The kinds ``install(allow=...)`` currently lets pickle with their state."""
    return _allowed


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
            _set_allowed(allow)
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
    global _uninstalled_explicitly, _allowed, _allow_explicit
    from . import integrations

    with _lock:
        integrations.deactivate()
        _allowed, _allow_explicit = frozenset(), False
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
