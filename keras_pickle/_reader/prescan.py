"""Checks on a pickle stream before any unpickler reads it: lengths, memo indices.

CPython's unpickler allocates what a length field announces before it reads
the data, and grows its memo to the largest index stored: a few hostile bytes
cost gigabytes. :func:`check_lengths` walks the opcodes (skipping, never
reading, their data) and refuses such claims first. :func:`describe_bytes`
names data in errors, by its format where
:func:`keras_pickle._diagnosis.formats.foreign_format` knows it.
"""

from __future__ import annotations

import io
import pickletools
import struct
from collections.abc import Callable
from typing import IO

from .._diagnosis.formats import foreign_format
from ..errors import NotAPayloadError

# How each opcode's argument is laid out (pickletools' ArgumentDescriptor.n):
# a fixed size, up to a newline, or a length prefix of 1, 4 or 8 bytes.
_ARGUMENT_SIZES = {op.code.encode("latin-1")[0]: (op.arg.n if op.arg else 0, op.name) for op in pickletools.opcodes}
_LENGTH_PREFIXES = {
    pickletools.TAKEN_FROM_ARGUMENT1: (1, False),
    pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
    pickletools.TAKEN_FROM_ARGUMENT4U: (4, False),
    pickletools.TAKEN_FROM_ARGUMENT8U: (8, False),
}
_STOP = ord(".")


def check_lengths(file: IO[bytes], describe: Callable[[], str]) -> None:
    """Refuse a pickle whose length fields claim more data than the file holds.

    CPython's unpickler allocates the object a ``BINBYTES`` / ``BINBYTES8`` /
    ``BYTEARRAY8`` opcode announces *before* reading its data, so ten bytes
    claiming a 16 GiB string make it allocate 16 GiB. This walks the opcodes
    (skipping, never keeping, their data) up to the pickle's ``STOP`` and checks
    that every length is there. Anything else malformed is left to the unpickler
    to report. Files that cannot seek are not checked.

    Time and memory are bounded by the pickle, never by what follows it: the
    file's length is read only where that is free (a ``BytesIO`` or a plain file);
    on any other file object (``gzip.open``, ``bz2.open``, ``lzma.open``, where
    finding the end means decompressing everything) each length is checked by
    skipping to its last byte and reading it.
    """
    try:
        start = file.tell()
        end = _free_end(file)
        file.seek(start)
    except (AttributeError, OSError, ValueError):
        return
    try:
        _walk_lengths(file, start, end, describe)
    except (OSError, ValueError, TypeError, IndexError):
        pass  # an odd file object: the unpickler reports its errors
    finally:
        file.seek(start)


_PLAIN_FILES = (io.BytesIO, io.FileIO, io.BufferedReader, io.BufferedRandom)
"""File objects whose length is known without reading them (what ``seek(0, SEEK_END)`` costs nothing on)."""


def _free_end(file: IO[bytes]) -> int | None:
    """The file's length where finding it costs nothing, else ``None``."""
    if isinstance(file, _PLAIN_FILES):
        return file.seek(0, io.SEEK_END)
    file.seek(file.tell())  # a file that cannot seek fails here, as it would below
    return None


def _walk_lengths(file: IO[bytes], start: int, end: int | None, describe: Callable[[], str]) -> None:
    read, seek = file.read, file.seek
    position = start
    while end is None or position < end:
        code = read(1)
        if not code:
            return
        position += 1
        if code[0] == _STOP:
            return
        layout = _ARGUMENT_SIZES.get(code[0])
        if layout is None:
            return  # not an opcode: the unpickler says what is wrong
        size, name = layout
        if size == pickletools.UP_TO_NEWLINE:
            lines = 2 if name in ("GLOBAL", "INST") else 1
            for _ in range(lines):
                line = file.readline(_MAX_LINE)
                position += len(line)
            if name == "PUT":
                index = _c_integer(line)
                if index is not None:
                    _check_memo_index(name, index, position - len(line) - 1 - start, position - start, describe)
            if not line.endswith(b"\n"):
                return  # the data ends here (or the line is absurd): the unpickler's next read fails
            continue
        if name == "LONG_BINPUT":
            prefix = read(4)
            if len(prefix) < 4:
                return
            position += 4
            index = int.from_bytes(prefix, "little")
            _check_memo_index(name, index, position - 5 - start, position - start, describe)
            continue
        if size in _LENGTH_PREFIXES or name == "FRAME":
            width, signed = _LENGTH_PREFIXES.get(size, (8, False))
            prefix = read(width)
            if len(prefix) < width:
                return
            position += width
            length = int.from_bytes(prefix, "little", signed=signed)
            if length < 0:
                return  # BINSTRING's negative count: the unpickler refuses it
            available = (end - position) if end is not None else _available(file, position, length)
            if length > available:
                raise NotAPayloadError(
                    f"Not a keras_pickle payload: {describe()} is truncated or corrupt: its {name} opcode "
                    f"at byte {position - width - 1 - start} announces {length:,} bytes, but only "
                    f"{available:,} follow.",
                    found=describe(),
                )
            if name == "FRAME":
                if end is None:
                    seek(position)  # _available skipped over the frame: its content is opcodes to walk
                continue
            position = seek(position + length)
            continue
        position = seek(size, io.SEEK_CUR)


_MAX_LINE = 1 << 20
"""The longest text argument read while walking (a GLOBAL's module or name, an INT): far beyond any real one."""


def _available(file: IO[bytes], position: int, length: int) -> int:
    """How many of ``length`` bytes from ``position`` the file holds, found by skipping to the last one and
    reading it (a decompressing file decompresses up to there, never further); the file is left past them."""
    if length == 0:
        return 0
    file.seek(position + length - 1)
    if len(file.read(1)) == 1:
        return length
    return max(file.tell() - position, 0)


def _c_integer(line: bytes) -> int | None:
    """The integer CPython's C unpickler reads from a text argument, or None if it reads none.

    It parses the line as a C string, so it stops at the first NUL byte:
    ``b"1\\0garbage\\n"`` is 1 to it, though ``int()`` refuses it. (Found by atheris:
    the pre-scan stopped at such a PUT, and a LONG_BINPUT bomb after it went unseen.)
    """
    try:
        return int(line.split(b"\0", 1)[0])
    except ValueError:
        return None


def _check_memo_index(name: str, index: int, at: int, read_so_far: int, describe: Callable[[], str]) -> None:
    """CPython's unpickler grows its memo to twice the largest index stored, and
    zeroes it: ``LONG_BINPUT 539780469`` alone costs 8 GiB. A pickler numbers
    memo entries from 0, one per PUT, so no honest index exceeds the bytes read."""
    if index > read_so_far:
        raise NotAPayloadError(
            f"Not a keras_pickle payload: {describe()} is corrupt: its {name} opcode at byte {at} stores "
            f"memo entry {index:,}, more than the {read_so_far:,} bytes before it could have numbered "
            "(unpickling it would allocate memory for every entry below).",
            found=describe(),
        )


def peek(file: IO[bytes], size: int = 4096) -> bytes:
    """The first bytes ``file`` will yield, without consuming them (if seekable)."""
    try:
        position = file.tell()
        head = file.read(size)
        file.seek(position)
    except (AttributeError, OSError, ValueError):
        return b""
    return head if isinstance(head, bytes) else b""


def describe_bytes(view: memoryview) -> str:
    return foreign_format(bytes(view[:_HEAD])) or f"{view.nbytes} bytes starting with {bytes(view[:8])!r}"


_HEAD = 1 << 16
"""How much of the data :func:`foreign_format` reads."""


def ended_early(file: IO[bytes], start: int | None, error: BaseException) -> str | None:
    """What the data was, where unpickling ``file`` from ``start`` failed with ``error`` because the data
    ended inside the pickle: ``"is empty"`` (nothing at all), ``"is truncated: ..."`` (what was there); else
    ``None`` (more follows, or the error is another one). ``start``: where the pickle began, if known."""
    short_read = isinstance(error, (EOFError, struct.error, IndexError)) or "truncated" in str(error)
    try:
        exhausted = file.read(1) == b""
        end = file.tell() if start is not None else None
    except (AttributeError, OSError, ValueError):
        return None
    if not (short_read and exhausted):
        return None
    if start is not None and end == start:
        return "is empty" if start == 0 else f"has nothing left to read after byte {start:,}"
    read = f" after {end - start:,} byte{'s' * (end - start != 1)}" if start is not None else ""
    return f"is truncated: it ends{read}, before its pickle's end marker (a copy or download cut short?)"
