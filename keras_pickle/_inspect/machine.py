"""A stack machine that runs a pickle's opcodes on inert values: globals named, calls spelled, none made.

It knows only constants, tuples, lists, dicts and sets. A global becomes a :class:`~.values.Global` (a
module and a name, never looked up), a call a :class:`~.values.Call` (never made), an out-of-band buffer an
:class:`~.values.OutOfBand`. The keras_pickle payloads in the stream are the calls of the reconstructors
whose arguments are such plain data.
"""

from __future__ import annotations

import copyreg
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._safe_mode import CODECS_ENCODE, expected_call
from .._wire.reprs import shorten
from .._wire.schema import RESTORE, RESTORE_WITH_STATE
from ..errors import NotAPayloadError
from .opcodes import PickleReader, malformed_words
from .opening import Input
from .values import Call, Global, Key, OutOfBand, Persistent, describe_call, describe_callable, short, unused_at_stop
from .values import as_numpy_calls_it as _as_numpy_calls_it

JOBLIB_ARRAY = ("joblib.numpy_pickle", "NumpyArrayWrapper")
"""What ``joblib.dump`` writes for a numpy array: the wrapper, then the array's bytes outside any opcode."""

LISTED = 64
"""Calls listed for reports, of each kind (all calls; calls safe mode refuses)."""


def joblib_array_layout(state: Any) -> tuple[int, bool]:
    """``(bytes of data, whether a padding length byte precedes it)`` of a joblib array wrapper's state."""
    if not isinstance(state, dict):
        raise _Malformed("a joblib array wrapper without its state")
    dtype, shape = state.get("dtype"), state.get("shape")
    name = dtype.args[0] if isinstance(dtype, Call) and isinstance(dtype.args, tuple) and dtype.args else None
    try:
        itemsize = np.dtype(name).itemsize if isinstance(name, str) and not name.startswith("O") else None
    except (TypeError, ValueError):
        itemsize = None
    if itemsize is None or not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise _Malformed("a joblib array of a dtype or shape inspect does not read")
    return math.prod(shape) * itemsize, state.get("numpy_array_alignment_bytes") is not None


@dataclasses.dataclass
class Stream:
    protocol: int = 0
    parsed: bool = False
    globals: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    # Descriptions of the calls the stream spells, each once: the first LISTED of them, and the first
    # LISTED that safe mode refuses; ``more_*`` when further ones were left out.
    calls: dict[str, None] = dataclasses.field(default_factory=dict)
    unexpected_calls: dict[str, None] = dataclasses.field(default_factory=dict)
    more_calls: bool = False
    more_unexpected: bool = False
    payloads: list[Call] = dataclasses.field(default_factory=list)
    out_of_band: int = 0
    persistent_ids: int = 0
    unused_at_stop: str | None = None  # values.unused_at_stop: what STOP returned is not what the stream built
    head_checksum: str | None = None  # damage.head_checksum of the stream's first bytes (set by inspect_all)

    def record_call(self, name: str, describe: Callable[[], str] | None = None) -> None:
        """List a call for the reports; ``name`` is its callable's, ``describe()`` the whole call's description.

        Only calls that get listed are described, so listing costs nothing
        once the lists are full. Without ``describe``, ``name`` describes the call.
        """
        describe = describe or (lambda: name)
        description = None
        if len(self.calls) < LISTED:
            description = describe()
            self.calls.setdefault(description)
        else:
            self.more_calls = True
        if not expected_call(name):
            if len(self.unexpected_calls) < LISTED:
                self.unexpected_calls.setdefault(description or describe())
            else:
                self.more_unexpected = True


class _Malformed(ValueError):
    pass


def evaluate(pickle_input: Input, *, hold_data: bool) -> Stream:
    """Run the stream's opcodes on inert values; record globals, calls and payloads.

    ``hold_data``: keep the data of bytes opcodes (to verify checksums).
    """
    source = pickle_input.source
    stream = Stream()
    stack: list[Any] = []
    metastack: list[list[Any]] = []
    memo: dict[Any, Any] = {}
    memo_read: set[Any] = set()  # the memo keys the stream reads back
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
        if key not in seen_globals and key not in (RESTORE, CODECS_ENCODE):
            seen_globals.add(key)
            stream.globals.append(key)
        return Global(module, name)

    def call(function: Any, args: Any, *, new: bool = False) -> Any:
        if isinstance(function, Global) and function.key == CODECS_ENCODE:
            if isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], str):
                if args[1] in ("latin1", "latin-1"):
                    return args[0].encode("latin-1")
        result = Call(function, args)
        key = function.key if isinstance(function, Global) else None
        if new and key in (RESTORE, RESTORE_WITH_STATE):  # NEWOBJ calls cls.__new__, which a function lacks
            raise _Malformed("NEWOBJ of keras_pickle's reconstructor, a function")
        if key == RESTORE and isinstance(args, tuple) and len(args) == 2:
            stream.payloads.append(result)
            return result
        if key == RESTORE_WITH_STATE and isinstance(args, tuple) and len(args) == 3:
            stream.payloads.append(result)
        stream.record_call(_as_numpy_calls_it(describe_callable(function), args), lambda: describe_call(function, args))
        return result

    highest = 0
    joblib_arrays = 0
    frame_end = None  # where the current frame's announced length ends (pickle's own framing, not content)
    try:
        reader = PickleReader(pickle_input, hold_data=hold_data)
        for opcode, arg in reader.ops():
            name = opcode.name
            stream.parsed = True
            highest = max(highest, opcode.proto)
            if name == "PROTO":
                if not 0 <= int(arg) <= 5:  # as pickle itself refuses it
                    raise _Malformed(f"unsupported pickle protocol: {int(arg)}")
                stream.protocol = int(arg)
            elif name == "FRAME":
                # A pickler writes frames one after another, the last one ending with STOP: a frame
                # starting inside another, or announcing more than the pickle holds, is damage.
                if frame_end is not None and reader.position - 9 < frame_end:
                    raise _Malformed("a frame starts inside the previous one")
                frame_end = reader.position + int(arg)
            elif name == "STOP":
                if frame_end is not None and frame_end > reader.position:
                    raise _Malformed(
                        f"its last frame announces {frame_end - reader.position:,} bytes more than the pickle holds"
                    )
                stream.unused_at_stop = unused_at_stop(stack, metastack, memo, memo_read)
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
                elif not (isinstance(value, bytes) or hasattr(value, "nbytes")):  # a Blob: bytes not held
                    raise _Malformed(f"READONLY_BUFFER on a {type(value).__name__}, which is no buffer")
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
                    raise _Malformed(f"memo key {short(arg)} missing")
                stack.append(memo[arg])
                memo_read.add(arg)
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
                registered = copyreg._inverted_registry.get(arg)
                module, global_name = registered if registered else ("<extension code>", str(arg))
                stack.append(add_global(module, global_name))
            elif name == "REDUCE":
                args = pop()
                function = pop()
                stack.append(call(function, args))
            elif name == "NEWOBJ":
                args = pop()
                cls = pop()
                stack.append(call(cls, args, new=True))
            elif name == "NEWOBJ_EX":
                kwargs = pop()
                args = pop()
                cls = pop()
                stack.append(call(cls, (args, kwargs), new=True))
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
                    if isinstance(target.function, Global) and target.function.key == JOBLIB_ARRAY:
                        # joblib.dump writes an array's bytes raw after its wrapper: they stand for it.
                        stack[-1] = reader.joblib_array(*joblib_array_layout(state))
                        joblib_arrays += 1
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
            f"Not a keras_pickle payload: {source} {malformed_words(e)} ({shorten(str(e), 300)}).",
            found=source,
            original_error=e,
        ) from e
    stream.protocol = stream.protocol or highest
    if joblib_arrays:
        _as_joblib_loads_it(stream)
    return stream


_JOBLIB_MACHINERY = (JOBLIB_ARRAY, ("numpy", "ndarray"), ("numpy", "dtype"))


def _as_joblib_loads_it(stream: Stream) -> None:
    """A ``joblib.dump`` file described as ``joblib.load`` reads it: its arrays are data, and the wrappers and
    dtypes that frame them are not globals or calls of the content."""
    stream.globals = [key for key in stream.globals if key not in _JOBLIB_MACHINERY]
    framing = tuple(f"{module}.{name}" for module, name in _JOBLIB_MACHINERY)
    framing += tuple(f"__setstate__ of {p}" for p in framing) + tuple(
        f"__setstate__ of the result of {p}" for p in framing
    )
    for calls in (stream.calls, stream.unexpected_calls):
        for description in [d for d in calls if d.startswith(framing)]:
            del calls[description]


class _Keys:
    """Turns the stream's values into dict keys and set members.

    Unhashable values raise TypeError, as they would in the real unpickler.
    Tuples become :class:`~.values.Key` objects (keyed by identity): each tuple's
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
        return Key(value)


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
