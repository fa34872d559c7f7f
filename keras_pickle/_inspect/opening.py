"""Opening what is to be inspected: bytes, a path or a file object, decompressed as it is read.

joblib writes zlib, gzip, bz2, xz and lzma streams; they are decompressed
incrementally, never whole, and at most :data:`keras_pickle.limits.limits.MAX_DECOMPRESSED_BYTES`.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import io
import lzma
import os
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from .. import limits
from ..errors import NotAPayloadError, ResourceLimitError

CHUNK = 1 << 20
"""Reads from the input are at most this long, so that no length a stream
announces is allocated before its bytes have arrived."""


@dataclasses.dataclass
class Input:
    """The pickle to inspect: ``stream`` (decompressed if the input was compressed) and where it came from."""

    stream: io.BufferedReader
    source: str
    raw: _Counted  # the input itself, before decompression
    compression: str | None = None


@contextlib.contextmanager
def opened(data: Any) -> Iterator[Input]:
    """``data`` (bytes, a path or a binary file object) as an :class:`Input`; a path is closed on exit.

    Raises TypeError for anything else (a text file object at its first read)
    and OSError when a path cannot be opened, before any inspection starts.
    """
    close = None
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        file: Any = io.BytesIO(data if isinstance(data, bytes) else view)
        source = f"{view.nbytes} bytes"
    elif isinstance(data, (str, os.PathLike)):
        file = close = open(data, "rb", buffering=0)
        source = f"the file {os.fspath(data)!r}"
    elif hasattr(data, "read"):
        file, source = data, f"the file {getattr(data, 'name', data)!r}"
    else:
        raise TypeError(f"inspect() takes bytes, a path or a binary file object, not {type(data).__name__}")
    try:
        raw = _Counted(file.read)
        pickle_input = Input(io.BufferedReader(raw, CHUNK), source, raw)
        _decompressing(pickle_input)
        yield pickle_input
    finally:
        if close is not None:
            close.close()


class _Counted(io.RawIOBase):
    """A raw stream over a binary file's ``read``; ``count`` is the number of bytes read so far."""

    def __init__(self, read: Callable[[int], bytes]):
        super().__init__()
        self._read, self.count = read, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._read(len(buffer))
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("inspect() needs a binary file object")
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


def _decompressing(pickle_input: Input) -> None:
    """Make ``pickle_input`` read through a decompressor if it starts like one of joblib's compressed files.

    joblib writes zlib, gzip, bz2, xz and lzma streams.
    """
    head = pickle_input.stream.peek(6)[:6]
    if head.startswith(b"\x1f\x8b"):
        kind, decompressor = "gzip", zlib.decompressobj(wbits=31)
    elif head[:1] == b"\x78" and len(head) > 1 and (head[0] * 256 + head[1]) % 31 == 0:
        kind, decompressor = "zlib", zlib.decompressobj()
    elif head.startswith(b"BZh"):
        kind, decompressor = "bz2", bz2.BZ2Decompressor()
    elif head.startswith(b"\xfd7zXZ\x00") or head.startswith(b"\x5d\x00\x00"):
        kind, decompressor = "lzma", lzma.LZMADecompressor()
    else:
        return
    decompressed = _Decompressed(pickle_input.stream, decompressor, f"{pickle_input.source} ({kind}-compressed)")
    pickle_input.stream = io.BufferedReader(decompressed, CHUNK)
    pickle_input.compression = kind


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of ``compressed``, produced as they are read.

    Reading past :data:`keras_pickle.limits.MAX_DECOMPRESSED_BYTES` in all raises
    ResourceLimitError; data that does not decompress, or ends before its end
    marker, raises NotAPayloadError. Data after the end marker is ignored.
    """

    def __init__(self, compressed: io.BufferedReader, decompressor: Any, source: str):
        super().__init__()
        self._compressed, self._decompressor, self._source = compressed, decompressor, source
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out = self._next(len(buffer))
        buffer[: len(out)] = out
        return len(out)

    def _next(self, size: int) -> bytes:
        d = self._decompressor
        while not d.eof:
            if hasattr(d, "needs_input"):  # bz2 and lzma keep their own unconsumed input
                data = self._compressed.read(CHUNK) if d.needs_input else b""
            else:  # zlib hands back what max_length left over
                data = d.unconsumed_tail or self._compressed.read(CHUNK)
            try:
                out = d.decompress(data, size)
            except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as e:
                raise NotAPayloadError(
                    f"Not a keras_pickle payload: {self._source} does not decompress ({type(e).__name__}: {e}).",
                    found=self._source,
                    original_error=e,
                ) from e
            if out:
                self.total += len(out)
                if self.total > limits.MAX_DECOMPRESSED_BYTES:
                    raise ResourceLimitError(
                        f"Refusing to inspect: {self._source} decompresses to more than "
                        f"{limits.human_bytes(limits.MAX_DECOMPRESSED_BYTES)} "
                        "(keras_pickle.limits.MAX_DECOMPRESSED_BYTES).",
                        limit_name="MAX_DECOMPRESSED_BYTES",
                        limit=limits.MAX_DECOMPRESSED_BYTES,
                        value=self.total,
                    )
                return out
            if not data:
                raise NotAPayloadError(
                    f"Not a keras_pickle payload: {self._source} ends before its end marker (truncated?).",
                    found=self._source,
                )
        return b""
