"""The opcodes of one pickle and their arguments, read from a stream with bounded memory."""

from __future__ import annotations

import io
import itertools
import pickletools
from collections.abc import Iterator
from typing import Any

from .. import limits
from ..errors import ResourceLimitError
from .opening import CHUNK, Input
from .values import Blob

SMALL_DATA = 64
"""Data of bytes opcodes up to this length is held even when not verifying, so
that reports can show short constants."""

# Length-prefixed arguments: opcode name -> (width of the length field, signed, what the data is).
_PREFIXED = {
    "SHORT_BINBYTES": (1, False, "bytes"),
    "BINBYTES": (4, False, "bytes"),
    "BINBYTES8": (8, False, "bytes"),
    "BYTEARRAY8": (8, False, "bytes"),
    "SHORT_BINSTRING": (1, False, "latin-1"),
    "BINSTRING": (4, True, "latin-1"),
    "SHORT_BINUNICODE": (1, False, "utf-8"),
    "BINUNICODE": (4, False, "utf-8"),
    "BINUNICODE8": (8, False, "utf-8"),
}


class PickleReader:
    """The opcodes of one pickle and their arguments, read from a stream with bounded memory.

    Reads what :func:`pickletools.genops` reads and decodes arguments the same
    way, but: no read is longer than CHUNK, so a length the stream announces
    is never allocated before its bytes have arrived; the data of a bytes
    opcode longer than SMALL_DATA is skipped and stands as a :class:`Blob`
    unless ``hold_data``; every argument held counts, and holding more than
    :data:`keras_pickle.limits.MAX_HELD_BYTES` beyond the bytes read from the input raises
    ResourceLimitError (bytes data held for ``hold_data`` is dropped to a
    Blob instead); more than :data:`keras_pickle.limits.MAX_OPCODES` opcodes raise it too.

    pickletools' argument readers read through this object (``read``, ``readline``).
    """

    def __init__(self, pickle_input: Input, *, hold_data: bool):
        self._input, self._stream, self._hold_data = pickle_input, pickle_input.stream, hold_data
        self.position = 0
        self.held = 0

    def ops(self) -> Iterator[tuple[pickletools.OpcodeInfo, Any]]:
        """(opcode, argument) pairs up to and including STOP; ValueError where the stream is not a pickle."""
        for count in itertools.count(1):
            if count > limits.MAX_OPCODES:
                raise ResourceLimitError(
                    f"Refusing to inspect: {self._input.source} has more than {limits.MAX_OPCODES:,} pickle opcodes "
                    "(keras_pickle.limits.MAX_OPCODES).",
                    limit_name="MAX_OPCODES",
                    limit=limits.MAX_OPCODES,
                    value=count,
                )
            code = self._stream.read(1)
            if not code:
                raise ValueError("pickle exhausted before seeing STOP")
            opcode = pickletools.code2op.get(code.decode("latin-1"))
            if opcode is None:
                raise ValueError(f"at position {self.position}, opcode {code!r} unknown")
            self.position += 1
            if opcode.name in _PREFIXED:
                arg = self._prefixed(*_PREFIXED[opcode.name])
            else:
                arg = None if opcode.arg is None else opcode.arg.reader(self)
            yield opcode, arg
            if opcode.name == "STOP":
                return

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes, held (fewer at the end of the stream)."""
        if n <= 8:
            data = self._stream.read(n)
            self.position += len(data)
            self._hold(len(data))
            return data
        return self._data(n, skippable=False)

    def joblib_array(self, nbytes: int, padded: bool) -> bytes | Blob:
        """The raw bytes ``joblib.dump`` writes after an array's wrapper: a padding length byte and that
        much padding (``padded``), then ``nbytes`` of data, held as :meth:`read` would hold bytes data."""
        if padded:
            length = self._stream.read(1)
            if len(length) != 1:
                raise ValueError("the stream ends before a joblib array")
            self.position += 1
            self._data(length[0], skippable=True)
        data = self._data(nbytes, skippable=True)
        if isinstance(data, bytes) and len(data) != nbytes:
            raise ValueError(f"expected {nbytes} bytes of a joblib array, but only {len(data)} remain")
        return data

    def readline(self) -> bytes:
        """The rest of the line, its newline included if there is one, held."""
        pieces = []
        while True:
            piece = self._stream.readline(CHUNK)
            self.position += len(piece)
            self._hold(len(piece))
            pieces.append(piece)
            if len(piece) < CHUNK or piece.endswith(b"\n"):
                return b"".join(pieces)

    def _prefixed(self, width: int, signed: bool, kind: str) -> Any:
        field = self.read(width)
        if len(field) != width:
            raise ValueError("the stream ends inside a length field")
        length = int.from_bytes(field, "little", signed=signed)
        if length < 0:
            raise ValueError(f"negative length {length}")
        data = self._data(length, skippable=kind == "bytes")
        if isinstance(data, bytes) and len(data) != length:
            raise ValueError(f"expected {length} bytes, but only {len(data)} remain")
        if kind == "latin-1":
            return data.decode("latin-1")
        if kind == "utf-8":
            return str(data, "utf-8", "surrogatepass")
        return data

    def _data(self, n: int, *, skippable: bool) -> bytes | Blob:
        """Up to ``n`` bytes, held; a Blob when ``skippable`` and they are not to be held (ValueError if cut short)."""
        hold = not skippable or self._hold_data or n <= SMALL_DATA
        held = io.BytesIO()  # grows in place, and getvalue() does not copy it
        got = 0
        while got < n:
            chunk = self._stream.read(min(n - got, CHUNK))
            if not chunk:
                break
            got += len(chunk)
            self.position += len(chunk)
            if hold and skippable and self._over_budget(len(chunk)):
                hold = False  # verification will say the data was too large to hold
                self.held -= held.tell()
                held = io.BytesIO()
            elif hold:
                self._hold(len(chunk))
                held.write(chunk)
        if not hold:
            if got < n:
                raise ValueError(f"expected {n} bytes, but only {got} remain")
            return Blob(n)
        return held.getvalue()

    def _over_budget(self, n: int) -> bool:
        return self.held + n > limits.MAX_HELD_BYTES + self._input.raw.count

    def _hold(self, n: int) -> None:
        if self._over_budget(n):
            raise ResourceLimitError(
                f"Refusing to inspect: {self._input.source} holds more than "
                f"{limits.human_bytes(limits.MAX_HELD_BYTES)} of strings and numbers beyond its own size "
                "(keras_pickle.limits.MAX_HELD_BYTES).",
                limit_name="MAX_HELD_BYTES",
                limit=limits.MAX_HELD_BYTES,
                value=self.held + n,
            )
        self.held += n


def malformed_words(error: Exception) -> str:
    """How a report says what a stream is that pickletools could not read (``error``): truncated where the
    data ended inside the pickle (a short read, no STOP), else not well-formed."""
    if "not enough data in stream" in str(error) or str(error) == "the pickle has no STOP opcode":
        return "is truncated: it ends before its pickle's end marker, so it is not a well-formed pickle"
    return "is not a well-formed pickle"
