"""The keras_pickle payload, format version 1.

A pickled Keras object is the call ``restore(header, body)``:

``header`` (a dict of plain values, read first)
    ``format`` ("keras_pickle"), ``format_version``, ``keras_version``,
    ``backend``, ``class`` (dotted path of the pickled object's class),
    ``kind`` ("layer" or "loss"), ``n_variables``, ``weight_bytes`` and
    ``checksum`` (``None`` or ``"xxh3_64:<hex>"``).

``body`` (a dict)
    ``config``: the object's Keras config as a JSON string (including its
    build and compile configs); ``variables`` and ``optimizer_variables``:
    lists of ``(path, dtype, shape, data)`` in the order of
    ``obj.variables`` / ``obj.optimizer.variables``; ``optimizer_built``:
    whether the optimizer had created its slots; ``layer_states``: state
    that layers keep outside Keras variables (lookup tables, vocabularies),
    as ``(layer_index, [(key, dtype, shape, data)], [(asset_path, bytes)])``;
    ``custom_objects``: the custom classes and functions the config names,
    keyed by the names Keras looks up.

``data`` is the raw bytes of a C-contiguous array: a ``PickleBuffer`` under
protocol 5, so that ``buffer_callback`` receives every weight out of band,
and ``bytes`` under protocols 0-4. No zip, no HDF5, no numpy pickling.

``restore`` is referenced by every payload: its dotted path
``keras_pickle._format.restore`` is part of the format and never changes.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterable
from typing import Any

import keras
import numpy as np
import xxhash

from . import _options
from ._backend import backend_name
from .errors import (
    ChecksumMismatchError,
    FormatVersionError,
    KerasPickleError,
    KerasUnpicklingError,
    NotAPayloadError,
    StateMismatchError,
)

FORMAT_NAME = "keras_pickle"
FORMAT_VERSION = 1
CHECKSUM_ALGORITHM = "xxh3_64"

# Extension float types (ml_dtypes) have no portable numpy type string.
_EXTENSION_DTYPES = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "int4",
    "uint4",
)

WireArray = tuple  # (path_or_key, dtype, shape, data)


# --------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------


def dtype_to_wire(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.name in _EXTENSION_DTYPES:
        return dtype.name
    return dtype.str


def dtype_from_wire(name: object) -> np.dtype:
    if not isinstance(name, str):
        raise KerasUnpicklingError(f"Invalid dtype in payload: {name!r}.")
    if name in _EXTENSION_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    try:
        dtype = np.dtype(name)
    except TypeError as e:
        raise KerasUnpicklingError(f"Invalid dtype in payload: {name!r}.", original_error=e) from e
    if dtype.hasobject or dtype.fields is not None:
        raise KerasUnpicklingError(f"Refusing dtype {name!r}: only plain numeric dtypes are stored.")
    return dtype


def encode_array(key: str, array: np.ndarray, protocol: int) -> WireArray:
    """One array on the wire: out of band under protocol 5, bytes otherwise."""
    array = np.asarray(array, order="C")
    raw = array.reshape(-1).view(np.uint8)
    data = pickle.PickleBuffer(raw) if protocol >= 5 else raw.tobytes()
    return (key, dtype_to_wire(array.dtype), tuple(int(d) for d in array.shape), data)


def decode_array(entry: object) -> tuple[str, np.ndarray]:
    """The inverse of :func:`encode_array`, without copying the data."""
    if not (isinstance(entry, tuple) and len(entry) == 4):
        raise KerasUnpicklingError(f"Invalid array entry in payload: {type(entry).__name__}.")
    key, dtype_name, shape, data = entry
    dtype = dtype_from_wire(dtype_name)
    if not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise KerasUnpicklingError(f"Invalid shape for {key!r} in payload: {shape!r}.")
    try:
        buffer = memoryview(data).cast("B")
    except TypeError as e:
        raise KerasUnpicklingError(
            f"Invalid data for {key!r} in payload: {type(data).__name__} is not a buffer.",
            original_error=e,
        ) from e
    expected = math.prod(shape) * dtype.itemsize
    if buffer.nbytes != expected:
        raise StateMismatchError(
            f"Variable {key!r} has {buffer.nbytes} bytes of data; its shape {shape} and "
            f"dtype {dtype.name} need {expected}. The payload is truncated or corrupt.",
            path=str(key),
        )
    if expected == 0:
        return key, np.zeros(shape, dtype)
    return key, np.frombuffer(buffer, dtype=dtype).reshape(shape)


def wire_nbytes(entries: Iterable[WireArray]) -> int:
    return sum(memoryview(entry[3]).nbytes for entry in entries)


# --------------------------------------------------------------------------
# Header and checksum
# --------------------------------------------------------------------------


def make_header(*, obj: Any, kind: str, body: dict, checksum: bool) -> dict:
    cls = type(obj)
    arrays = list(_body_arrays(body))
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "keras_version": keras.__version__,
        "backend": backend_name(),
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "kind": kind,
        "n_variables": len(arrays),
        "weight_bytes": wire_nbytes(arrays),
        "checksum": body_checksum(body) if checksum else None,
    }


def _body_arrays(body: dict) -> Iterable[WireArray]:
    yield from body.get("variables", ())
    yield from body.get("optimizer_variables", ())
    for _index, own_variables, _assets in body.get("layer_states", ()):
        yield from own_variables


def body_checksum(body: dict) -> str:
    """xxh3_64 over everything in the body except the custom objects' code."""
    digest = xxhash.xxh3_64()

    def feed(*parts: object) -> None:
        for part in parts:
            if isinstance(part, (bytes, bytearray, memoryview, pickle.PickleBuffer)):
                view = memoryview(part)
                digest.update(len(view.cast("B")).to_bytes(8, "little"))
                digest.update(view)
            else:
                text = repr(part).encode()
                digest.update(len(text).to_bytes(8, "little"))
                digest.update(text)

    feed(body.get("config", ""), body.get("optimizer_built"))
    for section in ("variables", "optimizer_variables"):
        feed(section)
        for key, dtype, shape, data in body.get(section, ()):
            feed(key, dtype, shape, data)
    feed("layer_states")
    for index, own_variables, assets in body.get("layer_states", ()):
        feed(index)
        for key, dtype, shape, data in own_variables:
            feed(key, dtype, shape, data)
        for path, content in assets:
            feed(path, content)
    feed("custom_objects", sorted(body.get("custom_objects", {})))
    return f"{CHECKSUM_ALGORITHM}:{digest.hexdigest()}"


def check_header(header: object) -> dict:
    """Validate a header, or raise the error that says what was found."""
    if not (isinstance(header, dict) and header.get("format") == FORMAT_NAME):
        found = "a dict without the keras_pickle marker" if isinstance(header, dict) else f"a {type(header).__name__}"
        raise NotAPayloadError(
            f"Not a keras_pickle payload: the reconstructor received {found} as its header.",
            found=found,
        )
    version = header.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise NotAPayloadError(
            f"Not a keras_pickle payload: invalid format version {version!r}.",
            found=f"format_version={version!r}",
        )
    if version > FORMAT_VERSION:
        from . import __version__

        raise FormatVersionError(
            f"This payload uses keras_pickle format version {version}, written by a newer "
            f"keras_pickle (Keras {header.get('keras_version', '?')}); the installed "
            f"keras_pickle {__version__} reads format versions up to {FORMAT_VERSION}. "
            "Upgrade: pip install --upgrade keras-pickle",
            found_version=version,
            supported_version=FORMAT_VERSION,
        )
    return header


def check_body(header: dict, body: object) -> dict:
    if not isinstance(body, dict) or not isinstance(body.get("config"), str):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: the body has no config.")
    expected = header.get("checksum")
    if expected is not None:
        actual = body_checksum(body)
        if actual != expected:
            raise ChecksumMismatchError(
                f"The payload's content does not match its checksum ({expected} in the "
                f"header, {actual} computed): it was changed or damaged after it was written."
            )
    return body


# --------------------------------------------------------------------------
# The reconstructor
# --------------------------------------------------------------------------


def restore(header, body):
    """Rebuild a Keras object from a keras_pickle payload.

    This is the function every keras_pickle pickle calls. It validates the
    header before touching the body, installs keras_pickle in this process
    (so objects returned from here pickle the same way), and raises only
    :class:`~keras_pickle.KerasUnpicklingError` subclasses.
    """
    header = check_header(header)
    body = check_body(header, body)
    from . import _mixins, _payload

    _mixins.install_on_first_load()
    try:
        obj = _payload.object_from_payload(header, body, safe_mode=_options.load_options().safe_mode)
    except KerasPickleError:
        raise
    except Exception as e:
        root = root_cause(e)
        raise KerasUnpicklingError(
            f"Could not rebuild {header.get('class', 'the object')} from its payload: "
            f"{type(root).__name__}: {_shorten(str(root))}",
            original_error=e,
        ) from e
    _options.note_restored()
    return obj


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception of a chain (Keras wraps errors several times)."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    return error


def _shorten(text: str, limit: int = 1500) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"
