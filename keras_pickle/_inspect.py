"""``keras_pickle.inspect``: describe a payload without unpickling it.

Unpickling runs code: every global a pickle names is imported and every call
it spells is made. The inspector does neither. It reads the stream's opcodes
(decoding them as :func:`pickletools.genops` does) and evaluates them on a
tiny stack machine that knows only constants, tuples, lists, dicts and sets.
A global becomes a :class:`Global` (a module and a name, never looked up), a
call becomes a :class:`Call` (never made), an out-of-band buffer a
:class:`OutOfBand`. The keras_pickle payloads in the stream are the calls of
``keras_pickle._format.restore`` whose header and body are such plain data;
everything reported is read from them.

Nothing is imported, no callable the payload names is resolved, no array is
built: sizes come from each variable entry's shape and dtype.

The inspector follows pickletools, which is stricter than CPython's C
unpickler on malformed text-protocol arguments (the C unpickler reads
``p4\x00`` as memo index 4); such streams are reported as not well-formed.

What hostile input can cost is bounded, not by the size it decompresses to
but by what the inspector keeps. The input is read as a stream, decompressed
as it is read (never whole, at most :data:`MAX_DECOMPRESSED_BYTES`); at most
:data:`MAX_OPCODES` opcodes are evaluated; the opcodes' arguments it holds
(strings, numbers and, for ``verify=True``, the in-band weights) may exceed
the input's own size by at most :data:`MAX_HELD_BYTES`; the data of bytes
opcodes is skipped unless a checksum is to be verified (only its length
matters); a config longer than :data:`MAX_CONFIG_CHARS` is not parsed. Values
the payload provides are shown in reports and warnings with a bounded repr
(:func:`_short`), and hashed or fed to the checksum only when that is cheap.
"""

from __future__ import annotations

import bz2
import contextlib
import copyreg
import dataclasses
import io
import itertools
import json
import lzma
import math
import os
import pickletools
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import numpy as np

from . import _format
from ._api import _SIGNATURES
from .errors import KerasPickleError, NotAPayloadError, ResourceLimitError

RESTORE = ("keras_pickle._format", "restore")
# restore_with_state(header, body, state): a config payload plus the state of
# an allowed metric or optimizer (keras_pickle.install(allow=...)).
RESTORE_WITH_STATE = ("keras_pickle._allow", "restore_with_state")
# Calls the inspector may evaluate itself, because they only build data:
# protocols 0-2 spell ``bytes`` as ``_codecs.encode(text, "latin1")``.
_CODECS_ENCODE = ("_codecs", "encode")

# Resource limits of the inspector (module attributes: raise one if a real
# payload needs it). Each refusal is a ResourceLimitError naming the limit.
MAX_DECOMPRESSED_BYTES = 1 << 34
"""Bytes read from a compressed file (joblib.dump(..., compress=...)) in all: 16 GiB."""
MAX_OPCODES = 1 << 21
"""Opcodes evaluated: 2 Mi (a keras_pickle payload has about 14 per variable; each opcode may keep
a value of up to about 200 bytes alive)."""
MAX_HELD_BYTES = 1 << 28
"""Bytes of opcode arguments held beyond the size of the input itself: 256 MiB.

Reading uncompressed input never reaches it; a compressed file may hold this
much more than its compressed size (a protocol 0-2 payload's weights are
strings, always held; a protocol 3+ payload's weights are held only to verify
a checksum, and past this limit the checksum is reported as not verified)."""
MAX_CONFIG_CHARS = 1 << 24
"""Characters of a config that is parsed as JSON: 16 Mi (ResNet50's has 169 k; parsing may take
about 20 bytes a character). A longer one is reported, not parsed."""

# Reads from the input are at most this long, so that no length a stream
# announces is allocated before its bytes have arrived.
_CHUNK = 1 << 20
# Data of bytes opcodes up to this length is held even when not verifying, so
# that reports can show short constants.
_SMALL_DATA = 64
# Calls listed for reports, of each kind (all calls; calls safe mode refuses).
_LISTED = 64

# Extension float types have no numpy type string (see _format._EXTENSION_DTYPES).
_EXTENSION_ITEMSIZES = {
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "int4": 1,
    "uint4": 1,
}


# --------------------------------------------------------------------------
# Inert values of the stack machine
# --------------------------------------------------------------------------


class Global:
    """A global the stream names (``GLOBAL`` / ``STACK_GLOBAL`` / ``EXT*``), never resolved."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.name)

    def __repr__(self) -> str:
        return f"<global {self.module}.{self.name}>"


class Call:
    """The result of a call the stream spells (``REDUCE``, ``NEWOBJ``, ``INST``...), never made."""

    __slots__ = ("function", "args", "state")

    def __init__(self, function: Any, args: Any):
        self.function, self.args, self.state = function, args, None

    def __repr__(self) -> str:
        return f"<call of {describe_callable(self.function)}>"


class OutOfBand:
    """An out-of-band buffer (protocol 5 ``NEXT_BUFFER``), by its position."""

    __slots__ = ("index", "readonly")

    def __init__(self, index: int):
        self.index, self.readonly = index, False

    def __repr__(self) -> str:
        return f"<out-of-band buffer #{self.index}>"


class Persistent:
    """A persistent id (``PERSID`` / ``BINPERSID``)."""

    __slots__ = ("pid",)

    def __init__(self, pid: Any):
        self.pid = pid

    def __repr__(self) -> str:
        return "<persistent id>"


class Blob:
    """The data of a bytes opcode, skipped instead of held: only its length is known."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return f"<{self.nbytes} bytes, not read>"


class _Key:
    """A tuple used as a dict key or set member, hashed and compared by identity.

    Hashing a tuple hashes its items, and a stream can nest one shared tuple
    in itself n times with memo GETs, which makes a real hash cost 2**n.
    """

    __slots__ = ("value",)

    def __init__(self, value: tuple):
        self.value = value

    def __repr__(self) -> str:
        return _short(self.value)


def describe_callable(function: Any) -> str:
    """``module.name``, ``the result of module.name``...: at most a few calls deep."""
    prefix = ""
    for _ in range(4):
        if not isinstance(function, Call):
            break
        prefix += "the result of "
        function = function.function
    if isinstance(function, Global):
        return f"{prefix}{function.module}.{function.name}"
    if isinstance(function, Call):
        return f"{prefix}a call"
    return f"{prefix}a {type(function).__name__}"


def describe_call(function: Any, args: Any, depth: int = 0) -> str:
    """``module.name(arg, ...)`` with short constant arguments, for reports."""
    if isinstance(function, Call) and depth < 3:
        name = f"({describe_call(function.function, function.args, depth + 1)})"
    else:
        name = describe_callable(function)
    if not isinstance(args, tuple):
        return f"{name}(*{type(args).__name__})"
    return f"{name}({', '.join(_describe_argument(a, depth) for a in args[:4])}{', ...' if len(args) > 4 else ''})"


def _describe_argument(value: Any, depth: int) -> str:
    if isinstance(value, (str, bytes, bytearray, int, float, bool, type(None))):
        return _short(value)
    if isinstance(value, Call) and depth < 3:
        return describe_call(value.function, value.args, depth + 1)
    if isinstance(value, Global):
        return describe_callable(value)
    return f"<{type(value).__name__}>"


class _ShortRepr(_format.BoundedRepr):
    """:class:`_format.BoundedRepr` that also shows the inspector's identity-keyed tuples."""

    def repr__Key(self, x: _Key, level: int) -> str:
        return self.repr1(x.value, level)


_SHORT_REPR = _ShortRepr()


def _short(value: Any) -> str:
    """A repr of a value the payload provides, for reports: about 2 kB at most, built in bounded time."""
    return _SHORT_REPR.repr(value)


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PayloadInfo:
    """What a keras_pickle payload holds, read without running any of it.

    Counts and sizes come from the body (``n_variables``, ``weight_bytes``);
    what the header claims is kept next to them, and ``warnings`` says where
    the two disagree. ``imports`` lists every global the whole pickle stream
    names (keras_pickle's reconstructor aside): loading it imports those
    modules (``safe_mode=False``) or requires them to be imported already
    (safe mode).
    """

    format_version: Any
    keras_version: str | None
    backend: str | None
    model_class: str | None
    kind: str | None
    protocol: int
    n_layers: int | None
    n_params: int
    n_variables: int
    n_optimizer_variables: int
    weight_bytes: int
    out_of_band_buffers: int
    header_n_variables: Any
    header_weight_bytes: Any
    custom_objects: tuple[str, ...]
    imports: tuple[tuple[str, str], ...]
    lambda_layers: tuple[str, ...]
    checksum: str | None
    checksum_status: str
    warnings: tuple[str, ...]
    payloads_in_stream: int = 1

    @property
    def has_lambda(self) -> bool:
        return bool(self.lambda_layers)

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules of :attr:`imports`, each once, in stream order."""
        return tuple(dict.fromkeys(module for module, _name in self.imports))

    def __str__(self) -> str:
        def join(items: Iterable[str]) -> str:
            items = list(items)
            return ", ".join(items) if items else "none"

        layers = "not listed in the config" if self.n_layers is None else str(self.n_layers)
        where = f", {self.out_of_band_buffers} out of band" if self.out_of_band_buffers else ""
        lines = [
            f"keras_pickle payload, format version {self.format_version} (pickle protocol {self.protocol})",
            f"  written by      Keras {self.keras_version}, backend {self.backend}",
            f"  object          {self.model_class} ({self.kind})",
            f"  layers          {layers}",
            f"  parameters      {self.n_params:,}",
            f"  variables       {self.n_variables} ({self.n_optimizer_variables} of them optimizer state)",
            f"  weight bytes    {self.weight_bytes:,} ({format_bytes(self.weight_bytes)}{where})",
            f"  custom objects  {join(self.custom_objects)}",
            f"  imports         {join(f'{m}.{n}' for m, n in self.imports)}",
            f"  Lambda layers   {join(self.lambda_layers)}",
            f"  checksum        {self.checksum_status}" + (f" ({self.checksum})" if self.checksum else ""),
        ]
        if self.payloads_in_stream > 1:
            lines.append(f"  (the first of {self.payloads_in_stream} payloads in this pickle)")
        lines.extend(f"  WARNING: {warning}" for warning in self.warnings)
        return "\n".join(lines)


def format_bytes(n: int) -> str:
    if n >= 10**18:
        return f"about 10^{len(str(n)) - 1} B"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


def inspect(
    data: bytes | bytearray | memoryview | str | os.PathLike | IO[bytes],
    *,
    verify: bool = False,
    buffers: Iterable[Any] | None = None,
) -> PayloadInfo:
    """Describe the (first) keras_pickle payload in ``data`` without loading it.

    ``data`` is what ``keras_pickle.dumps`` / ``pickle.dumps`` returned, a path
    of a file written by ``dump`` / ``pickle.dump`` / ``joblib.dump`` (also
    compressed), or a binary file object. No module the payload names is
    imported and none of its code runs.

    ``verify=True`` recomputes the checksum, if the payload has one; the
    out-of-band buffers of a protocol-5 payload are needed for that
    (``buffers``), and the in-band weights are held in memory meanwhile (those
    of a compressed file only up to :data:`MAX_HELD_BYTES` beyond its own
    size: past that, the checksum status says it was not verified). Raises
    :class:`~keras_pickle.NotAPayloadError` when the data holds no
    keras_pickle payload or is not a readable pickle, and
    :class:`~keras_pickle.ResourceLimitError` when reading it would exceed one
    of the inspector's limits (the ``MAX_*`` attributes of this module).
    """
    infos = inspect_all(data, verify=verify, buffers=buffers)
    return dataclasses.replace(infos[0], payloads_in_stream=len(infos))


def inspect_all(
    data: bytes | bytearray | memoryview | str | os.PathLike | IO[bytes],
    *,
    verify: bool = False,
    buffers: Iterable[Any] | None = None,
) -> list[PayloadInfo]:
    """Like :func:`inspect`, one :class:`PayloadInfo` per payload in the stream.

    The input is read once, as a stream; a file object is read from its
    current position and left open. Memory stays bounded whatever the input
    (see the module's docstring); a limit that is reached raises
    :class:`~keras_pickle.ResourceLimitError`.
    """
    with _opened(data) as pickle_input:
        source = pickle_input.source
        try:
            head = pickle_input.stream.peek(8)[:8]
            for signature, description in _SIGNATURES:
                if head.startswith(signature):
                    raise NotAPayloadError(f"Not a keras_pickle payload: {source} is {description}.", found=description)
            stream = _evaluate(pickle_input, hold_data=verify)
            if not stream.payloads:
                raise NotAPayloadError(_no_payload_message(stream, head, pickle_input), found=source)
            buffer_list = list(buffers) if buffers is not None else None
            return [_describe(stream, call, verify=verify, buffers=buffer_list) for call in stream.payloads]
        except KerasPickleError:
            raise
        except Exception as e:  # malformed input must never escape as anything else
            raise NotAPayloadError(
                f"Not a keras_pickle payload: {source} could not be read "
                f"({type(e).__name__}: {_format._shorten(str(e), 300)}).",
                found=source,
                original_error=e,
            ) from e


@dataclasses.dataclass
class _Input:
    """The pickle to inspect: ``stream`` (decompressed if the input was compressed) and where it came from."""

    stream: io.BufferedReader
    source: str
    raw: _Counted  # the input itself, before decompression
    compression: str | None = None


@contextlib.contextmanager
def _opened(data: Any) -> Iterator[_Input]:
    """``data`` (bytes, a path or a binary file object) as an :class:`_Input`; a path is closed on exit.

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
        pickle_input = _Input(io.BufferedReader(raw, _CHUNK), source, raw)
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


def _decompressing(pickle_input: _Input) -> None:
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
    pickle_input.stream = io.BufferedReader(decompressed, _CHUNK)
    pickle_input.compression = kind


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of ``compressed``, produced as they are read.

    Reading past :data:`MAX_DECOMPRESSED_BYTES` in all raises
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
                data = self._compressed.read(_CHUNK) if d.needs_input else b""
            else:  # zlib hands back what max_length left over
                data = d.unconsumed_tail or self._compressed.read(_CHUNK)
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
                if self.total > MAX_DECOMPRESSED_BYTES:
                    raise ResourceLimitError(
                        f"Refusing to inspect: {self._source} decompresses to more than "
                        f"{_format._human_bytes(MAX_DECOMPRESSED_BYTES)} "
                        "(keras_pickle._inspect.MAX_DECOMPRESSED_BYTES).",
                        limit_name="MAX_DECOMPRESSED_BYTES",
                        limit=MAX_DECOMPRESSED_BYTES,
                        value=self.total,
                    )
                return out
            if not data:
                raise NotAPayloadError(
                    f"Not a keras_pickle payload: {self._source} ends before its end marker (truncated?).",
                    found=self._source,
                )
        return b""


def _some(items: Iterable[str], limit: int = 8, more: bool = False) -> str:
    """At most ``limit`` of the distinct ``items``; ``more``: items were left out before they got here."""
    distinct = list(dict.fromkeys(items))
    shown = ", ".join(distinct[:limit])
    if more:
        return f"{shown} and more than {max(len(distinct) - limit, 0)} others"
    return shown + (f" and {len(distinct) - limit} more" if len(distinct) > limit else "")


def _no_payload_message(stream: _Stream, head: bytes, pickle_input: _Input) -> str:
    source = pickle_input.source
    if pickle_input.compression:
        source += f", once {pickle_input.compression}-decompressed,"
    if not stream.parsed:
        start = f"starts with {head!r}" if head else "is empty"
        return f"Not a keras_pickle payload: {source} {start}: not a pickle."
    parts = [f"Not a keras_pickle payload: {source} is a pickle that never calls keras_pickle._format.restore."]
    if stream.globals:
        parts.append("It names " + _some(f"{m}.{n}" for m, n in stream.globals) + ".")
    if stream.calls:
        parts.append("It calls " + _some(stream.calls, more=stream.more_calls) + ".")
    if any(module.startswith("keras") and "_unpickle_model" in name for module, name in stream.globals):
        parts.append("It looks like Keras's own pickle format.")
    return " ".join(parts)


# --------------------------------------------------------------------------
# The stack machine
# --------------------------------------------------------------------------


@dataclasses.dataclass
class _Stream:
    protocol: int = 0
    parsed: bool = False
    globals: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # Descriptions of the calls the stream spells, each once: the first _LISTED
    # of them, and the first _LISTED that safe mode refuses; ``more_*`` when
    # further ones were left out.
    calls: dict[str, None] = dataclasses.field(default_factory=dict)
    unexpected_calls: dict[str, None] = dataclasses.field(default_factory=dict)
    more_calls: bool = False
    more_unexpected: bool = False
    payloads: list[Call] = dataclasses.field(default_factory=list)
    out_of_band: int = 0
    persistent_ids: int = 0

    def record_call(self, name: str, describe: Callable[[], str] | None = None) -> None:
        """List a call for the reports; ``name`` is its callable's, ``describe()`` the whole call's description.

        Only calls that get listed are described, so listing costs nothing
        once the lists are full. Without ``describe``, ``name`` describes the call.
        """
        describe = describe or (lambda: name)
        description = None
        if len(self.calls) < _LISTED:
            description = describe()
            self.calls.setdefault(description)
        else:
            self.more_calls = True
        if not _expected_call(name):
            if len(self.unexpected_calls) < _LISTED:
                self.unexpected_calls.setdefault(description or describe())
            else:
                self.more_unexpected = True


class _Malformed(ValueError):
    pass


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


class _PickleReader:
    """The opcodes of one pickle and their arguments, read from a stream with bounded memory.

    Reads what :func:`pickletools.genops` reads and decodes arguments the same
    way, but: no read is longer than _CHUNK, so a length the stream announces
    is never allocated before its bytes have arrived; the data of a bytes
    opcode longer than _SMALL_DATA is skipped and stands as a :class:`Blob`
    unless ``hold_data``; every argument held counts, and holding more than
    :data:`MAX_HELD_BYTES` beyond the bytes read from the input raises
    ResourceLimitError (bytes data held for ``hold_data`` is dropped to a
    Blob instead); more than :data:`MAX_OPCODES` opcodes raise it too.

    pickletools' argument readers read through this object (``read``, ``readline``).
    """

    def __init__(self, pickle_input: _Input, *, hold_data: bool):
        self._input, self._stream, self._hold_data = pickle_input, pickle_input.stream, hold_data
        self.position = 0
        self.held = 0

    def ops(self) -> Iterator[tuple[pickletools.OpcodeInfo, Any]]:
        """(opcode, argument) pairs up to and including STOP; ValueError where the stream is not a pickle."""
        for count in itertools.count(1):
            if count > MAX_OPCODES:
                raise ResourceLimitError(
                    f"Refusing to inspect: {self._input.source} has more than {MAX_OPCODES:,} pickle opcodes "
                    "(keras_pickle._inspect.MAX_OPCODES).",
                    limit_name="MAX_OPCODES",
                    limit=MAX_OPCODES,
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

    def readline(self) -> bytes:
        """The rest of the line, its newline included if there is one, held."""
        pieces = []
        while True:
            piece = self._stream.readline(_CHUNK)
            self.position += len(piece)
            self._hold(len(piece))
            pieces.append(piece)
            if len(piece) < _CHUNK or piece.endswith(b"\n"):
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
        hold = not skippable or self._hold_data or n <= _SMALL_DATA
        held = io.BytesIO()  # grows in place, and getvalue() does not copy it
        got = 0
        while got < n:
            chunk = self._stream.read(min(n - got, _CHUNK))
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
        return self.held + n > MAX_HELD_BYTES + self._input.raw.count

    def _hold(self, n: int) -> None:
        if self._over_budget(n):
            raise ResourceLimitError(
                f"Refusing to inspect: {self._input.source} holds more than "
                f"{_format._human_bytes(MAX_HELD_BYTES)} of strings and numbers beyond its own size "
                "(keras_pickle._inspect.MAX_HELD_BYTES).",
                limit_name="MAX_HELD_BYTES",
                limit=MAX_HELD_BYTES,
                value=self.held + n,
            )
        self.held += n


def _evaluate(pickle_input: _Input, *, hold_data: bool) -> _Stream:
    """Run the stream's opcodes on inert values; record globals, calls and payloads.

    ``hold_data``: keep the data of bytes opcodes (to verify checksums).
    """
    source = pickle_input.source
    stream = _Stream()
    stack: list[Any] = []
    metastack: list[list[Any]] = []
    memo: dict[Any, Any] = {}
    seen_globals: set[tuple[str, str]] = set()
    key = _Keys()

    def pop() -> Any:
        if not stack:
            raise _Malformed("stack underflow")
        return stack.pop()

    def pop_mark() -> list[Any]:
        # Callers must not hold a reference to ``stack`` across this call
        # (``stack.append(pop_mark())`` would append to the popped list).
        nonlocal stack
        if not metastack:
            raise _Malformed("MARK missing")
        items = stack
        stack = metastack.pop()
        return items

    def top() -> Any:
        if not stack:
            raise _Malformed("stack underflow")
        return stack[-1]

    def add_global(module: Any, name: Any) -> Global:
        if not (isinstance(module, str) and isinstance(name, str)):
            raise _Malformed("a global's module and name must be strings")
        key = (module, name)
        if key not in seen_globals and key not in (RESTORE, _CODECS_ENCODE):
            seen_globals.add(key)
            stream.globals.append(key)
        return Global(module, name)

    def call(function: Any, args: Any) -> Any:
        if isinstance(function, Global) and function.key == _CODECS_ENCODE:
            if isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], str):
                if args[1] in ("latin1", "latin-1"):
                    return args[0].encode("latin-1")
        result = Call(function, args)
        key = function.key if isinstance(function, Global) else None
        if key == RESTORE and isinstance(args, tuple) and len(args) == 2:
            stream.payloads.append(result)
            return result
        if key == RESTORE_WITH_STATE and isinstance(args, tuple) and len(args) == 3:
            stream.payloads.append(result)
        stream.record_call(describe_callable(function), lambda: describe_call(function, args))
        return result

    highest = 0
    try:
        for opcode, arg in _PickleReader(pickle_input, hold_data=hold_data).ops():
            name = opcode.name
            stream.parsed = True
            highest = max(highest, opcode.proto)
            if name == "PROTO":
                stream.protocol = int(arg)
            elif name == "FRAME":
                pass
            elif name == "STOP":
                break
            elif name == "MARK":
                metastack.append(stack)
                stack = []
            elif name in ("POP",):
                if stack:
                    stack.pop()
                else:
                    pop_mark()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(top())
            # constants
            elif name == "NONE":
                stack.append(None)
            elif name == "NEWTRUE":
                stack.append(True)
            elif name == "NEWFALSE":
                stack.append(False)
            elif name in (
                "INT",
                "BININT",
                "BININT1",
                "BININT2",
                "LONG",
                "LONG1",
                "LONG4",
                "FLOAT",
                "BINFLOAT",
                "STRING",
                "BINSTRING",
                "SHORT_BINSTRING",
                "UNICODE",
                "SHORT_BINUNICODE",
                "BINUNICODE",
                "BINUNICODE8",
                "BINBYTES",
                "SHORT_BINBYTES",
                "BINBYTES8",
            ):
                stack.append(arg)
            elif name == "BYTEARRAY8":
                stack.append(bytearray(arg) if isinstance(arg, bytes) else arg)
            elif name == "NEXT_BUFFER":
                stack.append(OutOfBand(stream.out_of_band))
                stream.out_of_band += 1
            elif name == "READONLY_BUFFER":
                value = top()
                if isinstance(value, OutOfBand):
                    value.readonly = True
                elif isinstance(value, bytearray):
                    stack[-1] = bytes(value)
            # containers
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_SET":
                stack.append(set())
            elif name == "LIST":
                items = pop_mark()
                stack.append(items)
            elif name == "TUPLE":
                items = pop_mark()
                stack.append(tuple(items))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) < n:
                    raise _Malformed("stack underflow")
                items = tuple(stack[-n:])
                del stack[-n:]
                stack.append(items)
            elif name == "FROZENSET":
                items = pop_mark()
                stack.append(frozenset(key(x) for x in items))
            elif name == "DICT":
                items = pop_mark()
                if len(items) % 2:
                    raise _Malformed("odd number of items for DICT")
                stack.append({key(items[i]): items[i + 1] for i in range(0, len(items), 2)})
            elif name == "APPEND":
                value = pop()
                _extend(top(), [value])
            elif name == "APPENDS":
                items = pop_mark()
                _extend(top(), items)
            elif name == "SETITEM":
                value = pop()
                dict_key = pop()
                _set_items(top(), [dict_key, value], key)
            elif name == "SETITEMS":
                items = pop_mark()
                if len(items) % 2:
                    raise _Malformed("odd number of items for SETITEMS")
                _set_items(top(), items, key)
            elif name == "ADDITEMS":
                items = pop_mark()
                target = top()
                if isinstance(target, set):
                    target.update(key(x) for x in items)
            # memo
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = top()
            elif name == "MEMOIZE":
                memo[len(memo)] = top()
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise _Malformed(f"memo key {_short(arg)} missing")
                stack.append(memo[arg])
            # globals and calls: recorded, never resolved or made
            elif name in ("GLOBAL", "INST"):
                module, _, global_name = str(arg).partition(" ")
                function = add_global(module, global_name)
                if name == "GLOBAL":
                    stack.append(function)
                else:
                    items = pop_mark()
                    stack.append(call(function, tuple(items)))
            elif name == "STACK_GLOBAL":
                global_name = pop()
                module = pop()
                stack.append(add_global(module, global_name))
            elif name in ("EXT1", "EXT2", "EXT4"):
                # The names this process's copyreg registers; nothing is imported.
                key = copyreg._inverted_registry.get(arg)
                module, global_name = key if key else ("<extension code>", str(arg))
                stack.append(add_global(module, global_name))
            elif name == "REDUCE":
                args = pop()
                function = pop()
                stack.append(call(function, args))
            elif name == "NEWOBJ":
                args = pop()
                cls = pop()
                stack.append(call(cls, args))
            elif name == "NEWOBJ_EX":
                kwargs = pop()
                args = pop()
                cls = pop()
                stack.append(call(cls, (args, kwargs)))
            elif name == "OBJ":
                items = pop_mark()
                if not items:
                    raise _Malformed("OBJ without a class")
                stack.append(call(items[0], tuple(items[1:])))
            elif name == "BUILD":
                state = pop()
                target = top()
                description = f"__setstate__ of {describe_callable(target)}"
                stream.record_call(description)
                if isinstance(target, Call):
                    target.state = state
            elif name in ("PERSID", "BINPERSID"):
                pid = arg if name == "PERSID" else pop()
                stream.persistent_ids += 1
                stack.append(Persistent(pid))
            else:  # pragma: no cover - every opcode of protocols 0-5 is handled above
                raise _Malformed(f"unknown opcode {name}")
        else:
            if stream.parsed:
                raise _Malformed("the pickle has no STOP opcode")
    except (_Malformed, ValueError, TypeError, IndexError, KeyError, OverflowError, MemoryError) as e:
        if not stream.parsed:
            return stream
        raise NotAPayloadError(
            f"Not a keras_pickle payload: {source} is not a well-formed pickle ({_format._shorten(str(e), 300)}).",
            found=source,
            original_error=e,
        ) from e
    stream.protocol = stream.protocol or highest
    return stream


class _Keys:
    """Turns the stream's values into dict keys and set members.

    Unhashable values raise TypeError, as they would in the real unpickler.
    Tuples become :class:`_Key` objects (keyed by identity): each tuple's
    items are checked once, so that the check costs no more than building
    the tuples did, however they share each other.
    """

    def __init__(self) -> None:
        self._checked: dict[int, tuple] = {}  # the tuples are kept so that their ids stay theirs

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, tuple):
            hash(value)
            return value
        pending = [value]
        while pending:
            item = pending.pop()
            if id(item) in self._checked:
                continue
            self._checked[id(item)] = item
            for member in item:
                if isinstance(member, tuple):
                    pending.append(member)
                else:
                    hash(member)
        return _Key(value)


def _extend(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif not isinstance(target, Call):
        raise _Malformed(f"APPENDS to a {type(target).__name__}")


def _set_items(target: Any, items: list[Any], key: _Keys) -> None:
    if isinstance(target, dict):
        for i in range(0, len(items), 2):
            target[key(items[i])] = items[i + 1]
    elif not isinstance(target, Call):
        raise _Malformed(f"SETITEMS on a {type(target).__name__}")


# --------------------------------------------------------------------------
# Reading one payload
# --------------------------------------------------------------------------


def _describe(stream: _Stream, payload: Call, *, verify: bool, buffers: list | None) -> PayloadInfo:
    header, body = payload.args[:2]
    warnings: list[str] = []
    if not isinstance(header, dict):
        warnings.append(f"the header is a {type(header).__name__}, not a dict: keras_pickle refuses it")
        header = {}
    elif header.get("format") != _format.FORMAT_NAME:
        warnings.append("the header lacks the keras_pickle marker: keras_pickle refuses it")
    if not isinstance(body, dict):
        warnings.append(f"the body is a {type(body).__name__}, not a dict: keras_pickle refuses it")
        body = {}

    version = header.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > _format.FORMAT_VERSION:
        warnings.append(
            f"format version {_short(version)} is newer than this keras_pickle reads (up to "
            f"{_format.FORMAT_VERSION}): pip install --upgrade keras-pickle"
        )

    config_text = body.get("config")
    config: Any = None
    if isinstance(config_text, str) and len(config_text) > MAX_CONFIG_CHARS:
        warnings.append(
            f"the config is {len(config_text):,} characters long, more than the inspector parses "
            "(keras_pickle._inspect.MAX_CONFIG_CHARS): its layers are not counted"
        )
    elif isinstance(config_text, str):
        try:
            config = json.loads(config_text)
        except (ValueError, RecursionError) as e:
            warnings.append(f"the config is not valid JSON ({type(e).__name__})")
    else:
        warnings.append("the body has no config")

    sections = [
        ("variables", _entries(body.get("variables", ()), "variables", warnings)),
        ("optimizer_variables", _entries(body.get("optimizer_variables", ()), "optimizer_variables", warnings)),
    ]
    states = body.get("layer_states", ())
    state_entries: list = []
    if isinstance(states, list):
        for state in states:
            if isinstance(state, tuple) and len(state) == 3:
                state_entries.extend(_entries(state[1], "layer_states", warnings))
            else:
                warnings.append("a layer_states entry is not an (index, variables, assets) tuple")
    else:
        warnings.append("layer_states is not a list")
    sections.append(("layer_states", state_entries))

    n_variables = sum(len(entries) for _name, entries in sections)
    weight_bytes = sum(e.nbytes for _name, entries in sections for e in entries)
    n_params = sum(e.size for e in sections[0][1] if not e.key.endswith("seed_generator_state"))
    for entry in (e for _name, entries in sections for e in entries):
        if entry.problem:
            warnings.append(entry.problem)

    claimed_n, claimed_bytes = header.get("n_variables"), header.get("weight_bytes")
    if claimed_n != n_variables:
        warnings.append(f"the header claims {_short(claimed_n)} variables, the body holds {n_variables}")
    if claimed_bytes != weight_bytes:
        warnings.append(
            f"the header claims {_short(claimed_bytes)} weight bytes, the body's shapes need {weight_bytes}"
        )

    custom = body.get("custom_objects", {})
    custom_objects: list[str] = []
    if isinstance(custom, dict):
        for value in custom.values():
            if isinstance(value, Global):
                custom_objects.append(f"{value.module}.{value.name}")
            elif isinstance(value, Call):
                custom_objects.append(f"<by value: built by {describe_callable(value.function)}>")
            else:
                custom_objects.append(f"<a {type(value).__name__}>")
    else:
        warnings.append("custom_objects is not a dict")

    if stream.unexpected_calls:
        calls = _some(stream.unexpected_calls, more=stream.more_unexpected)
        warnings.append(f"the pickle calls {calls}: keras_pickle.loads (safe mode) refuses it")
    refused = [f"{m}.{n}" for m, n in stream.globals if _safe_mode_refuses(m, n)]
    if refused:
        warnings.append("the pickle names " + _some(refused) + ", which safe mode refuses")
    if stream.persistent_ids:
        warnings.append("the pickle uses persistent ids, which keras_pickle payloads never do")

    checksum = header.get("checksum")
    status = _checksum_status(checksum, header, body, sections, verify=verify, buffers=buffers)
    if status.startswith("MISMATCH"):
        warnings.append("the content does not match its checksum: it was changed or damaged")

    def text(key: str) -> str | None:
        value = header.get(key)
        return value if isinstance(value, str) else None

    def plain(value: Any) -> Any:
        """Header values as reported: None, 64-bit ints and short strings as they are, anything else as a short repr."""
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and value.bit_length() < 64):
            return value
        if isinstance(value, str) and len(value) <= 200:
            return value
        return _describe_argument(value, 0)

    return PayloadInfo(
        format_version=plain(version),
        keras_version=text("keras_version"),
        backend=text("backend"),
        model_class=text("class"),
        kind=text("kind"),
        protocol=stream.protocol,
        n_layers=count_layers(config),
        n_params=n_params,
        n_variables=n_variables,
        n_optimizer_variables=len(sections[1][1]),
        weight_bytes=weight_bytes,
        out_of_band_buffers=stream.out_of_band,
        header_n_variables=plain(claimed_n),
        header_weight_bytes=plain(claimed_bytes),
        custom_objects=tuple(dict.fromkeys(custom_objects)),
        imports=tuple(stream.globals),
        lambda_layers=tuple(find_lambdas(config)),
        checksum=checksum if isinstance(checksum, str) else None,
        checksum_status=status,
        warnings=tuple(dict.fromkeys(warnings)),
    )


_EXPECTED_CALL_PREFIXES = (
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer",
    "numpy.dtype",
    "__setstate__ of the result of numpy.",
)


def _expected_call(description: str) -> bool:
    return description.startswith(_EXPECTED_CALL_PREFIXES)


def _safe_mode_refuses(module: str, name: str) -> bool:
    from . import _safe

    if (module, name) in _safe._CALLABLE_GLOBALS:
        return False
    return _safe._is_stdlib(module)


@dataclasses.dataclass
class _Entry:
    key: str
    dtype: str
    shape: tuple
    size: int
    nbytes: int
    data: Any
    problem: str | None = None


def _entries(entries: Any, section: str, warnings: list[str]) -> list[_Entry]:
    if not isinstance(entries, (list, tuple)):
        warnings.append(f"{section} is a {type(entries).__name__}, not a list")
        return []
    result = []
    for entry in entries:
        if not (isinstance(entry, tuple) and len(entry) == 4):
            warnings.append(f"an entry of {section} is not a (path, dtype, shape, data) tuple")
            continue
        key, dtype, shape, data = entry
        problem = None
        if not _plausible_shape(shape):
            problem = f"{section} entry {_short(key)} has an invalid shape {_short(shape)}"
            shape = ()
        elif any(d < 0 for d in shape):
            problem = f"{section} entry {_short(key)} has a negative dimension {_short(shape)}"
        itemsize = _itemsize(dtype)
        if itemsize is None:
            problem = problem or f"{section} entry {_short(key)} has an invalid dtype {_short(dtype)}"
            itemsize = 0
        size = math.prod(shape) if shape else 1
        nbytes = size * itemsize
        if problem is None:
            length = _data_length(data)
            if length is not None and length != nbytes:
                problem = f"{section} entry {_short(key)} holds {length} bytes; its shape and dtype need {nbytes}"
            elif not isinstance(data, (bytes, bytearray, Blob, OutOfBand)):
                problem = f"{section} entry {_short(key)} holds a {type(data).__name__}, not raw bytes"
        name = key if isinstance(key, str) else _short(key)
        dtype_name = dtype if isinstance(dtype, str) else _short(dtype)
        result.append(_Entry(name, dtype_name, shape, size, nbytes, data, problem))
    return result


def _plausible_shape(shape: Any) -> bool:
    """A tuple of at most MAX_ARRAY_RANK ints of at most 64 bits (so that sizes stay cheap to compute)."""
    return (
        isinstance(shape, tuple)
        and len(shape) <= _format.MAX_ARRAY_RANK
        and all(isinstance(d, int) and not isinstance(d, bool) and d.bit_length() <= 64 for d in shape)
    )


def _data_length(data: Any) -> int | None:
    """How many bytes an entry's in-band data holds (None when it is not in-band bytes)."""
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    if isinstance(data, Blob):
        return data.nbytes
    return None


def _itemsize(dtype: Any) -> int | None:
    if not isinstance(dtype, str) or len(dtype) > 64:  # numpy type strings are short
        return None
    if dtype in _EXTENSION_ITEMSIZES:
        return _EXTENSION_ITEMSIZES[dtype]
    try:
        parsed = np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError, OverflowError):
        return None
    if parsed.hasobject or parsed.fields is not None or parsed.subdtype is not None:
        return None
    return parsed.itemsize


def _checksum_status(checksum: Any, header: dict, body: dict, sections, *, verify: bool, buffers: list | None) -> str:
    if checksum is None:
        return "absent"
    if not isinstance(checksum, str):
        return f"invalid ({type(checksum).__name__} in the header)"
    if not verify:
        return "present (not verified)"
    entries = [e for _name, section in sections for e in section]
    if any(isinstance(e.data, OutOfBand) for e in entries):
        if buffers is None:
            return "present (not verified: the out-of-band buffers were not given)"
    if _holds_blobs(body):
        return (
            "present (not verified: its in-band data is larger than the inspector holds, "
            "keras_pickle._inspect.MAX_HELD_BYTES)"
        )
    resolved = _with_buffers(body, buffers)
    if resolved is None or not _checksummable(header, resolved):
        return "present (not verified: the payload is malformed)"
    algorithm = checksum.partition(":")[0]
    names = _custom_object_names(resolved.get("custom_objects", {}))
    if names is None:
        if algorithm == _format.CHECKSUM_ALGORITHM:  # it covers the names, known only once the objects are built
            return "present (not verified: a custom object is pickled by value)"
        names = {}
    try:
        actual = _format.content_checksum(header, resolved, algorithm, names)
    except KerasPickleError:
        return f"present (not verified: unknown algorithm {_short(algorithm)})"
    except Exception:
        return "present (not verified: the payload is malformed)"
    return "verified" if actual == checksum else f"MISMATCH (computed {actual})"


def _custom_object_names(custom: dict) -> dict[str, str] | None:
    """The qualified name each custom object's key resolves to, as the loader's checksum covers them.

    None when an object is pickled by value: its name is known only once it is built.
    """
    from . import _safe

    names = {}
    for key, value in custom.items():
        if not isinstance(value, Global):
            return None
        names[key] = _format.custom_object_name(_safe.InertReference(None, f"{value.module}.{value.name}"))
    return names


def _checksummable(header: dict, body: dict) -> bool:
    """Whether every value the checksum feeds (as its repr) is plain, so that computing it is cheap.

    Checks what :func:`keras_pickle._format.content_checksum` reads: the
    header's fields, the body's scalars, every entry's key, dtype, shape and data,
    every asset's path and content, and the custom objects' keys. Shared nested values
    make a repr exponential; they are refused here rather than fed.
    """
    if not all(isinstance(key, str) and _plain(value) for key, value in header.items()):
        return False
    if not all(_plain(body.get(key)) for key in ("config", "optimizer_built", "dtype_policy")):
        return False
    custom = body.get("custom_objects", {})
    if not (isinstance(custom, dict) and all(isinstance(key, str) for key in custom)):
        return False
    states = body.get("layer_states", [])
    if not (isinstance(states, list) and all(isinstance(s, tuple) and len(s) == 3 for s in states)):
        return False
    sections = [body.get("variables", []), body.get("optimizer_variables", [])] + [s[1] for s in states]
    for entries in sections:
        if not isinstance(entries, list):
            return False
        for entry in entries:
            if not (isinstance(entry, tuple) and len(entry) == 4 and all(_plain(part) for part in entry)):
                return False
    for index, _own, assets in states:
        if not (_plain(index) and isinstance(assets, list)):
            return False
        if not all(isinstance(a, tuple) and len(a) == 2 and _plain(a[0]) and _plain(a[1]) for a in assets):
            return False
    return True


def _plain(value: Any, depth: int = 1) -> bool:
    """A scalar (an int of at most 64 bits), or a tuple or list of at most 64 of them: its repr is cheap."""
    if value is None or isinstance(value, (bool, float, str, bytes, bytearray, memoryview)):
        return True
    if isinstance(value, int):
        return value.bit_length() <= 64
    if isinstance(value, (tuple, list)) and depth > 0 and len(value) <= 64:
        return all(_plain(item, depth - 1) for item in value)
    return False


def _holds_blobs(body: dict) -> bool:
    """Whether data the checksum covers was skipped rather than held (then it cannot be verified)."""
    return any(isinstance(data, Blob) for data in _checksummed_data(body))


def _checksummed_data(body: dict) -> Iterator[Any]:
    """The data of every well-formed entry and asset of ``body``."""
    states = [s for s in _sequence(body.get("layer_states")) if isinstance(s, tuple) and len(s) == 3]
    sections = [body.get("variables"), body.get("optimizer_variables")] + [state[1] for state in states]
    for entries in sections:
        yield from (e[3] for e in _sequence(entries) if isinstance(e, tuple) and len(e) == 4)
    for state in states:
        yield from (a[1] for a in _sequence(state[2]) if isinstance(a, tuple) and len(a) == 2)


def _sequence(value: Any) -> list | tuple:
    return value if isinstance(value, (list, tuple)) else ()


def _with_buffers(body: dict, buffers: list | None) -> dict | None:
    """The body with every out-of-band placeholder replaced by its buffer."""

    def data(value: Any) -> Any:
        if isinstance(value, OutOfBand):
            if buffers is None or value.index >= len(buffers):
                raise IndexError("missing out-of-band buffer")
            return memoryview(buffers[value.index])
        return value

    def entries(items: Any) -> list:
        return [(k, d, s, data(v)) for k, d, s, v in items]

    try:
        resolved = dict(body)
        for section in ("variables", "optimizer_variables"):
            if section in body:
                resolved[section] = entries(body[section])
        if "layer_states" in body:
            resolved["layer_states"] = [(i, entries(own), assets) for i, own, assets in body["layer_states"]]
        if not isinstance(resolved.get("custom_objects", {}), dict):
            return None
        return resolved
    except (TypeError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------
# Reading the config
# --------------------------------------------------------------------------


def count_layers(config: Any) -> int | None:
    """How many layers the config lists at its top level (``len(model.layers)``).

    ``None`` when the config does not list its layers: a subclassed model
    (whose constructor creates them) or a single layer.
    """
    if not isinstance(config, dict):
        return None
    inner = config.get("config")
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if not isinstance(layers, list):
        return None
    if config.get("class_name") == "Sequential":
        # Sequential.layers leaves out the InputLayer its config records.
        return sum(1 for layer in layers if not (isinstance(layer, dict) and layer.get("class_name") == "InputLayer"))
    return len(layers)


def find_lambdas(config: Any) -> list[str]:
    """Names of the Lambda layers (and inline Python lambdas) anywhere in the config."""
    found = []
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("class_name") == "Lambda" and str(node.get("module", "")).startswith("keras"):
                inner = node.get("config")
                found.append(str(inner.get("name", "?")) if isinstance(inner, dict) else "?")
                continue  # its own function is the __lambda__ inside
            if node.get("class_name") == "__lambda__":
                found.append("<inline Python lambda>")
                continue
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return found
