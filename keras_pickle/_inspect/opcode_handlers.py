"""What each pickle opcode does to the inert stack machine: :data:`DISPATCH`, opcode name -> handler.

A handler takes the :class:`~.machine_state.Machine` and the opcode's argument and does to the stack, the
marks and the memo what the unpickler does, on inert values: a global is named, never looked up; a call is
spelled, never made. It raises :class:`~.machine_state.Malformed` where the unpickler would fail.
"""

from __future__ import annotations

import copyreg
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .machine_state import Machine, Malformed
from .values import Call, Global, OutOfBand, Persistent, describe_callable, short, unused_at_stop

Handler = Callable[[Machine, Any], None]

JOBLIB_ARRAY = ("joblib.numpy_pickle", "NumpyArrayWrapper")
"""What ``joblib.dump`` writes for a numpy array: the wrapper, then the array's bytes outside any opcode."""


def joblib_array_layout(state: Any) -> tuple[int, bool]:
    """``(bytes of data, whether a padding length byte precedes it)`` of a joblib array wrapper's state."""
    if not isinstance(state, dict):
        raise Malformed("a joblib array wrapper without its state")
    dtype, shape = state.get("dtype"), state.get("shape")
    name = dtype.args[0] if isinstance(dtype, Call) and isinstance(dtype.args, tuple) and dtype.args else None
    try:
        itemsize = np.dtype(name).itemsize if isinstance(name, str) and not name.startswith("O") else None
    except (TypeError, ValueError):
        itemsize = None
    if itemsize is None or not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise Malformed("a joblib array of a dtype or shape inspect does not read")
    return math.prod(shape) * itemsize, state.get("numpy_array_alignment_bytes") is not None


# framing


def _proto(machine: Machine, arg: Any) -> None:
    if not 0 <= int(arg) <= 5:  # as pickle itself refuses it
        raise Malformed(f"unsupported pickle protocol: {int(arg)}")
    machine.stream.protocol = int(arg)


def _frame(machine: Machine, arg: Any) -> None:
    # A pickler writes frames one after another, the last one ending with STOP: a frame
    # starting inside another, or announcing more than the pickle holds, is damage.
    position = machine.reader.position
    if machine.frame_end is not None and position - 9 < machine.frame_end:
        raise Malformed("a frame starts inside the previous one")
    machine.frame_end = position + int(arg)


def _stop(machine: Machine, _arg: Any) -> None:
    position = machine.reader.position
    if machine.frame_end is not None and machine.frame_end > position:
        raise Malformed(f"its last frame announces {machine.frame_end - position:,} bytes more than the pickle holds")
    machine.stream.unused_at_stop = unused_at_stop(machine.stack, machine.metastack, machine.memo, machine.memo_read)
    machine.stopped = True


# the stack and its marks


def _mark(machine: Machine, _arg: Any) -> None:
    machine.mark()


def _pop(machine: Machine, _arg: Any) -> None:
    if machine.stack:
        machine.stack.pop()
    else:
        machine.pop_mark()


def _pop_mark(machine: Machine, _arg: Any) -> None:
    machine.pop_mark()


def _dup(machine: Machine, _arg: Any) -> None:
    machine.push(machine.top())


# constants


def _push_constant(value: Any, machine: Machine, _arg: Any) -> None:
    machine.push(value)


def _push_new(make: Callable[[], Any], machine: Machine, _arg: Any) -> None:
    machine.push(make())


def _push_argument(machine: Machine, arg: Any) -> None:
    machine.push(arg)


def _bytearray8(machine: Machine, arg: Any) -> None:
    machine.push(bytearray(arg) if isinstance(arg, bytes) else arg)  # else a Blob: bytes not held


def _next_buffer(machine: Machine, _arg: Any) -> None:
    machine.push(OutOfBand(machine.stream.out_of_band))
    machine.stream.out_of_band += 1


def _readonly_buffer(machine: Machine, _arg: Any) -> None:
    value = machine.top()
    if isinstance(value, OutOfBand):
        value.readonly = True
    elif isinstance(value, bytearray):
        machine.stack[-1] = bytes(value)
    elif not (isinstance(value, bytes) or hasattr(value, "nbytes")):  # a Blob: bytes not held
        raise Malformed(f"READONLY_BUFFER on a {type(value).__name__}, which is no buffer")


# containers


def _list(machine: Machine, _arg: Any) -> None:
    machine.push(machine.pop_mark())


def _tuple(machine: Machine, _arg: Any) -> None:
    machine.push(tuple(machine.pop_mark()))


def _tuple_of(n: int, machine: Machine, _arg: Any) -> None:
    if len(machine.stack) < n:
        raise Malformed("stack underflow")
    items = tuple(machine.stack[-n:])
    del machine.stack[-n:]
    machine.push(items)


def _frozenset(machine: Machine, _arg: Any) -> None:
    machine.push(frozenset(machine.keys(x) for x in machine.pop_mark()))


def _dict(machine: Machine, _arg: Any) -> None:
    items = machine.pop_mark()
    if len(items) % 2:
        raise Malformed("odd number of items for DICT")
    machine.push({machine.keys(items[i]): items[i + 1] for i in range(0, len(items), 2)})


def _append(machine: Machine, _arg: Any) -> None:
    value = machine.pop()
    _extend(machine.top(), [value])


def _appends(machine: Machine, _arg: Any) -> None:
    items = machine.pop_mark()
    _extend(machine.top(), items)


def _setitem(machine: Machine, _arg: Any) -> None:
    value = machine.pop()
    dict_key = machine.pop()
    _set_items(machine, [dict_key, value])


def _setitems(machine: Machine, _arg: Any) -> None:
    items = machine.pop_mark()
    if len(items) % 2:
        raise Malformed("odd number of items for SETITEMS")
    _set_items(machine, items)


def _additems(machine: Machine, _arg: Any) -> None:
    items = machine.pop_mark()
    target = machine.top()
    if isinstance(target, set):
        target.update(machine.keys(x) for x in items)


def _extend(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif not isinstance(target, Call):
        raise Malformed(f"APPENDS to a {type(target).__name__}")


def _set_items(machine: Machine, items: list[Any]) -> None:
    """Set ``items`` (key, value, key, value...) in the dict on top of the stack (nothing in a call's result)."""
    target = machine.top()
    if isinstance(target, dict):
        for i in range(0, len(items), 2):
            target[machine.keys(items[i])] = items[i + 1]
    elif not isinstance(target, Call):
        raise Malformed(f"SETITEMS on a {type(target).__name__}")


# the memo


def _put(machine: Machine, arg: Any) -> None:
    machine.memo[arg] = machine.top()


def _memoize(machine: Machine, _arg: Any) -> None:
    machine.memo[len(machine.memo)] = machine.top()


def _get(machine: Machine, arg: Any) -> None:
    if arg not in machine.memo:
        raise Malformed(f"memo key {short(arg)} missing")
    machine.push(machine.memo[arg])
    machine.memo_read.add(arg)


# globals and calls: recorded, never resolved or made


def _text_global(machine: Machine, arg: Any) -> Global:
    module, _, name = str(arg).partition(" ")
    return machine.add_global(module, name)


def _global(machine: Machine, arg: Any) -> None:
    machine.push(_text_global(machine, arg))


def _inst(machine: Machine, arg: Any) -> None:
    function = _text_global(machine, arg)
    machine.push(machine.call(function, tuple(machine.pop_mark())))


def _stack_global(machine: Machine, _arg: Any) -> None:
    name = machine.pop()
    module = machine.pop()
    machine.push(machine.add_global(module, name))


def _ext(machine: Machine, arg: Any) -> None:
    # The names this process's copyreg registers; nothing is imported.
    registered = copyreg._inverted_registry.get(arg)
    module, name = registered if registered else ("<extension code>", str(arg))
    machine.push(machine.add_global(module, name))


def _reduce(machine: Machine, _arg: Any) -> None:
    args = machine.pop()
    function = machine.pop()
    machine.push(machine.call(function, args))


def _newobj(machine: Machine, _arg: Any) -> None:
    args = machine.pop()
    cls = machine.pop()
    machine.push(machine.call(cls, args, new=True))


def _newobj_ex(machine: Machine, _arg: Any) -> None:
    kwargs = machine.pop()
    args = machine.pop()
    cls = machine.pop()
    machine.push(machine.call(cls, (args, kwargs), new=True))


def _obj(machine: Machine, _arg: Any) -> None:
    items = machine.pop_mark()
    if not items:
        raise Malformed("OBJ without a class")
    machine.push(machine.call(items[0], tuple(items[1:])))


def _build(machine: Machine, _arg: Any) -> None:
    state = machine.pop()
    target = machine.top()
    machine.stream.record_call(f"__setstate__ of {describe_callable(target)}")
    if isinstance(target, Call):
        target.state = state
        if isinstance(target.function, Global) and target.function.key == JOBLIB_ARRAY:
            # joblib.dump writes an array's bytes raw after its wrapper: they stand for it.
            machine.stack[-1] = machine.reader.joblib_array(*joblib_array_layout(state))
            machine.joblib_arrays += 1


def _persistent_id(machine: Machine, pid: Any) -> None:
    machine.stream.persistent_ids += 1
    machine.push(Persistent(pid))


def _persid(machine: Machine, arg: Any) -> None:
    _persistent_id(machine, arg)


def _binpersid(machine: Machine, _arg: Any) -> None:
    _persistent_id(machine, machine.pop())


_ARGUMENT_CONSTANTS = (
    *("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT"),
    *("STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"),
    *("BINBYTES", "SHORT_BINBYTES", "BINBYTES8"),
)
"""The opcodes that push their argument, as read."""

DISPATCH: dict[str, Handler] = {
    "PROTO": _proto,
    "FRAME": _frame,
    "STOP": _stop,
    "MARK": _mark,
    "POP": _pop,
    "POP_MARK": _pop_mark,
    "DUP": _dup,
    "NONE": functools.partial(_push_constant, None),
    "NEWTRUE": functools.partial(_push_constant, True),
    "NEWFALSE": functools.partial(_push_constant, False),
    **dict.fromkeys(_ARGUMENT_CONSTANTS, _push_argument),
    "BYTEARRAY8": _bytearray8,
    "NEXT_BUFFER": _next_buffer,
    "READONLY_BUFFER": _readonly_buffer,
    "EMPTY_LIST": functools.partial(_push_new, list),
    "EMPTY_TUPLE": functools.partial(_push_constant, ()),
    "EMPTY_DICT": functools.partial(_push_new, dict),
    "EMPTY_SET": functools.partial(_push_new, set),
    "LIST": _list,
    "TUPLE": _tuple,
    "TUPLE1": functools.partial(_tuple_of, 1),
    "TUPLE2": functools.partial(_tuple_of, 2),
    "TUPLE3": functools.partial(_tuple_of, 3),
    "FROZENSET": _frozenset,
    "DICT": _dict,
    "APPEND": _append,
    "APPENDS": _appends,
    "SETITEM": _setitem,
    "SETITEMS": _setitems,
    "ADDITEMS": _additems,
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT"), _put),
    "MEMOIZE": _memoize,
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET"), _get),
    "GLOBAL": _global,
    "INST": _inst,
    "STACK_GLOBAL": _stack_global,
    **dict.fromkeys(("EXT1", "EXT2", "EXT4"), _ext),
    "REDUCE": _reduce,
    "NEWOBJ": _newobj,
    "NEWOBJ_EX": _newobj_ex,
    "OBJ": _obj,
    "BUILD": _build,
    "PERSID": _persid,
    "BINPERSID": _binpersid,
}
"""Each opcode of protocols 0-5, by name, and what it does to the machine."""
