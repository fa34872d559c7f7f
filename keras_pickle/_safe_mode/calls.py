"""What the pickle stream may call: :data:`~.rules.CALLABLE_GLOBALS`, each held to what it is allowed for.

keras_pickle's reconstructors check their own input (:mod:`keras_pickle._protocol`); numpy's array, dtype and
scalar reconstruction and ``_codecs.encode`` are handed to the stream as the checked versions below, which
allow only what numpy's own pickles (and protocols 0-2's ``bytes``) do: an empty array whose data ``BUILD``
brings, a scalar from exactly its bytes, a plain dtype, latin-1. :func:`allowed_call` is what the restricted
unpickler gets for such a global.
"""

from __future__ import annotations

import pickle
import sys
import types
from typing import Any

import numpy as np

from .._wire.reprs import bounded_repr
from ..errors import UnsafePayloadError
from .rules import CALLABLE_GLOBALS


class _NdarrayType:
    """What ``numpy.ndarray`` resolves to: a token for ``_reconstruct``'s subtype, not a constructor.

    ``ndarray(shape, dtype)`` would allocate whatever the stream asks for
    (zero-filled for object arrays); numpy's own pickles only pass the class
    to ``_reconstruct``.
    """

    __slots__ = ()

    def __call__(self, *args, **kwargs):
        raise UnsafePayloadError(
            "Safe mode refused a call of numpy.ndarray while unpickling: numpy's own pickles "
            "only name it as numpy.core.multiarray._reconstruct's subtype.",
            what="numpy.ndarray",
        )

    def __repr__(self) -> str:
        return "<numpy.ndarray, for _reconstruct only>"


_NDARRAY = _NdarrayType()


def _checked_reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    """numpy's ``_reconstruct`` as numpy's pickles call it: an empty plain ndarray, shape ``(0,)``.

    numpy pickles an array as ``_reconstruct(ndarray, (0,), b"b")`` followed
    by ``BUILD`` with the real shape, dtype and data (whose size bounds the
    allocation: numpy checks the data's length against the shape). Anything
    else is refused before numpy allocates: an array of any other shape is
    uninitialized memory, and a stream may leave out the ``BUILD``.
    """
    if subtype is not _NDARRAY:
        raise UnsafePayloadError(
            f"Safe mode refused numpy _reconstruct of {bounded_repr(subtype)}: only numpy.ndarray.",
            what="numpy.core.multiarray._reconstruct",
        )
    try:
        dims = [int(d) for d in (shape if isinstance(shape, tuple) else (shape,))]
        dtype = np.dtype(dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise UnsafePayloadError(
            f"Safe mode refused numpy _reconstruct with shape {bounded_repr(shape)} and dtype "
            f"{bounded_repr(dtype)}: {type(e).__name__}.",
            what="numpy.core.multiarray._reconstruct",
        ) from e
    if dtype.hasobject or dims != [0]:
        # Any other shape is memory numpy leaves uninitialized (a freed secret, heap addresses) or allocates
        # at the stream's word, filled by no BUILD: numpy's pickles pass (0,), and BUILD brings the data.
        raise UnsafePayloadError(
            f"Safe mode refused numpy _reconstruct of a {dtype} array of shape {bounded_repr(shape)}: "
            "numpy's own pickles start from an empty array, shape (0,), of a plain dtype, whose data BUILD "
            "then brings from the stream.",
            what="numpy.core.multiarray._reconstruct",
        )
    check_plain_dtype(dtype, "_reconstruct")
    return np.ndarray(tuple(dims), dtype)  # what _reconstruct(ndarray, shape, dtype) does


def _latin1_encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """``_codecs.encode`` as protocols 0-2 use it for ``bytes``: latin-1 only (other codecs import modules)."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str) or errors != "strict":
        raise UnsafePayloadError(
            f"Safe mode refused _codecs.encode with codec {bounded_repr(encoding)}: pickles spell bytes "
            "with latin1 only, and another codec would import its module.",
            what="_codecs.encode",
        )
    return text.encode("latin-1")


def check_plain_dtype(dtype: Any, what: str) -> None:
    """Refuse a dtype that numpy would not build from its own description: numpy's ``__setstate__`` of a
    dtype checks neither overlapping fields nor flags, and an object field laid over raw bytes, or one
    whose flags say it holds no objects, is a pointer chosen by the payload. Python objects are refused."""

    def rebuilt() -> list:
        found = []
        for build in (lambda: np.dtype(dtype.descr if dtype.fields else dtype.str), lambda: np.dtype(dtype.type)):
            try:
                found.append(build())
            except Exception:  # noqa: BLE001  (overlapping fields, a type numpy cannot rebuild by itself)
                pass
        return found

    same = [d for d in rebuilt() if d == dtype and d.flags == dtype.flags and d.itemsize == dtype.itemsize]
    if not same or same[0].hasobject or dtype.hasobject:
        raise UnsafePayloadError(
            f"Safe mode refused a numpy dtype made by {what}: keras_pickle payloads hold dtypes numpy builds from "
            "their own description (no overlapping fields, no Python objects, numpy's own flags).",
            what=f"numpy dtype ({what})",
        )


def _checked_frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's ``_frombuffer`` (protocol 5 arrays) for a plain dtype only, over a buffer numpy's pickles give it
    (bytes the stream holds, or an out-of-band buffer the caller passed): never over an array the stream made,
    whose data a later BUILD could free."""
    if not isinstance(buffer, (bytes, bytearray, memoryview, pickle.PickleBuffer)):
        raise UnsafePayloadError(
            f"Safe mode refused numpy _frombuffer over a {type(buffer).__name__}: numpy's pickles read bytes "
            "or an out-of-band buffer.",
            what="numpy._core.numeric._frombuffer",
        )
    if not isinstance(dtype, np.dtype):
        raise UnsafePayloadError(
            f"Safe mode refused numpy _frombuffer with dtype {bounded_repr(dtype)}: not a numpy dtype.",
            what="numpy._core.numeric._frombuffer",
        )
    check_plain_dtype(dtype, "_frombuffer")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def _checked_scalar(dtype: Any, *obj: Any) -> Any:
    """numpy's ``scalar(dtype, data)`` as numpy pickles a scalar: a plain dtype and exactly its
    ``itemsize`` bytes of data, so that what is allocated is what the payload holds (``scalar(dtype)``
    alone allocates ``itemsize`` zeroed bytes, as many as a dtype's description asks)."""
    if not isinstance(dtype, np.dtype) or len(obj) != 1 or not isinstance(obj[0], bytes):
        raise UnsafePayloadError(
            f"Safe mode refused numpy scalar({bounded_repr(dtype)}, ...) with {len(obj)} more argument(s): "
            "numpy pickles a scalar as scalar(dtype, data), data being the scalar's bytes.",
            what="numpy.core.multiarray.scalar",
        )
    check_plain_dtype(dtype, "scalar")
    if len(obj[0]) != dtype.itemsize:
        raise UnsafePayloadError(
            f"Safe mode refused numpy scalar of dtype {bounded_repr(str(dtype))} from {len(obj[0]):,} bytes: "
            f"a scalar of that dtype holds {dtype.itemsize:,}.",
            what="numpy.core.multiarray.scalar",
        )
    return _NUMPY_SCALAR(dtype, obj[0])


_NUMPY_SCALAR = vars(np._core.multiarray if hasattr(np, "_core") else np.core.multiarray)["scalar"]


_CHECKED_CALLABLES = {
    ("numpy._core.numeric", "_frombuffer"): _checked_frombuffer,
    ("numpy._core.multiarray", "_reconstruct"): _checked_reconstruct,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy._core.multiarray", "scalar"): _checked_scalar,
    ("_codecs", "encode"): _latin1_encode,
}


def allowed_call(module: str, name: str) -> Any:
    """The global ``module.name`` of :data:`~.rules.CALLABLE_GLOBALS`, checked where :data:`_CHECKED_CALLABLES`
    holds it, from the namespace of a module in sys.modules only (numpy 2 keeps ``numpy.core`` names as
    aliases of ``numpy._core``)."""
    qualified = f"{module}.{name}"
    if (module, name) not in CALLABLE_GLOBALS:
        raise UnsafePayloadError(f"Safe mode refused global {qualified}: the stream may not call it.", what=qualified)
    for candidate in (module, module.replace("numpy.core", "numpy._core", 1)):
        loaded = sys.modules.get(candidate)
        found = vars(loaded).get(name) if isinstance(loaded, types.ModuleType) else None
        if found is not None:
            return _CHECKED_CALLABLES.get((module.replace("numpy.core", "numpy._core", 1), name), found)
    raise UnsafePayloadError(
        f"Safe mode refused global {qualified}: its module is not imported, and safe mode never imports modules.",
        what=qualified,
    )
