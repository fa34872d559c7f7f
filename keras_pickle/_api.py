"""``dumps`` / ``dump`` / ``loads`` / ``load``: pickle with keras_pickle's options."""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable
from typing import IO, Any

from . import _mixins, _options, _safe
from .errors import KerasPickleError, KerasPicklingError, NotAPayloadError, UnsafePayloadError


def dumps(
    obj: Any,
    protocol: int | None = None,
    *,
    checksum: bool = False,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
) -> bytes:
    """Pickle ``obj`` (a Keras object or any structure holding some) to bytes.

    ``protocol`` defaults to :data:`pickle.HIGHEST_PROTOCOL`. With protocol 5
    and a ``buffer_callback``, every weight array is handed to the callback
    out of band instead of being copied into the stream. ``checksum=True``
    records an xxh3 checksum of the content, verified on load.
    """
    buffer = io.BytesIO()
    dump(obj, buffer, protocol, checksum=checksum, buffer_callback=buffer_callback)
    return buffer.getvalue()


def dump(
    obj: Any,
    file: IO[bytes],
    protocol: int | None = None,
    *,
    checksum: bool = False,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
) -> None:
    """Like :func:`dumps`, writing to a binary file object."""
    _mixins.install()
    protocol = pickle.HIGHEST_PROTOCOL if protocol is None else protocol
    with _options.dumping(_options.DumpOptions(checksum=checksum)):
        try:
            pickle.Pickler(file, protocol, buffer_callback=buffer_callback).dump(obj)
        except KerasPickleError:
            raise
        except Exception as e:
            raise KerasPicklingError(
                f"Cannot pickle {type(obj).__name__}: {type(e).__name__}: {e}", original_error=e
            ) from e


def loads(data: bytes, *, safe_mode: bool = True, buffers: Iterable[Any] | None = None) -> Any:
    """Load a keras_pickle payload (or a structure holding some) from bytes.

    With ``safe_mode=True`` (the default) a restricted unpickler refuses
    anything but keras_pickle's reconstructor, numpy arrays and Keras /
    custom classes of already-imported modules, before it can run; Lambda
    layers are refused. ``safe_mode=False`` unpickles like ``pickle.loads``.
    ``buffers`` are the out-of-band buffers of a protocol-5 ``dumps``.

    Raises :class:`~keras_pickle.KerasUnpicklingError` (or a subclass) for
    anything that is not a loadable keras_pickle payload.
    """
    view = memoryview(data)
    if view.nbytes == 0:
        raise NotAPayloadError("Not a keras_pickle payload: the data is empty.", found="empty data")
    return _load_one(io.BytesIO(view), safe_mode=safe_mode, buffers=buffers, describe=lambda: describe_bytes(view))


def load(file: IO[bytes], *, safe_mode: bool = True, buffers: Iterable[Any] | None = None) -> Any:
    """Like :func:`loads`, reading one pickle from a binary file object."""
    name = getattr(file, "name", file)
    return _load_one(file, safe_mode=safe_mode, buffers=buffers, describe=lambda: f"the file {name!r}")


def _load_one(file: IO[bytes], *, safe_mode: bool, buffers, describe: Callable[[], str]) -> Any:
    options = _options.LoadOptions(safe_mode=safe_mode)
    unpickler_class = _safe.SafeUnpickler if safe_mode else pickle.Unpickler
    head = _peek(file)
    with _options.loading(options):
        try:
            obj = unpickler_class(file, buffers=buffers).load()
        except UnsafePayloadError as e:
            if _safe.looks_like_keras_native(head):
                raise UnsafePayloadError(str(e) + _safe.KERAS_NATIVE_HINT, what=e.what) from e
            raise
        except KerasPickleError:
            raise
        except Exception as e:
            raise NotAPayloadError(
                f"Not a keras_pickle payload: {describe()} could not be unpickled ({type(e).__name__}: {e}).",
                found=describe(),
                original_error=e,
            ) from e
    if options.restored == 0:
        found = f"a pickled {type(obj).__module__}.{type(obj).__qualname__}"
        raise NotAPayloadError(
            f"Not a keras_pickle payload: the data is {found}, which holds no Keras object pickled by keras_pickle.",
            found=found,
        )
    return obj


def _peek(file: IO[bytes], size: int = 4096) -> bytes:
    """The first bytes ``file`` will yield, without consuming them (if seekable)."""
    try:
        position = file.tell()
        head = file.read(size)
        file.seek(position)
    except (AttributeError, OSError, ValueError):
        return b""
    return head if isinstance(head, bytes) else b""


_SIGNATURES = (
    (b"PK\x03\x04", "a zip archive (a .keras file? load it with keras.saving.load_model)"),
    (b"\x89HDF", "an HDF5 file (an .h5 model? load it with keras.saving.load_model)"),
    (b"\x93NUMPY", "a .npy file"),
    (b"\x1f\x8b", "gzip-compressed data"),
)


def describe_bytes(view: memoryview) -> str:
    head = bytes(view[:8])
    for signature, description in _SIGNATURES:
        if head.startswith(signature):
            return description
    return f"{view.nbytes} bytes starting with {head!r}"
