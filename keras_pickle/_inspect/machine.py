"""A stack machine that runs a pickle's opcodes on inert values: globals named, calls spelled, none made.

It knows only constants, tuples, lists, dicts and sets. A global becomes a :class:`~.values.Global` (a
module and a name, never looked up), a call a :class:`~.values.Call` (never made), an out-of-band buffer an
:class:`~.values.OutOfBand`. The keras_pickle payloads in the stream are the calls of the reconstructors
whose arguments are such plain data.

The machine's state is :mod:`.machine_state`'s; what each opcode does to it, :mod:`.opcode_handlers`'s table.
"""

from __future__ import annotations

from .._wire.reprs import shorten
from ..errors import NotAPayloadError
from .machine_state import Machine, Malformed
from .machine_state import Stream as Stream
from .opcode_handlers import DISPATCH, JOBLIB_ARRAY
from .opcodes import PickleReader, malformed_words
from .opening import Input


def evaluate(pickle_input: Input, *, hold_data: bool) -> Stream:
    """Run the stream's opcodes on inert values; record globals, calls and payloads.

    ``hold_data``: keep the data of bytes opcodes (to verify checksums). Raises NotAPayloadError where the
    stream is a pickle the unpickler would not read (an empty record where no opcode could be read at all).
    """
    stream = Stream()
    try:
        machine = Machine(PickleReader(pickle_input, hold_data=hold_data), stream)
        for opcode, arg in machine.reader.ops():
            stream.parsed = True
            machine.highest_protocol = max(machine.highest_protocol, opcode.proto)
            handler = DISPATCH.get(opcode.name)
            if handler is None:  # pragma: no cover - the table holds every opcode of protocols 0-5
                raise Malformed(f"unknown opcode {opcode.name}")
            handler(machine, arg)
        if stream.parsed and not machine.stopped:
            raise Malformed("the pickle has no STOP opcode")
    except (Malformed, ValueError, TypeError, IndexError, KeyError, OverflowError, MemoryError) as e:
        if not stream.parsed:
            return stream
        raise NotAPayloadError(
            f"Not a keras_pickle payload: {pickle_input.source} {malformed_words(e)} ({shorten(str(e), 300)}).",
            found=pickle_input.source,
            original_error=e,
        ) from e
    stream.protocol = stream.protocol or machine.highest_protocol
    if machine.joblib_arrays:
        _as_joblib_loads_it(stream)
    return stream


_JOBLIB_MACHINERY = (JOBLIB_ARRAY, ("numpy", "ndarray"), ("numpy", "dtype"))


def _as_joblib_loads_it(stream: Stream) -> None:
    """A ``joblib.dump`` file described as ``joblib.load`` reads it: its arrays are data, and the wrappers and
    dtypes that frame them are not globals or calls of the content."""
    stream.globals = [key for key in stream.globals if key not in _JOBLIB_MACHINERY]
    names = tuple(f"{module}.{name}" for module, name in _JOBLIB_MACHINERY)
    framing = (
        names
        + tuple(f"__setstate__ of {p}" for p in names)
        + tuple(f"__setstate__ of the result of {p}" for p in names)
    )
    for calls in (stream.calls, stream.unexpected_calls):
        for description in [d for d in calls if d.startswith(framing)]:
            del calls[description]
