"""The inspector's inert values: what a pickle's globals and calls become when nothing is resolved or made."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._wire.reprs import BoundedRepr


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


class Key:
    """A tuple used as a dict key or set member, hashed and compared by identity.

    Hashing a tuple hashes its items, and a stream can nest one shared tuple
    in itself n times with memo GETs, which makes a real hash cost 2**n.
    """

    __slots__ = ("value",)

    def __init__(self, value: tuple):
        self.value = value

    def __repr__(self) -> str:
        return short(self.value)


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
    return f"{name}({', '.join(describe_argument(a, depth) for a in args[:4])}{', ...' if len(args) > 4 else ''})"


def describe_argument(value: Any, depth: int) -> str:
    if isinstance(value, (str, bytes, bytearray, int, float, bool, type(None))):
        return short(value)
    if isinstance(value, Call) and depth < 3:
        return describe_call(value.function, value.args, depth + 1)
    if isinstance(value, Global):
        return describe_callable(value)
    return f"<{type(value).__name__}>"


class _ShortRepr(BoundedRepr):
    """:class:`BoundedRepr` that also shows the inspector's identity-keyed tuples."""

    def repr_Key(self, x: Key, level: int) -> str:
        return self.repr1(x.value, level)


_SHORT_REPR = _ShortRepr()


def short(value: Any) -> str:
    """A repr of a value the payload provides, for reports: about 2 kB at most, built in bounded time."""
    return _SHORT_REPR.repr(value)


def some(items: Iterable[str], limit: int = 8, more: bool = False) -> str:
    """At most ``limit`` of the distinct ``items``; ``more``: items were left out before they got here."""
    distinct = list(dict.fromkeys(items))
    shown = ", ".join(distinct[:limit])
    if more:
        return f"{shown} and more than {max(len(distinct) - limit, 0)} others"
    return shown + (f" and {len(distinct) - limit} more" if len(distinct) > limit else "")


def unused_at_stop(stack: list, metastack: list, memo: dict, memo_read: set) -> str | None:
    """What shows, at STOP, that the value it returns is not the one the stream built; else None.

    As ``keras_pickle.loads`` judges it: a pickler leaves exactly one value, which it memoized
    (unless in its "fast" mode, which memoizes nothing); one damaged opcode byte before STOP pushes
    another, or wraps the last in a tuple, and STOP returns that. The memo is judged only where the
    stream stores an entry it never reads back (``memo_read``: the keys it does): ``pickletools.optimize``
    keeps only those read back, never the root's.
    """
    if not stack:
        return "nothing left to return when it stopped"
    if metastack or len(stack) > 1:
        left = len(stack) - 1 + sum(len(frame) for frame in metastack) + len(metastack)
        return f"{left} values left unused when it stopped"
    if memo and not any(value is stack[0] for value in memo.values()) and memo.keys() - memo_read:
        return f"the {type(stack[0]).__name__} it returns is none that it built and kept"
    return None


def as_numpy_calls_it(name: str, args: Any) -> str:
    """``name``, or a name no expected call has, where numpy's reconstruction is called other than as numpy's
    pickles call it (as safe mode's reader refuses it): ``_reconstruct`` of a non-empty array (memory numpy
    leaves uninitialized), ``scalar`` without exactly its data."""
    if name.endswith("multiarray._reconstruct") and not (
        isinstance(args, tuple) and len(args) == 3 and args[1] == (0,)
    ):
        return f"a non-empty (uninitialized) array from {name}"
    if name.endswith("multiarray.scalar") and not (
        isinstance(args, tuple) and len(args) == 2 and isinstance(args[1], bytes)
    ):
        return f"a scalar without its data from {name}"
    return name
