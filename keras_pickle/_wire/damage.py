"""Damage: how a payload changed after it was written is recognised and reported.

keras_pickle writes every payload whole and well-formed, and a checksum (``checksum=True``) is
taken over that content. So when a payload that carries a checksum fails a structural check, it
no longer is what was checksummed: its content does not match its checksum, whether or not the
checksum can still be recomputed. Every reader reports that the same way, through
:func:`damaged`: a :class:`~keras_pickle.ChecksumMismatchError` (the payload carries a checksum)
or a :class:`~keras_pickle.KerasUnpicklingError` (it carries none) whose message starts with
"Damaged keras_pickle payload" and, with a checksum, says that the content does not match it.

The evidence is read from what a reader has at hand, damaged or not, and never trusted further:
a header dict (:func:`carried_checksum`), a header and body (:func:`recomputed`), the first bytes of
a stream that could not be unpickled (:func:`stream_damage`), a global one byte away from
one keras_pickle writes (:func:`near_written_global`). Nothing here imports Keras.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import (
    ChecksumMismatchError,
    KerasPickleError,
    KerasUnpicklingError,
    NotAPayloadError,
    UnsafePayloadError,
)
from .checksum import CHECKSUM_ALGORITHMS, checksum_algorithm, checksummable, content_checksum
from .reprs import shorten

PREFIX = "Damaged keras_pickle payload"
"""How every damage message starts."""

FORMAT_MARKER = b"keras_pickle"
"""What every payload's stream spells twice near its start: the reconstructor's module and the header's ``format``."""

HEAD_BYTES = 1 << 16
"""How much of a stream's start :func:`stream_damage` reads: the outermost payload's header lies within."""

_CHECKSUM_TEXT = re.compile(r"(?:xxh3_64\+header|xxh3_64):[0-9a-f]{16}")
# A checksum in a stream's bytes, one byte of it (or of the "checksum" key) changed: at least one of
# these disjoint parts of `"checksum": "xxh3_64+header:<16 hex digits>"` is intact.
_CHECKSUM_BYTES = re.compile(rb"xxh3_64|header:[0-9a-f]{16}|checksum[\s\S]{1,16}?:[0-9a-f]{16}")

_WRITTEN_GLOBALS = (
    "keras_pickle._format.restore",
    "keras_pickle._format.part_of",
    "keras_pickle._format.registered",
    "keras_pickle._format.defined_here",
    "keras_pickle._format.by_value",
    "keras_pickle._allow.restore_with_state",
    "keras_pickle._allow.restore_callback",
    "_codecs.encode",  # how protocols 0-2 spell bytes (with the codec "latin1")
)


def carried_checksum(header: Any) -> str | None:
    """The checksum ``header`` carries, read from a header that may be damaged; None if it carries none.

    Its ``"checksum"`` field when that is a string (whatever its algorithm now reads); else,
    when that key itself was damaged, a string field that reads as a checksum.
    """
    if not isinstance(header, dict):
        return None
    value = header.get("checksum")
    if isinstance(value, str):
        return shorten(value, 80)
    for value in header.values():
        if isinstance(value, str) and len(value) < 80 and _CHECKSUM_TEXT.fullmatch(value):
            return value
    return None


def recomputed(header: dict, body: Any) -> str | None:
    """The checksum of ``header`` and ``body`` as they are now, with the algorithm the header names;
    None when it cannot be computed cheaply (a body too malformed to feed, an unknown algorithm).

    For bodies that failed the schema's checks: nothing is assumed of them.
    """
    expected = header.get("checksum") if isinstance(header, dict) else None
    if not (isinstance(expected, str) and isinstance(body, dict)):
        return None
    algorithm = checksum_algorithm(expected)
    if algorithm not in CHECKSUM_ALGORITHMS or not checksummable(header, body):
        return None
    try:
        return content_checksum(header, body, algorithm)
    except Exception:  # a value the guard let through that the checksum cannot feed: not computable
        return None


def damaged(
    detail: str | None, *, checksum: str | None, computed: str | None = None, cause: BaseException | None = None
) -> KerasUnpicklingError:
    """The error for a payload found damaged: ``detail`` says what was found (no final period; None:
    only that the content does not match the checksum).

    ``checksum``: the checksum the payload carries (:func:`carried_checksum`), None if it carries
    none; ``computed``: the checksum of its content as it is now, when that could be computed. A
    :class:`~keras_pickle.ChecksumMismatchError` unless ``computed`` equals ``checksum`` (the damage is
    where the checksum does not reach, a field's name) or there is no checksum.
    """
    said = f"{PREFIX}: {detail}" if detail else PREFIX
    if checksum is None:
        return KerasUnpicklingError(
            f"{said}. It carries no checksum; keras_pickle.dumps(..., checksum=True) detects damage wherever it lands.",
            original_error=cause,
        )
    if computed == checksum:
        return KerasUnpicklingError(
            f"{said}. Its checksum ({checksum}) still matches: the damage lies where the checksum does not reach "
            "(it covers the header's and body's values, not the names of the body's fields). "
            "Write it again from the original object.",
            original_error=cause,
        )
    found = f"{computed} computed" if computed else "none computable from content this malformed"
    return ChecksumMismatchError(
        f"{said}{'; ' if detail else ': '}its content does not match its checksum ({checksum} in the header, {found}); "
        "it was changed or damaged after it was written. Write it again from the original object.",
        expected=checksum,
        computed=computed,
        original_error=cause,
    )


def stream_damage(head: bytes, what: str, error: BaseException) -> KerasUnpicklingError | None:
    """The error for a stream whose unpickling failed with ``error``, when the failure is damage; else None.

    A :class:`~keras_pickle.ChecksumMismatchError` when the stream shows a checksum; else a
    :class:`~keras_pickle.NotAPayloadError` (what such failures always were) that says the
    payload is damaged. A refusal of safe mode stays an :class:`~keras_pickle.UnsafePayloadError`
    (with its ``what``), whose message says the same.

    Damage: the stream's first bytes (``head``, at least :data:`HEAD_BYTES` of them when the stream
    has as many) show a keras_pickle payload, and ``error`` is one a damaged stream raises: a
    malformed opcode or argument, a string that does not decode, a memo entry missing, a global one
    character away from one keras_pickle writes, a dict key or ``BUILD`` that keras_pickle never
    writes. Not a module or attribute the loading process lacks (ImportError, "Can't get
    attribute"), nor any other refusal of safe mode. ``what`` names the data ("the file 'x.pkl'").

    A payload's stream spells :data:`FORMAT_MARKER` twice near its start, so one damaged byte leaves
    one; its checksum (``"checksum": "xxh3_64+header:<hex>"``) is recognised with any one byte changed.
    """
    head = bytes(head[:HEAD_BYTES])
    if FORMAT_MARKER not in head or not _is_damage(error):
        return None
    match = _CHECKSUM_BYTES.search(head)
    checksum = None
    if match is not None:
        text = _CHECKSUM_TEXT.search(head.decode("latin-1"))
        checksum = text.group(0) if text else "a checksum, itself damaged,"
    if isinstance(error, UnsafePayloadError):
        near = near_written_global(error.what)
        if near:
            found = f"its stream names {shorten(error.what, 80)} where keras_pickle writes {near}"
        else:
            found = f"its stream holds what keras_pickle never writes ({shorten(str(error), 200)})"
    elif isinstance(error, NotAPayloadError):  # the reader's own words: "<what> is not a well-formed pickle (...)"
        found = shorten(str(error).removeprefix("Not a keras_pickle payload: ").rstrip("."), 300)
    else:
        found = f"{what} could not be unpickled ({type(error).__name__}: {shorten(str(error), 200)})"
    if isinstance(error, UnsafePayloadError):
        # Safe mode's refusal stays one (callers audit what it refused); its message says the damage.
        said = damaged(found, checksum=checksum, cause=error) if checksum else None
        refusal = UnsafePayloadError(
            str(said) if said else f"{PREFIX}: {found}. It carries no checksum.", what=error.what
        )
        refusal.original_error = error
        return refusal
    if checksum is None:  # as before, a stream that does not read as a payload: now also said to be damaged
        return NotAPayloadError(
            f"{PREFIX}: {found}. It carries no checksum; keras_pickle.dumps(..., checksum=True) detects "
            "damage wherever it lands.",
            found=what,
            original_error=error,
        )
    return damaged(found, checksum=checksum, cause=error)


def _is_damage(error: BaseException) -> bool:
    """Whether an unpickler's ``error`` is one a damaged stream raises (see :func:`stream_damage`)."""
    if isinstance(error, UnsafePayloadError):
        # "_codecs.encode": refused for its codec argument, which keras_pickle always writes as "latin1"
        return error.what in ("dict key", "BUILD", "_codecs.encode") or near_written_global(error.what) is not None
    if isinstance(error, NotAPayloadError):
        return True  # the stream is malformed, or unpickles to no payload: its head shows one
    if isinstance(error, KerasPickleError):
        return False  # a reconstructor's own verdict, made after the stream was read
    if isinstance(error, ImportError) or (isinstance(error, AttributeError) and "Can't get attribute" in str(error)):
        return False  # the loading process lacks a module or a class (outside safe mode)
    return isinstance(error, Exception)


def near_written_global(dotted: Any) -> str | None:
    """The global keras_pickle writes (a reconstructor, ``_codecs.encode``) that ``dotted`` (``module.name``,
    as a refusal names it) spells with one byte changed, else None.

    One character differs, or the name is followed by what a text protocol's damaged line end
    let in (``keras_pickle._format.restore\x0bp0``). A stream that names such a global is a
    payload with a damaged name in it.
    """
    if not isinstance(dotted, str):
        return None
    for known in _WRITTEN_GLOBALS:
        start = dotted[: len(known)]
        if len(start) < len(known) or (start == known and len(dotted) == len(known)):
            continue
        if start == known and not (dotted[len(known)].isalnum() or dotted[len(known)] == "_"):
            return known
        if sum(a != b for a, b in zip(start, known)) == 1:
            return known
    return None
