"""Why a load failed: the one error to raise, chosen from the caught error's fields and what the loader read.

:func:`keras_pickle.loads` and :func:`keras_pickle.load` read a stream, else raise what this module
decides: :func:`foreign` before reading (a format that is never a pickle), :func:`diagnose` for whatever
reading raised, :func:`unexpected` for a stream that unpickled to what loading does not return. Each
decides from the error's type and fields (``what``, ``lead``, ``detail``, ``refused``: see
:mod:`keras_pickle.errors`) and from the :class:`Reading` (the stream's first bytes, the file, the whole
stream when advice needs it), never from an error's text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import IO, Any

from .._keras3.native_pickle import conversion_advice, keras_cause
from .._reader.prescan import ended_early, peek
from ..errors import (
    CustomObjectLoadError,
    KerasPickleError,
    KerasUnpicklingError,
    NotAPayloadError,
    UnsafePayloadError,
)
from . import stream_root
from .damage import HEAD_BYTES, stream_damage, verdict_damage
from .formats import foreign_format, looks_like_keras_native
from .load_failure import payload_error

WHOLE_LIMIT = 1 << 28
"""The largest file whose bytes an error about Keras's own pickle reads again, to name what it needs (256 MiB)."""


@dataclasses.dataclass(frozen=True)
class Reading:
    """What the loader knows of the stream it reads.

    ``head``: its first :data:`~.damage.HEAD_BYTES` bytes, enough to tell a damaged payload from data that is
    none; ``describe()``: the input, named for errors; ``file`` and ``start``: the file and where the pickle
    begins in it (None: unknown); ``whole()``: the stream's bytes again, when an error's advice needs them
    (None where they cannot be read, or are more than :data:`WHOLE_LIMIT`).
    """

    head: bytes
    describe: Callable[[], str]
    file: IO[bytes]
    start: int | None
    whole: Callable[[], bytes | None]

    @classmethod
    def of(cls, file: IO[bytes], describe: Callable[[], str], data: Any = None) -> Reading:
        """The reading of ``file`` from where it stands, nothing consumed; ``data``: its bytes, where the caller
        holds them (``loads``)."""
        head = peek(file, HEAD_BYTES)
        start = stream_root.position(file)
        whole = (lambda: bytes(memoryview(data))) if data is not None else _whole_file(file, start)
        return cls(head=head, describe=describe, file=file, start=start, whole=whole)


def foreign(reading: Reading) -> NotAPayloadError | None:
    """The error for data in a known format that is never a pickle (a ``.keras`` zip, HDF5, ``.npy``, gzip),
    before anything reads it; else None."""
    found = foreign_format(reading.head)
    if found is None:
        return None
    described = reading.describe()
    found = described if described == found else f"{described}, {found}"
    return NotAPayloadError(f"Not a keras_pickle payload: {found}.", found=found)


def diagnose(error: Exception, reading: Reading, unpickler: Any, restored: int) -> BaseException:
    """The exception to raise for ``error``, raised while ``reading``'s stream was read by ``unpickler`` (None
    where none was made) after ``restored`` payloads in it loaded; ``error`` itself where nothing explains
    it better.

    * Safe mode's refusal of Keras's own pickle: the same refusal, saying how to convert it.
    * A keras_pickle error that damage explains (a refusal of safe mode or "not a payload" on a stream that
      shows a payload, a schema check's verdict on a header a damaged byte took the checksum from): the
      damage (:mod:`.damage`). Any other keras_pickle error: itself.
    * Anything else: inside a payload that ships classes by value, that class's failure
      (:mod:`.load_failure`); else the damage; else the failure of the payload it was inside; else a
      :class:`~keras_pickle.NotAPayloadError`: the data ended early, Keras could not rebuild its own
      pickle (how to convert it), or the data could not be unpickled.
    """
    head, describe = reading.head, reading.describe
    if isinstance(error, UnsafePayloadError) and looks_like_keras_native(head):
        why = f"safe mode refused it ({error.refused})"
        return UnsafePayloadError(_native(describe(), why, reading.whole), what=error.what)
    if isinstance(error, (UnsafePayloadError, NotAPayloadError)):
        return stream_damage(head, describe(), error) or error
    if isinstance(error, KerasUnpicklingError):
        return verdict_damage(head, error) or error
    if isinstance(error, KerasPickleError):
        return error
    failure = payload_error(unpickler, restored, error)
    if isinstance(failure, CustomObjectLoadError):
        return failure  # code carried by value that fails to load here: not damage
    damaged = stream_damage(head, describe(), error, requested=getattr(unpickler, "requested", None))
    if damaged is not None:
        return damaged
    if failure is not None:
        return failure
    ended = ended_early(reading.file, reading.start, error)
    if ended is not None:  # the data stops inside the pickle: say so, not the unpickler's EOFError
        found = f"{describe()} {ended.partition(':')[0]}"
        return NotAPayloadError(f"Not a keras_pickle payload: {describe()} {ended}.", found=found)
    if looks_like_keras_native(head):  # Keras failed to rebuild its own pickle: say how to convert
        why = f"Keras could not rebuild it ({keras_cause(error)})"
        return NotAPayloadError(_native(describe(), why, reading.whole), found=describe(), original_error=error)
    return NotAPayloadError(
        f"Not a keras_pickle payload: {describe()} could not be unpickled ({type(error).__name__}: {error}).",
        found=describe(),
        original_error=error,
    )


def unexpected(obj: Any, reading: Reading, unpickler: Any, restored: int) -> KerasUnpicklingError | None:
    """The error for a stream that ``unpickler`` read to its end, returning ``obj`` after ``restored`` payloads
    in it loaded, when that is not what loading returns; else None.

    What STOP returned is not what the stream built (:func:`.stream_root.unused_at_stop`: a damaged opcode
    before it), or the stream holds no keras_pickle payload (Keras's own pickle: how to convert it). Either
    is damage where the stream's first bytes show a payload.
    """
    describe = reading.describe
    if restored:
        unused = stream_root.unused_at_stop(unpickler, obj, lambda: stream_root.reread(reading.file, reading.start))
        if not unused:
            return None
        error = NotAPayloadError(
            f"Not a keras_pickle payload: {describe()} is not a well-formed pickle ({unused}).", found=describe()
        )
        return stream_damage(reading.head, describe(), error) or error
    found = f"a pickled {type(obj).__module__}.{type(obj).__qualname__}"
    why = "it holds no Keras object pickled by keras_pickle"
    message = f"Not a keras_pickle payload: the data is {found}: {why}."
    if looks_like_keras_native(reading.head):
        message = _native(f"the data, {found},", why, reading.whole)
    error = NotAPayloadError(message, found=found)
    return stream_damage(reading.head, describe(), error) or error


def _native(found: str, why: str, whole: Callable[[], bytes | None]) -> str:
    """The message for Keras's own pickle format (or scikeras's): what happened on one line, then the conversion,
    one statement a line, naming what the pickle needs (:func:`keras_pickle._keras3.native_pickle.conversion_code`)."""
    return (
        f"Not a keras_pickle payload: {found} is in Keras's own pickle format (or scikeras's): {why}.\n"
        + conversion_advice(whole())
    )


def _whole_file(file: IO[bytes], start: int | None) -> Callable[[], bytes | None]:
    """Reads ``file`` from ``start`` again, when asked (an error's advice): ``None`` where it cannot or the file
    is larger than :data:`WHOLE_LIMIT`."""

    def whole() -> bytes | None:
        if start is None:
            return None
        try:
            file.seek(start)
            data = file.read(WHOLE_LIMIT + 1)
        except (AttributeError, OSError, ValueError):
            return None
        return data if isinstance(data, bytes) and len(data) <= WHOLE_LIMIT else None

    return whole
