"""The end of a stream: whether the value STOP returned is the one the stream built, and what it asked for.

A damaged opcode byte just before STOP can leave a whole, checksum-verified payload unused and return
something else (:func:`unused_at_stop`); a damaged global outside safe mode fails as a missing module,
judged by the name :class:`RecordingUnpickler` recorded. Nothing here imports Keras.
"""

from __future__ import annotations

import pickle
import pickletools
from collections.abc import Callable
from typing import IO, Any


class RecordingUnpickler(pickle.Unpickler):
    """pickle's own unpickler (``safe_mode=False``), which remembers the last global the stream asked for:
    a module or class the process lacks is damage when that name is a written global with a damaged byte."""

    requested: str | None = None

    def find_class(self, module: str, name: str) -> Any:
        self.requested = f"{module}.{name}"
        return super().find_class(module, name)


def unused_at_stop(unpickler: Any, obj: Any, stream: Callable[[], bytes | None]) -> str | None:
    """What shows that the value STOP returned (``obj``) is not the one the stream built, else None.

    A pickler leaves exactly one value on the unpickler's stack, the object it was given, which it
    memoized (a memo entry for the object: pickle writes one for every object but None, a bool, a
    number and the empty tuple, unless in its "fast" mode, which writes none at all). One damaged
    opcode byte before STOP changes that: a memo store read as an empty tuple or a ``TUPLE1`` returns
    that instead, leaving the payload unused. Safe mode's pure-Python unpickler shows its stacks; the
    C unpickler (``safe_mode=False``) its memo only.

    The memo tells only of a stream that memoizes every object. ``pickletools.optimize`` keeps only
    the memo stores read back, the root's never among them, so the memo is judged only where
    ``stream()`` (the stream's bytes, None when they cannot be read again) stores an entry it never
    reads back: a pickler's own output.
    """
    stack, metastack = getattr(unpickler, "stack", None), getattr(unpickler, "metastack", None)
    if isinstance(stack, list) and isinstance(metastack, list) and (stack or metastack):
        left = len(stack) + sum(len(frame) for frame in metastack) + len(metastack)
        return f"{left} values left unused when it stopped"
    try:
        memo = unpickler.memo.copy()
    except Exception:
        return None
    if memo and not any(value is obj for value in memo.values()) and _stores_unread_entries(stream()):
        return f"the {type(obj).__name__} it returns is none that it built and kept"
    return None


_MEMO_STORES = frozenset(("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"))
_MEMO_READS = frozenset(("GET", "BINGET", "LONG_BINGET"))


def _stores_unread_entries(stream: bytes | None) -> bool:
    """Whether ``stream`` (a pickle) stores a memo entry that it never reads back."""
    if stream is None:
        return False
    stored, read = set(), set()
    try:
        for opcode, argument, _ in pickletools.genops(stream):
            if opcode.name == "MEMOIZE":
                stored.add(len(stored))
            elif opcode.name in _MEMO_STORES:
                stored.add(argument)
            elif opcode.name in _MEMO_READS:
                read.add(argument)
    except Exception:
        return True  # a stream that no longer parses is no optimizer's output
    return bool(stored - read)


def position(file: IO[bytes]) -> int | None:
    """Where ``file`` stands, when it can be read again from there; else None."""
    try:
        return file.tell() if file.seekable() else None
    except (AttributeError, OSError, ValueError):
        return None


def reread(file: IO[bytes], start: int | None) -> bytes | None:
    """The bytes of ``file`` from ``start`` to where it stands, its position left as it was; None when unknown."""
    if start is None:
        return None
    try:
        end = file.tell()
        file.seek(start)
        data = file.read(end - start)
        file.seek(end)
    except (AttributeError, OSError, ValueError):
        return None
    return data
