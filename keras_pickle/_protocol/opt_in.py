"""Opt-in: metrics, callbacks and unbuilt optimizers pickled with their complete state.

Refused by default (RFC 286). ``install(allow=(...))`` lets them pickle:
metrics and unbuilt optimizers as their config plus every variable and the
plain attributes that differ from a fresh instance (applied to a twin at dump
time, so an object that cannot be restored exactly is refused then, not
restored wrong later); callbacks as every attribute, each checked so that a
failure names its attribute. ``keras.callbacks.History`` always pickles.

:func:`restore_with_state` and :func:`restore_callback` are part of the wire
format: pickles reference them as ``keras_pickle._allow.restore_with_state`` and
``keras_pickle._allow.restore_callback`` (:mod:`keras_pickle._allow` publishes them).
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import keras
import numpy as np
from keras.src.api_export import get_name_from_symbol

from .. import _options
from .._capture import encode as _capture_encode
from .._keras3 import backend as _backend
from .._rebuild import assign_state as _rebuild_state
from .._tfkeras import classes as _tfkeras_classes
from .._wire import upgrade
from .._wire.arrays import decode_array, encode_array
from .._wire.refs import unwrap
from .._wire.reprs import bounded_repr
from .._wire.schema import KIND_METRIC, KIND_OPTIMIZER, RESTORE_CALLBACK, RESTORE_WITH_STATE, published
from ..errors import KerasPickleError, KerasPicklingError, KerasUnpicklingError, PickleRefusedError
from . import copy as _copy
from . import dialects as _dialects
from .reconstruct import restore

_MISSING = object()
_lock = threading.RLock()


def public_name(cls: type) -> str:
    """``keras.optimizers.Adam`` rather than ``keras.src.optimizers.adam.Adam``."""
    return get_name_from_symbol(cls) or f"{cls.__module__}.{cls.__qualname__}"


ALLOWABLE = ("metrics", "callbacks", "optimizers")
STATE_KIND_OF = {KIND_METRIC: "metrics", KIND_OPTIMIZER: "optimizers"}
"""The payload kinds :func:`restore_with_state` rebuilds, and the state kind each carries."""
_allowed: frozenset[str] = frozenset()
# False until the user calls install(allow=...): until then, loading an
# allowed object allows its kind, so a worker can send it back.
_explicit = False


def allows(kind: str, obj: Any) -> bool:
    if kind == "callbacks" and _is_history(obj):
        return True  # What fit() returns: plain records, nothing to lose.
    return kind in _allowed


def _is_history(obj: Any) -> bool:
    return isinstance(obj, keras.callbacks.History)


def allowed_reduce(obj: Any, kind: str, protocol: int) -> tuple:
    if kind == "callbacks":
        return restore_callback, (type(obj), _callback_attributes(obj, protocol))
    if kind == "optimizers" and getattr(obj, "built", False):
        raise PickleRefusedError(
            f"Refusing to pickle {public_name(type(obj))}: it is built, and its slots belong to the "
            "variables of the model it trains; allow=('optimizers',) covers only optimizers that "
            "are not built yet. Pickle the compiled model (it carries its optimizer with the full "
            "optimizer state), or pass the optimizer as a string or class with its arguments "
            "(scikeras: optimizer='adam', optimizer__learning_rate=0.01).",
            obj_type=type(obj),
        )
    payload_kind = _capture_encode.KIND_METRIC if kind == "metrics" else _capture_encode.KIND_OPTIMIZER
    header, body = _capture_encode.config_payload(obj, payload_kind, protocol, _dialects.of(obj))
    state = _stateful_state(obj)
    encoded = dict(state, kind=kind, variables=[encode_array(p, a, protocol) for p, a in state["variables"]])
    return restore_with_state, (header, body, encoded)


def holds_no_state(kind: str, obj: Any) -> bool:
    """Whether pickling ``obj`` by its config loses nothing: an optimizer never built (no iterations, no
    slots), a metric whose every variable still holds the value a fresh instance from its config has."""
    if kind == "optimizers":
        return not getattr(obj, "built", False)
    if kind != "metrics":
        return False
    try:
        twin = _copy._rebuild_twin(obj)
    except Exception:
        return False  # its config cannot rebuild it: not "nothing to lose"
    mine, fresh = list(obj.variables), list(twin.variables)
    return len(mine) == len(fresh) and all(
        np.array_equal(_backend.to_numpy(a), _backend.to_numpy(b)) for a, b in zip(mine, fresh)
    )


def stateless_reduce(obj: Any, kind: str, protocol: int) -> tuple:
    """What an optimizer or metric that holds no state (:func:`holds_no_state`) pickles as: its config
    and plain attributes, as under ``allow=``, marked so that loading it opts the loading process in to
    nothing."""
    function, (header, body, state) = allowed_reduce(obj, kind, protocol)
    return function, (header, body, dict(state, stateless=True))


def _callback_bases() -> tuple[type, ...]:
    """Keras's callback base class, and tf-keras's where tf-keras is imported."""
    if not _tfkeras_classes.is_imported():
        return (keras.callbacks.Callback,)
    return (keras.callbacks.Callback, _tfkeras_classes.protocol_bases()["callback"])


def _stateful_state(obj: Any) -> dict:
    """Every variable, and the plain attributes that differ from a fresh instance.

    Plain: None, numbers, strings, bytes, numpy arrays of a numeric dtype, and
    lists, tuples and dicts of those (a custom metric's running numpy state).

    A fresh instance is rebuilt from the config here, and the state is applied
    to it, so that an object this cannot restore exactly is refused now rather
    than restored wrong later.
    """
    twin = _copy._rebuild_twin(obj)
    own = {id(v): i for i, v in enumerate(getattr(obj, "_variables", ()))}
    attributes, variable_attributes = {}, {}
    for name, value in vars(obj).items():
        if id(value) in own:
            variable_attributes[name] = own[id(value)]
        elif _is_plain(value) and not _same(vars(twin).get(name, _MISSING), value):
            attributes[name] = _as_plain(value)
    state = {
        "variables": [(v.path, _backend.to_numpy(v)) for v in obj.variables],
        "attributes": attributes,
        "variable_attributes": variable_attributes,
    }
    try:
        _apply_state(twin, state)
    except Exception as e:
        raise PickleRefusedError(
            f"Refusing to pickle {public_name(type(obj))}: its state cannot be restored exactly onto an "
            f"instance rebuilt from its config ({type(e).__name__}: {e}).",
            obj_type=type(obj),
        ) from e
    return state


def _apply_state(obj: Any, state: dict, *, written_backend: str | None = None) -> None:
    """``written_backend``: the backend that wrote ``state``, when it comes from a payload."""
    saved = state["variables"]
    current = list(obj.variables)
    if (
        len(current) < len(saved)
        and isinstance(getattr(obj, "_variables", None), list)
        and not getattr(obj, "_metrics", None)
    ):
        # Variables created on first use (F1Score, R2Score, AUC with multi_label):
        # create the missing ones as that first use did, and bind them by name.
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
    owner = f"{type(obj).__name__} '{getattr(obj, 'name', '?')}'"
    _rebuild_state.assign_in_order(list(obj.variables), saved, owner=owner, written_backend=written_backend)


@published(RESTORE_WITH_STATE)
def restore_with_state(header, body, state):
    """Rebuild an allowed metric or unbuilt optimizer: its config, then its state.

    Part of the format (pickles reference it by name); never rename it. Safe
    mode allows it: the config goes through ``keras_pickle._format.restore``
    and the state must be plain data (:func:`_checked_state`).
    """
    state = _checked_state(state)
    kind = upgrade.state_payload_kind(header, state["kind"]) if isinstance(header, dict) else None
    expected = STATE_KIND_OF.get(kind)
    if expected != state["kind"]:
        # Only a metric's or an optimizer's payload carries state beside its config, of its own kind:
        # a model's attributes are never set from the stream, and a kind is never allowed on its behalf.
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: state of kind {bounded_repr(state['kind'])} for a payload of kind "
            f"{bounded_repr(kind)}; only a metric or an optimizer carries its state this way."
        )
    obj = restore(header, body)
    if not _of_kind(obj, state["kind"]):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: state of kind {bounded_repr(state['kind'])} for a "
            f"{type(obj).__name__} rebuilt from a payload of kind {bounded_repr(kind)}; only a metric or an "
            "optimizer carries its state this way."
        )
    try:
        variables = [decode_array(e) for e in state["variables"]]
        _apply_state(obj, dict(state, variables=variables), written_backend=header.get("backend"))
    except KerasPickleError:
        raise
    except Exception as e:
        raise KerasUnpicklingError(
            f"Could not restore the state of {header.get('class', 'the object')}: {type(e).__name__}: {e}",
            original_error=e,
        ) from e
    if not state.get("stateless"):
        _allow_on_load(state["kind"])
    return obj


def _of_kind(obj: Any, kind: str) -> bool:
    """Whether ``obj`` is a metric (``kind`` ``"metrics"``) or an optimizer (``"optimizers"``) of either dialect."""
    if kind == "metrics":
        bases: tuple[type, ...] = (keras.metrics.Metric,)
        if _tfkeras_classes.is_imported():
            bases += (_tfkeras_classes.protocol_bases()["metric"],)
        return isinstance(obj, bases)
    if kind == "optimizers":
        return isinstance(obj, keras.optimizers.Optimizer) or (
            _tfkeras_classes.is_imported() and _tfkeras_classes.is_optimizer(obj)
        )
    return False


def _checked_state(state: Any) -> dict:
    """``state`` if it is what :func:`allowed_reduce` writes, else KerasUnpicklingError."""

    def corrupt(why: str) -> KerasUnpicklingError:
        return KerasUnpicklingError(f"Corrupt keras_pickle payload: the saved state {why}.")

    if not isinstance(state, dict) or not {"variables", "attributes", "variable_attributes", "kind"} <= state.keys():
        raise corrupt("is not a dict with variables, attributes, variable_attributes and kind")
    if state["kind"] not in ALLOWABLE:
        raise corrupt(f"names an unknown kind {bounded_repr(state['kind'])}")
    if not isinstance(state["variables"], list):
        raise corrupt("has no list of variables")
    attributes, indices = state["attributes"], state["variable_attributes"]
    if not (isinstance(attributes, dict) and all(_attribute_name(k) and _is_plain(v) for k, v in attributes.items())):
        raise corrupt("has attributes that are not plain values with plain names")
    if not (isinstance(indices, dict) and all(_attribute_name(k) and type(v) is int for k, v in indices.items())):
        raise corrupt("has variable attributes that are not names of variable indices")
    if any(not 0 <= i < len(state["variables"]) for i in indices.values()):
        raise corrupt("names a variable index out of range")
    return state


def _attribute_name(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not name.startswith("__")


@published(RESTORE_CALLBACK)
def restore_callback(cls, attributes):
    """Rebuild an allowed callback from every attribute it had.

    Part of the format (pickles reference it by name); never rename it. Safe
    mode allows it for Keras callback classes of imported modules; no code of
    the class runs (attributes are set directly).
    """
    cls = unwrap(cls)
    if not (isinstance(cls, type) and issubclass(cls, _callback_bases())):
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: {bounded_repr(cls)} is not a Keras callback class.")
    if not (isinstance(attributes, dict) and all(_attribute_name(k) for k in attributes)):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: a callback's attributes are not a dict of names.")
    obj = cls.__new__(cls)
    obj.__dict__.update(attributes)
    if not _is_history(obj):
        _allow_on_load("callbacks")
    _options.note_restored()
    return obj


def _allow_on_load(kind: str) -> None:
    global _allowed
    with _lock:
        if not _explicit and kind in ALLOWABLE:
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
    if isinstance(value, (type(None), bool, int, float, str, bytes, np.ndarray, keras.Layer)):
        return  # Layers are keras_pickle's own payloads; their errors name them.
    picklers = [pickle.Pickler]
    try:
        import cloudpickle  # optional: the transports that use it have it

        picklers.append(cloudpickle.CloudPickler)
    except ImportError:
        pass
    buffers = (lambda buffer: None) if protocol >= 5 else None
    where = f"attribute {name!r} of {public_name(type(owner))}"
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
    if type(value) is np.ndarray:
        return not value.dtype.hasobject
    if depth > 4:
        return False
    if isinstance(value, (list, tuple)):
        return all(_is_plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def _as_plain(value: Any) -> Any:
    """``value`` with Keras's tracked lists and dicts (which hold their tracker) as plain ones."""
    if isinstance(value, list):
        return [_as_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_as_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _as_plain(item) for key, item in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same type (arrays: same dtype, shape and elements); False when unsure."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def set_allowed(allow: Any) -> None:
    global _allowed, _explicit
    if isinstance(allow, str):
        raise TypeError(f"allow must be a tuple of kinds, e.g. allow=({allow!r},); received the string {allow!r}.")
    kinds = frozenset(allow)
    unknown = sorted(kinds - set(ALLOWABLE))
    if unknown:
        raise ValueError(f"Unknown kind(s) in allow: {', '.join(map(repr, unknown))}. Choose from {ALLOWABLE}.")
    _allowed = kinds
    _explicit = True


def reset() -> None:
    """Refuse every kind again (``uninstall()``)."""
    global _allowed, _explicit
    _allowed, _explicit = frozenset(), False


def allowed() -> frozenset[str]:
    """The kinds ``install(allow=...)`` currently lets pickle with their state."""
    return _allowed
