"""Per-call options that reach reducers and the reconstructor.

``pickle`` gives ``__reduce_ex__`` and the reconstructor no way to receive
arguments from ``keras_pickle.dumps`` / ``loads``. These context variables
carry them, scoped to one call and safe across threads and asyncio tasks.
Plain ``pickle.dumps`` / ``pickle.loads`` see the defaults.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class DumpOptions:
    # True / False: asked for (dumps(checksum=...), a checksums() block). None: the default,
    # :meth:`wants_checksum`.
    checksum: bool | None = None
    # No buffer_callback: the pickler copies every buffer into the stream before the call returns.
    in_band: bool = False

    def wants_checksum(self, protocol: int) -> bool:
        """Whether a payload written at ``protocol`` carries a checksum.

        As asked, else by default wherever the weights are surely written into the stream (bytes
        that may be stored): ``keras_pickle.dumps`` / ``dump`` without a ``buffer_callback``, and any
        pickle of protocol 0 to 4. Not by default where a protocol-5 pickle may hand the weights to
        a ``buffer_callback`` (a live transport: Dask, Ray), whose dumps copies nothing and would
        spend most of its time hashing: ``dumps`` with a ``buffer_callback``, and plain
        ``pickle.dumps`` at protocol 5, which keras_pickle cannot tell from in band.
        """
        if self.checksum is not None:
            return self.checksum
        return self.in_band or protocol < 5


@dataclasses.dataclass
class LoadOptions:
    # Plain ``pickle.loads`` is unsafe by nature; keras_pickle.loads opts in.
    safe_mode: bool = False
    # Safe mode only: whether a class the payload carries by value (its code) may be unpickled.
    allow_by_value: bool = False
    # Safe mode only: whether callbacks the payload carries (they act on files) may be restored.
    allow_callbacks: bool = False
    # Safe mode only: whether Keras's control-flow ops (they call the functions their arguments name) may be built.
    allow_control_flow: bool = False
    # The caller's custom objects (keras_pickle.loads(custom_objects=...)): names Keras may resolve, and
    # objects safe mode always allows, since the caller named them.
    custom_objects: dict = dataclasses.field(default_factory=dict)
    # Counts the keras_pickle payloads restored during one load call.
    restored: int = 0


_dump_options: contextvars.ContextVar[DumpOptions] = contextvars.ContextVar(
    "keras_pickle_dump_options",
    default=DumpOptions(),  # noqa: B039 (frozen)
)
_load_options: contextvars.ContextVar[LoadOptions | None] = contextvars.ContextVar(
    "keras_pickle_load_options", default=None
)


def dump_options() -> DumpOptions:
    return _dump_options.get()


def load_options() -> LoadOptions:
    """The options of the enclosing ``keras_pickle.loads`` call, or defaults."""
    return _load_options.get() or LoadOptions()


@contextlib.contextmanager
def dumping(options: DumpOptions) -> Iterator[DumpOptions]:
    token = _dump_options.set(options)
    try:
        yield options
    finally:
        _dump_options.reset(token)


@contextlib.contextmanager
def loading(options: LoadOptions) -> Iterator[LoadOptions]:
    token = _load_options.set(options)
    try:
        yield options
    finally:
        _load_options.reset(token)


def note_restored() -> None:
    options = _load_options.get()
    if options is not None:
        options.restored += 1
