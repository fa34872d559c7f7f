"""The stack machine's state: its stack, marks and memo, and the record of what the stream names (:class:`Stream`).

The opcode handlers (:mod:`.opcode_handlers`) act on a :class:`Machine` through its primitives; nothing here
resolves a global or makes a call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._safe_mode import CODECS_ENCODE, expected_call
from .._wire.schema import RESTORE, RESTORE_WITH_STATE
from .opcodes import PickleReader
from .values import Call, Global, Key, describe_call, describe_callable
from .values import as_numpy_calls_it as _as_numpy_calls_it

LISTED = 64
"""Calls listed for reports, of each kind (all calls; calls safe mode refuses)."""


class Malformed(ValueError):
    """The stream is not a pickle the unpickler would read: the reason is the message."""


@dataclasses.dataclass
class Stream:
    """What one pickle stream names, calls and holds, as the machine records it."""

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


class Keys:
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


class Machine:
    """One stream's evaluation in progress: the stack (``stack``, the items above the last MARK), the stacks
    that MARKs set aside (``metastack``), the memo, and the :class:`Stream` record it fills.

    The primitives raise :class:`Malformed` where the unpickler would fail: a pop from an empty stack, a
    mark that is missing, a global whose module or name is not a string.
    """

    def __init__(self, reader: PickleReader, stream: Stream):
        self.reader, self.stream = reader, stream
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[Any, Any] = {}
        self.memo_read: set[Any] = set()  # the memo keys the stream reads back
        self.seen_globals: set[tuple[str, str]] = set()
        self.keys = Keys()
        self.frame_end: int | None = None  # where the current frame's announced length ends (pickle's framing)
        self.joblib_arrays = 0  # joblib arrays read raw after their wrappers
        self.highest_protocol = 0  # of the opcodes read so far
        self.stopped = False  # STOP was read

    def push(self, value: Any) -> None:
        self.stack.append(value)

    def pop(self) -> Any:
        if not self.stack:
            raise Malformed("stack underflow")
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise Malformed("stack underflow")
        return self.stack[-1]

    def mark(self) -> None:
        self.metastack.append(self.stack)
        self.stack = []

    def pop_mark(self) -> list[Any]:
        """The items above the last MARK, taken off with it.

        ``stack`` is another list afterwards: ``machine.stack.append(machine.pop_mark())`` would append to the
        popped items; :meth:`push` does not.
        """
        if not self.metastack:
            raise Malformed("MARK missing")
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    def add_global(self, module: Any, name: Any) -> Global:
        """The global ``module.name``, listed in the record (the first time; never keras_pickle's own)."""
        if not (isinstance(module, str) and isinstance(name, str)):
            raise Malformed("a global's module and name must be strings")
        named = (module, name)
        if named not in self.seen_globals and named not in (RESTORE, CODECS_ENCODE):
            self.seen_globals.add(named)
            self.stream.globals.append(named)
        return Global(module, name)

    def call(self, function: Any, args: Any, *, new: bool = False) -> Any:
        """The inert result of ``function(*args)`` (``new``: of NEWOBJ), listed in the record; a call of
        keras_pickle's reconstructor is recorded as a payload, and ``codecs.encode(text, 'latin1')`` (how
        protocols 0-2 write bytes) is the bytes it makes."""
        if isinstance(function, Global) and function.key == CODECS_ENCODE:
            if isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], str):
                if args[1] in ("latin1", "latin-1"):
                    return args[0].encode("latin-1")
        result = Call(function, args)
        named = function.key if isinstance(function, Global) else None
        if new and named in (RESTORE, RESTORE_WITH_STATE):  # NEWOBJ calls cls.__new__, which a function lacks
            raise Malformed("NEWOBJ of keras_pickle's reconstructor, a function")
        if named == RESTORE and isinstance(args, tuple) and len(args) == 2:
            self.stream.payloads.append(result)
            return result
        if named == RESTORE_WITH_STATE and isinstance(args, tuple) and len(args) == 3:
            self.stream.payloads.append(result)
        self.stream.record_call(
            _as_numpy_calls_it(describe_callable(function), args), lambda: describe_call(function, args)
        )
        return result
