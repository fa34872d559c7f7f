"""Dask: ship Keras objects as keras_pickle payloads, and tokenize them deterministically.

``distributed`` registers a serializer for ``keras.Model`` that was written
for Keras 2 (it calls ``model._updated_config()``), so every Keras 3 model
fails with "Could not serialize object of type Functional". While
keras_pickle is installed, Keras layers and models get a "dask"-family
serializer that declines (:class:`_DeferToPickle`), which makes Dask fall
through to its "pickle" family: protocol 5 with a ``buffer_callback``, i.e. a
header, one frame holding the pickle stream (config, custom objects) and one
zero-copy frame per weight array. The receiving side needs nothing
registered: unpickling a keras_pickle payload imports keras_pickle. A true
"dask"-family deserializer would be looked up on the worker *before*
keras_pickle could be imported there, and would find Dask's broken one.

``dask.base.normalize_token`` gets a deterministic token for layers and
models (a hash of the payload: same config and state, same token; any
changed weight, a new one) without rebuilding the model, and
``dask.sizeof.sizeof`` reports their variables' bytes so that Dask's memory
accounting sees the weights.
"""

from __future__ import annotations

import io
import pickle
from types import FunctionType, ModuleType
from typing import Any

import keras
import numpy as np
import xxhash

from .._capture.main_script import ByValue
from .._wire.refs import MAIN_MODULES
from ..errors import KerasPickleError

_saved: list[tuple[Any, type, Any]] = []  # (dispatch, type, what it had) for uninstall
_MISSING = object()


class _DeferToPickle(NotImplementedError, TypeError):
    """Dask's ``serialize`` moves on to the next family on NotImplementedError;
    its ``_DaskPickler.reducer_override`` falls back to ``__reduce_ex__`` on TypeError."""


def decline_dask_family(obj: Any, context: Any = None) -> Any:
    """The "dask"-family serializer for Keras objects: always use the "pickle" family."""
    raise _DeferToPickle(f"{type(obj).__qualname__} travels as a keras_pickle payload (Dask's pickle family).")


def keras_token(obj: Any) -> tuple:
    """A deterministic token for a layer or model: a hash of its keras_pickle payload.

    Equal for objects with the same config, variables and custom objects;
    different as soon as one weight differs. Objects that cannot be pickled
    get Dask's own treatment (a random token, or TokenizationError when
    determinism is required).
    """
    buffers: list[pickle.PickleBuffer] = []
    stream_file = io.BytesIO()
    try:
        _TokenPickler(stream_file, protocol=5, buffer_callback=buffers.append).dump(obj)
        stream = stream_file.getvalue()
    except (KerasPickleError, pickle.PicklingError, TypeError, AttributeError):
        from dask.tokenize import normalize_object

        return normalize_object(obj)
    digest = xxhash.xxh3_128()
    digest.update(len(stream).to_bytes(8, "little"))
    digest.update(stream)
    for buffer in buffers:
        raw = buffer.raw()
        digest.update(raw.nbytes.to_bytes(8, "little"))
        digest.update(raw)
    return "keras_pickle", type(obj).__module__, type(obj).__qualname__, digest.hexdigest()


class _TokenPickler(pickle.Pickler):
    """``pickle.dumps`` for hashing: the main script's classes and functions get one name everywhere.

    A worker started with ``spawn`` (Dask's default) runs the main script as
    ``__mp_main__``, so a custom layer defined there is ``__mp_main__.Gate``
    on the worker and ``__main__.Gate`` on the client: the same class, which
    both processes reach under both names. Named ``__main__.<qualname>``
    in the hashed stream (also where the payload carries it by value), the same
    model gets the same token on either side.
    The name is a new string each time: pickle memoizes strings by identity,
    and whether the class's name is the very object the payload holds elsewhere
    differs between processes.
    """

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, ByValue):  # carried by value: cloudpickle's bytes differ between processes
            obj = obj.target
        if isinstance(obj, (type, FunctionType)) and getattr(obj, "__module__", None) in MAIN_MODULES:
            return f"__main__.{obj.__qualname__}"
        return None


def variables_nbytes(obj: Any) -> int:
    """Bytes held by a layer's or model's variables, optimizer state included."""
    variables = {id(v): v for v in obj.variables}
    optimizer = getattr(obj, "optimizer", None)
    for v in getattr(optimizer, "variables", ()) or ():
        variables.setdefault(id(v), v)
    total = 0
    for v in variables.values():
        count = 1
        for dim in v.shape:
            count *= int(dim or 0)
        total += count * _itemsize(v.dtype)
    return total


def _itemsize(dtype: Any) -> int:
    try:
        return np.dtype(str(dtype)).itemsize
    except TypeError:
        return 2  # bfloat16 and other types NumPy does not name


def _register(dispatch: Any, cls: type, function: Any) -> None:
    """Register ``function`` for ``cls``, remembering what was there.

    ``dask.utils.Dispatch`` caches the function it found for a subclass, so
    Keras classes looked up before (``Functional``, ``Sequential``) are
    registered too. Its ``_lookup`` table is read for that and for undoing.
    """
    targets = {cls} | {t for t in dispatch._lookup if isinstance(t, type) and issubclass(t, keras.Layer)}
    for target in targets:
        if dispatch._lookup.get(target) is function:
            continue
        _saved.append((dispatch, target, dispatch._lookup.get(target, _MISSING)))
        dispatch.register(target, function)


def _unregister(dispatch: Any) -> None:
    """Put back what ``dispatch`` had before keras_pickle, and forget lookups Dask cached since."""
    ours = (decline_dask_family, keras_token, variables_nbytes)
    for entry in reversed([entry for entry in _saved if entry[0] is dispatch]):
        _saved.remove(entry)
        _dispatch, target, previous = entry
        if previous is _MISSING:
            dispatch._lookup.pop(target, None)
        else:
            dispatch._lookup[target] = previous
    for target, function in list(dispatch._lookup.items()):
        if any(function is f for f in ours):
            del dispatch._lookup[target]


def register_serializer(module: ModuleType) -> None:
    """Replace Dask's Keras 2 serializer (on ``distributed.protocol`` import, or at install)."""
    from distributed.protocol.serialize import dask_serialize

    # The first lookup of a Keras class runs distributed's lazy Keras
    # registration; run it now, so that it cannot overwrite ours later.
    dask_serialize.dispatch(keras.Model)
    for cls in (keras.Layer, keras.Model):
        _register(dask_serialize, cls, decline_dask_family)


def unregister_serializer(module: ModuleType) -> None:
    from distributed.protocol.serialize import dask_serialize

    _unregister(dask_serialize)


def register_tokenize(module: ModuleType) -> None:
    """Deterministic ``normalize_token`` and a truthful ``sizeof`` (on ``dask`` import, or at install)."""
    from dask.base import normalize_token
    from dask.sizeof import sizeof

    _register(normalize_token, keras.Layer, keras_token)
    _register(sizeof, keras.Layer, variables_nbytes)


def unregister_tokenize(module: ModuleType) -> None:
    from dask.base import normalize_token
    from dask.sizeof import sizeof

    _unregister(normalize_token)
    _unregister(sizeof)
