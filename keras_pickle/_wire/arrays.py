"""Array codecs: one variable on the wire is ``(path, dtype, shape, data)``.

``dtype`` is numpy's type string (``"<f4"``), or the name of an extension
float type (``"bfloat16"``), which has none; ``data`` is the raw bytes of a
C-contiguous array, a ``PickleBuffer`` under protocol 5 (handed out of band)
and ``bytes`` under protocols 0-4, or a uint8 numpy array for a pickler that
stores numpy arrays its own way (joblib memory-maps them).
"""

from __future__ import annotations

import functools
import math
import pickle
from collections.abc import Iterable

import numpy as np

from .. import limits
from ..errors import KerasUnpicklingError, StateMismatchError
from .reprs import bounded_repr, shorten

WireArray = tuple  # (path_or_key, dtype, shape, data)

# Extension types (ml_dtypes) with no portable numpy type string, and their item sizes.
EXTENSION_ITEMSIZES = {
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "int4": 1,
    "uint4": 1,
}


MAX_DTYPE_NAME = 64
"""The longest wire dtype name read: numpy's type strings and the extension types' names are short."""


@functools.lru_cache(maxsize=64)  # a model has a handful of dtypes and many arrays; dtype.name is slow
def dtype_to_wire(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.name in EXTENSION_ITEMSIZES:
        return dtype.name
    return dtype.str


def _is_plain(dtype: np.dtype) -> bool:
    """A plain dtype: no objects, fields or subarrays (numbers and booleans; also fixed-width strings
    and bytes, which a lookup layer's state holds, and dates: inert data)."""
    return not (dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None)


def wire_itemsize(name: object) -> int | None:
    """Bytes per item of a wire dtype, or None if ``name`` is not one; imports no extension types."""
    if not isinstance(name, str) or len(name) > MAX_DTYPE_NAME:
        return None
    if name in EXTENSION_ITEMSIZES:
        return EXTENSION_ITEMSIZES[name]
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError, SyntaxError, OverflowError):
        return None
    return dtype.itemsize if _is_plain(dtype) else None


def dtype_from_wire(name: object) -> np.dtype:
    """The numpy dtype a wire dtype names; KerasUnpicklingError for anything but a plain one (:func:`_is_plain`)."""
    if not isinstance(name, str) or len(name) > MAX_DTYPE_NAME:
        raise KerasUnpicklingError(f"Invalid dtype in payload: {bounded_repr(name)}.")
    return _dtype_named(name)


@functools.lru_cache(maxsize=64)  # a body names a handful of dtypes many times; a failed name is not cached
def _dtype_named(name: str) -> np.dtype:
    if name in EXTENSION_ITEMSIZES:
        import ml_dtypes  # installed with Keras; only extension float types need it

        return np.dtype(getattr(ml_dtypes, name))
    try:
        dtype = np.dtype(name)
    except Exception as e:  # numpy raises TypeError, ValueError or SyntaxError for junk
        raise KerasUnpicklingError(f"Invalid dtype in payload: {bounded_repr(name)}.", original_error=e) from e
    if not _is_plain(dtype):
        raise KerasUnpicklingError(
            f"Refusing dtype {bounded_repr(name)}: only plain dtypes (no objects, fields or subarrays) are stored."
        )
    return dtype


def encode_array(key: str, array: np.ndarray, protocol: int, *, data: np.ndarray | None = None) -> WireArray:
    """One array on the wire: out of band under protocol 5, bytes otherwise; ``data`` (the array's bytes as
    a uint8 numpy array) for a pickler that stores numpy arrays its own way (joblib)."""
    array = np.asarray(array, order="C")
    if data is None:
        raw = array.reshape(-1).view(np.uint8)
        data = pickle.PickleBuffer(raw) if protocol >= 5 else raw.tobytes()
    return (key, dtype_to_wire(array.dtype), tuple(int(d) for d in array.shape), data)


def decode_array(entry: object, section: str = "variables") -> tuple[str, np.ndarray]:
    """The inverse of :func:`encode_array`, without copying the data; the entry is validated as
    :func:`check_entry` does (``section`` names where it stands in errors)."""
    key, dtype, shape, buffer = _validated(entry, section)
    if buffer.nbytes == 0:
        return key, np.zeros(shape, dtype)
    return key, np.frombuffer(buffer, dtype=dtype).reshape(shape)


def wire_nbytes(entries: Iterable[WireArray]) -> int:
    return sum(memoryview(entry[3]).nbytes for entry in entries)


def check_entry(entry: object, section: str) -> int:
    """Validate one ``(path, dtype, shape, data)`` entry; return its byte count.

    The shape is checked against the limits before anything else, and the
    data must be a buffer of exactly the size shape and dtype imply.
    """
    return _validated(entry, section)[3].nbytes


def _validated(entry: object, section: str) -> tuple[str, np.dtype, tuple, memoryview]:
    """An entry's path, dtype, shape and data as bytes, or the error that says what is wrong with it:
    the one validator of an array entry, for :func:`check_entry` and :func:`decode_array` alike."""
    if not (isinstance(entry, tuple) and len(entry) == 4):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: an entry of {section} is a {type(entry).__name__}, "
            "not a (path, dtype, shape, data) tuple."
        )
    key, dtype_name, shape, data = entry
    if not isinstance(key, str):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: an entry of {section} has a {type(key).__name__} as its path."
        )
    if not (isinstance(shape, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise KerasUnpicklingError(f"Invalid shape for {key!r} in payload: {bounded_repr(shape)}.")
    limits.check_limit("MAX_ARRAY_RANK", len(shape), f"variable {key!r} has {len(shape)} dimensions")
    dtype = dtype_from_wire(dtype_name)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limits.MAX_ARRAY_BYTES:  # the message is built only for an entry that exceeds it
        what = f"variable {key!r} of shape {shorten(repr(shape), 200)} and dtype {dtype.name}"
        limits.check_limit("MAX_ARRAY_BYTES", nbytes, f"{what} needs {limits.human_bytes(nbytes)}")
    try:
        buffer = memoryview(data).cast("B")
    except TypeError as e:
        raise KerasUnpicklingError(
            f"Invalid data for {key!r} in payload: {type(data).__name__} is not a buffer.", original_error=e
        ) from e
    if buffer.nbytes != nbytes:
        raise StateMismatchError(
            f"Variable {key!r} has {buffer.nbytes} bytes of data; its shape {shape} and dtype {dtype.name} "
            f"need {nbytes}. The payload is truncated or corrupt.",
            path=key,
        )
    return key, dtype, shape, buffer
