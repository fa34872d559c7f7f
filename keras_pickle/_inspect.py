"""``keras_pickle.inspect``: describe a payload without unpickling it.

Unpickling runs code: every global a pickle names is imported and every call
it spells is made. The inspector does neither. It walks the stream's opcodes
with :func:`pickletools.genops` and evaluates them on a tiny stack machine that
knows only constants, tuples, lists, dicts and sets. A global becomes a
:class:`Global` (a module and a name, never looked up), a call becomes a
:class:`Call` (never made), an out-of-band buffer a :class:`OutOfBand`. The
keras_pickle payloads in the stream are the calls of
``keras_pickle._format.restore`` whose header and body are such plain data;
everything reported is read from them.

Nothing is imported, no callable the payload names is resolved, no array is
built: sizes come from each variable entry's shape and dtype.

The inspector follows pickletools, which is stricter than CPython's C
unpickler on malformed text-protocol arguments (the C unpickler reads
``p4\x00`` as memo index 4); such streams are reported as not well-formed.
"""

from __future__ import annotations

import bz2
import copyreg
import dataclasses
import io
import json
import lzma
import math
import os
import pickletools
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any

import numpy as np

from . import _format
from ._api import _SIGNATURES, describe_bytes
from .errors import KerasPickleError, NotAPayloadError

RESTORE = ("keras_pickle._format", "restore")
# restore_with_state(header, body, state): a config payload plus the state of
# an allowed metric or optimizer (keras_pickle.install(allow=...)).
RESTORE_WITH_STATE = ("keras_pickle._allow", "restore_with_state")
# Calls the inspector may evaluate itself, because they only build data:
# protocols 0-2 spell ``bytes`` as ``_codecs.encode(text, "latin1")``.
_CODECS_ENCODE = ("_codecs", "encode")

# Compressed files (joblib.dump(..., compress=...)) are decompressed up to
# this many bytes.
MAX_DECOMPRESSED_BYTES = 1 << 34  # 16 GiB

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


class _Mark:
    pass


def describe_callable(function: Any) -> str:
    if isinstance(function, Global):
        return f"{function.module}.{function.name}"
    if isinstance(function, Call):
        return f"the result of {describe_callable(function.function)}"
    return f"a {type(function).__name__}"


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
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, Call) and depth < 3:
        return describe_call(value.function, value.args, depth + 1)
    if isinstance(value, Global):
        return describe_callable(value)
    return f"<{type(value).__name__}>"


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
    (``buffers``). Raises :class:`~keras_pickle.NotAPayloadError` when the data
    holds no keras_pickle payload or is not a readable pickle.
    """
    infos = inspect_all(data, verify=verify, buffers=buffers)
    return dataclasses.replace(infos[0], payloads_in_stream=len(infos))


def inspect_all(
    data: bytes | bytearray | memoryview | str | os.PathLike | IO[bytes],
    *,
    verify: bool = False,
    buffers: Iterable[Any] | None = None,
) -> list[PayloadInfo]:
    """Like :func:`inspect`, one :class:`PayloadInfo` per payload in the stream."""
    raw, source = _read(data)
    try:
        raw = _decompress(raw)
        for signature, description in _SIGNATURES:
            if raw.startswith(signature):
                raise NotAPayloadError(f"Not a keras_pickle payload: {source} is {description}.", found=description)
        stream = _evaluate(raw, source)
        if not stream.payloads:
            raise NotAPayloadError(_no_payload_message(stream, raw, source), found=source)
        buffer_list = list(buffers) if buffers is not None else None
        return [_describe(stream, call, verify=verify, buffers=buffer_list) for call in stream.payloads]
    except KerasPickleError:
        raise
    except Exception as e:  # malformed input must never escape as anything else
        raise NotAPayloadError(
            f"Not a keras_pickle payload: {source} could not be read ({type(e).__name__}: {e}).",
            found=source,
            original_error=e,
        ) from e


def _read(data: Any) -> tuple[bytes, str]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        return view.tobytes(), f"{view.nbytes} bytes"
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as f:
            return f.read(), f"the file {os.fspath(data)!r}"
    if hasattr(data, "read"):
        content = data.read()
        if not isinstance(content, (bytes, bytearray)):
            raise TypeError("inspect() needs a binary file object")
        return bytes(content), f"the file {getattr(data, 'name', data)!r}"
    raise TypeError(f"inspect() takes bytes, a path or a binary file object, not {type(data).__name__}")


def _decompress(raw: bytes) -> bytes:
    """joblib's compressed files: zlib, gzip, bz2, xz and lzma streams."""
    if raw.startswith(b"\x1f\x8b"):
        decompressor: Any = zlib.decompressobj(wbits=31)
    elif raw[:1] == b"\x78" and len(raw) > 1 and (raw[0] * 256 + raw[1]) % 31 == 0:
        decompressor = zlib.decompressobj()
    elif raw.startswith(b"BZh"):
        decompressor = bz2.BZ2Decompressor()
    elif raw.startswith(b"\xfd7zXZ\x00") or raw.startswith(b"\x5d\x00\x00"):
        decompressor = lzma.LZMADecompressor()
    else:
        return raw
    try:
        out = decompressor.decompress(raw, MAX_DECOMPRESSED_BYTES + 1)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
        return raw  # not compressed after all: let the pickle reader say what it is
    if len(out) > MAX_DECOMPRESSED_BYTES:
        raise _format.ResourceLimitError(
            f"Refusing to inspect: the data decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes "
            "(keras_pickle._inspect.MAX_DECOMPRESSED_BYTES).",
            limit_name="MAX_DECOMPRESSED_BYTES",
            limit=MAX_DECOMPRESSED_BYTES,
            value=len(out),
        )
    return out


def _some(items: Iterable[str], limit: int = 8) -> str:
    distinct = list(dict.fromkeys(items))
    more = f" and {len(distinct) - limit} more" if len(distinct) > limit else ""
    return ", ".join(distinct[:limit]) + more


def _no_payload_message(stream: _Stream, raw: bytes, source: str) -> str:
    if not stream.parsed:
        return f"Not a keras_pickle payload: {source} is {describe_bytes(memoryview(raw))}, not a pickle."
    parts = [f"Not a keras_pickle payload: {source} is a pickle that never calls keras_pickle._format.restore."]
    if stream.globals:
        parts.append("It names " + _some(f"{m}.{n}" for m, n in stream.globals) + ".")
    if stream.calls:
        parts.append("It calls " + _some(stream.calls) + ".")
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
    calls: list[str] = dataclasses.field(default_factory=list)
    payloads: list[Call] = dataclasses.field(default_factory=list)
    out_of_band: int = 0
    persistent_ids: int = 0


class _Malformed(ValueError):
    pass


def _ops(raw: bytes) -> Iterator[tuple[pickletools.OpcodeInfo, Any, int]]:
    yield from pickletools.genops(io.BytesIO(raw))


def _evaluate(raw: bytes, source: str) -> _Stream:
    """Run the stream's opcodes on inert values; record globals, calls and payloads."""
    stream = _Stream()
    stack: list[Any] = []
    metastack: list[list[Any]] = []
    memo: dict[Any, Any] = {}
    seen_globals: set[tuple[str, str]] = set()

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
        stream.calls.append(describe_call(function, args))
        return result

    highest = 0
    try:
        for opcode, arg, _pos in _ops(raw):
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
                stack.append(bytearray(arg))
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
                stack.append(frozenset(_hashable(x) for x in items))
            elif name == "DICT":
                items = pop_mark()
                if len(items) % 2:
                    raise _Malformed("odd number of items for DICT")
                stack.append({_hashable(items[i]): items[i + 1] for i in range(0, len(items), 2)})
            elif name == "APPEND":
                value = pop()
                _extend(top(), [value])
            elif name == "APPENDS":
                items = pop_mark()
                _extend(top(), items)
            elif name == "SETITEM":
                value = pop()
                key = pop()
                _set_items(top(), [key, value])
            elif name == "SETITEMS":
                items = pop_mark()
                if len(items) % 2:
                    raise _Malformed("odd number of items for SETITEMS")
                _set_items(top(), items)
            elif name == "ADDITEMS":
                items = pop_mark()
                target = top()
                if isinstance(target, set):
                    target.update(_hashable(x) for x in items)
            # memo
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = top()
            elif name == "MEMOIZE":
                memo[len(memo)] = top()
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise _Malformed(f"memo key {arg!r} missing")
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
                stream.calls.append(f"__setstate__ of {describe_callable(target)}")
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
            f"Not a keras_pickle payload: {source} is not a well-formed pickle ({e}).",
            found=source,
            original_error=e,
        ) from e
    stream.protocol = stream.protocol or highest
    return stream


def _hashable(value: Any) -> Any:
    hash(value)  # raises TypeError for lists and dicts, as the real unpickler would
    return value


def _extend(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif not isinstance(target, Call):
        raise _Malformed(f"APPENDS to a {type(target).__name__}")


def _set_items(target: Any, items: list[Any]) -> None:
    if isinstance(target, dict):
        for i in range(0, len(items), 2):
            target[_hashable(items[i])] = items[i + 1]
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
            f"format version {version} is newer than this keras_pickle reads (up to "
            f"{_format.FORMAT_VERSION}): pip install --upgrade keras-pickle"
        )

    config_text = body.get("config")
    config: Any = None
    if isinstance(config_text, str):
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
        warnings.append(f"the header claims {claimed_n!r} variables, the body holds {n_variables}")
    if claimed_bytes != weight_bytes:
        warnings.append(f"the header claims {claimed_bytes!r} weight bytes, the body's shapes need {weight_bytes}")

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

    unexpected = [c for c in stream.calls if not _expected_call(c)]
    if unexpected:
        warnings.append("the pickle calls " + _some(unexpected) + ": keras_pickle.loads (safe mode) refuses it")
    refused = [f"{m}.{n}" for m, n in stream.globals if _safe_mode_refuses(m, n)]
    if refused:
        warnings.append("the pickle names " + _some(refused) + ", which safe mode refuses")
    if stream.persistent_ids:
        warnings.append("the pickle uses persistent ids, which keras_pickle payloads never do")

    checksum = header.get("checksum")
    status = _checksum_status(checksum, body, sections, verify=verify, buffers=buffers)
    if status.startswith("MISMATCH"):
        warnings.append("the content does not match its checksum: it was changed or damaged")

    def text(key: str) -> str | None:
        value = header.get(key)
        return value if isinstance(value, str) else None

    def plain(value: Any) -> Any:
        """Header values as reported: ints and strings as they are, anything else as a short repr."""
        if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
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
        if not (isinstance(shape, tuple) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape)):
            problem = f"{section} entry {key!r} has an invalid shape {shape!r}"
            shape = ()
        elif any(d < 0 for d in shape):
            problem = f"{section} entry {key!r} has a negative dimension {shape!r}"
        itemsize = _itemsize(dtype)
        if itemsize is None:
            problem = problem or f"{section} entry {key!r} has an invalid dtype {dtype!r}"
            itemsize = 0
        size = math.prod(shape) if shape else 1
        nbytes = size * itemsize
        if problem is None:
            if isinstance(data, (bytes, bytearray)) and len(data) != nbytes:
                problem = f"{section} entry {key!r} holds {len(data)} bytes; its shape and dtype need {nbytes}"
            elif not isinstance(data, (bytes, bytearray, OutOfBand)):
                problem = f"{section} entry {key!r} holds a {type(data).__name__}, not raw bytes"
        result.append(_Entry(str(key), str(dtype), shape, size, nbytes, data, problem))
    return result


def _itemsize(dtype: Any) -> int | None:
    if not isinstance(dtype, str):
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


def _checksum_status(checksum: Any, body: dict, sections, *, verify: bool, buffers: list | None) -> str:
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
    resolved = _with_buffers(body, buffers)
    if resolved is None:
        return "present (not verified: the body is malformed)"
    try:
        actual = _format.body_checksum(resolved)
    except Exception:
        return "present (not verified: the body is malformed)"
    return "verified" if actual == checksum else f"MISMATCH (computed {actual})"


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
