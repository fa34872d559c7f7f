"""``inspect()`` and ``inspect_all()``: describe the payloads of a stream without unpickling it.

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
as it is read (never whole, at most :data:`~keras_pickle.limits.MAX_DECOMPRESSED_BYTES`); at most
:data:`~keras_pickle.limits.MAX_OPCODES` opcodes are evaluated; the opcodes' arguments it holds
(strings, numbers and, for ``verify=True``, the in-band weights) may exceed
the input's own size by at most :data:`~keras_pickle.limits.MAX_HELD_BYTES`; the data of bytes
opcodes is skipped unless a checksum is to be verified (only its length
matters); a config longer than :data:`~keras_pickle.limits.MAX_CONFIG_CHARS` is not parsed. Values
the payload provides are shown in reports and warnings with a bounded repr
(:func:`_short`), and hashed or fed to the checksum only when that is cheap.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import IO, Any

from .._diagnosis import damage
from .._diagnosis.formats import foreign_format
from .._wire.reprs import shorten
from ..errors import KerasPickleError, NotAPayloadError
from .describe import describe
from .machine import Stream, evaluate
from .opening import Input, opened
from .payload_info import PayloadInfo
from .values import Call, some


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
    of a compressed file only up to :data:`keras_pickle.limits.MAX_HELD_BYTES` beyond its own
    size: past that, the checksum status says it was not verified). Raises
    :class:`~keras_pickle.NotAPayloadError` when the data holds no
    keras_pickle payload or is not a readable pickle, and
    :class:`~keras_pickle.ResourceLimitError` when reading it would exceed one
    of the inspector's limits (:mod:`keras_pickle.limits`).
    """
    infos = inspect_all(data, verify=verify, buffers=buffers)
    return dataclasses.replace(infos[0], payloads_in_stream=len(infos))


def inspect_all(
    data: bytes | bytearray | memoryview | str | os.PathLike | IO[bytes],
    *,
    verify: bool = False,
    buffers: Iterable[Any] | None = None,
) -> list[PayloadInfo]:
    """Like :func:`inspect`, one :class:`PayloadInfo` per payload in the stream, the outermost first
    (those no other payload holds as an argument), each group in stream order.

    The input is read once, as a stream; a file object is read from its
    current position and left open. Memory stays bounded whatever the input
    (see the module's docstring); a limit that is reached raises
    :class:`~keras_pickle.ResourceLimitError`.
    """
    with opened(data) as pickle_input:
        source = pickle_input.source
        start = b""
        try:
            start = bytes(pickle_input.stream.peek(damage.HEAD_BYTES)[: damage.HEAD_BYTES])
            head = start[:8]
            description = foreign_format(start)
            if description is not None:
                raise NotAPayloadError(f"Not a keras_pickle payload: {source} is {description}.", found=description)
            stream = evaluate(pickle_input, hold_data=verify)
            if not stream.payloads:
                raise NotAPayloadError(_no_payload_message(stream, head, pickle_input), found=source)
            if stream.unused_at_stop:  # as loads judges it: a damaged opcode before STOP
                raise NotAPayloadError(
                    f"Not a keras_pickle payload: {source} is not a well-formed pickle ({stream.unused_at_stop}).",
                    found=source,
                )
            stream.head_checksum = damage.head_checksum(start)
            buffer_list = list(buffers) if buffers is not None else None
            payloads = _outermost_first(stream.payloads)
            return [describe(stream, call, verify=verify, buffers=buffer_list) for call in payloads]
        except NotAPayloadError as e:
            # A stream whose start shows a keras_pickle payload is a damaged payload, not "not a payload".
            damaged = damage.stream_damage(start, source, e)
            if damaged is not None:
                raise damaged from e
            raise
        except KerasPickleError:
            raise
        except Exception as e:  # malformed input must never escape as anything else
            raise NotAPayloadError(
                f"Not a keras_pickle payload: {source} could not be read ({type(e).__name__}: {shorten(str(e), 300)}).",
                found=source,
                original_error=e,
            ) from e


def _outermost_first(payloads: list[Call]) -> list[Call]:
    """``payloads`` with those no other payload holds first, each group in stream order.

    A payload holds another when that one is among its arguments (a model
    given to a recorded constructor is a payload of its own, written first).
    """
    nested: set[int] = set()
    for payload in payloads:
        stack, budget = [payload.args], 100_000
        while stack and budget:
            budget -= 1
            value = stack.pop()
            if isinstance(value, Call):
                nested.add(id(value))
                stack.append(value.args)
            elif isinstance(value, (tuple, list)):
                stack.extend(value)
            elif isinstance(value, dict):
                stack.extend(value.values())
    return [p for p in payloads if id(p) not in nested] + [p for p in payloads if id(p) in nested]


def _no_payload_message(stream: Stream, head: bytes, pickle_input: Input) -> str:
    source = pickle_input.source
    if pickle_input.compression:
        source += f", once {pickle_input.compression}-decompressed,"
    if not stream.parsed:
        start = f"starts with {head!r}" if head else "is empty"
        return f"Not a keras_pickle payload: {source} {start}: not a pickle."
    parts = [f"Not a keras_pickle payload: {source} is a pickle that never calls keras_pickle._format.restore."]
    if stream.globals:
        parts.append("It names " + some(f"{m}.{n}" for m, n in stream.globals) + ".")
    if stream.calls:
        parts.append("It calls " + some(stream.calls, more=stream.more_calls) + ".")
    if any(module.startswith("keras") and "_unpickle_model" in name for module, name in stream.globals):
        parts.append("It looks like Keras's own pickle format.")
    return " ".join(parts)
