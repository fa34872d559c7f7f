"""Damage in a stream: a failure to unpickle it, or a verdict on what it handed over, told from data that is none.

A damaged byte in a keras_pickle payload's stream makes the unpickler fail (a malformed opcode, a memo
entry missing, a global one byte off), or hands the reconstructor or safe mode what keras_pickle never
writes. Where the stream's first bytes still show a keras_pickle payload, :func:`stream_damage` and
:func:`verdict_damage` say so, as every damage message does (:mod:`.mismatch`): with the checksum the
stream still shows (:func:`head_checksum`), a :class:`~keras_pickle.ChecksumMismatchError`. They read
the errors' fields (``what``, ``lead``, ``detail``), never their text. Nothing here imports Keras.
"""

from __future__ import annotations

from .._wire.reprs import shorten
from ..errors import (
    CORRUPT,
    REFUSED_GLOBAL,
    KerasPickleError,
    KerasUnpicklingError,
    NotAPayloadError,
    UnsafePayloadError,
)
from .mismatch import CHECKSUM_BYTES, CHECKSUM_TEXT, DAMAGED_CHECKSUM, PREFIX, damaged
from .written_globals import garbled_global, near_written_global

FORMAT_MARKER = b"keras_pickle"
"""What every payload's stream spells twice near its start: the reconstructor's module and the header's ``format``."""

HEAD_BYTES = 1 << 16
"""How much of a stream's start :func:`stream_damage` reads: the outermost payload's header lies within."""


def stream_damage(
    head: bytes, what: str, error: BaseException, *, requested: str | None = None
) -> KerasUnpicklingError | None:
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
    attribute"), unless the global the stream asked for (``requested``, ``module.name``, where the
    unpickler recorded it) is one a damaged byte makes of a global keras_pickle writes; nor any other
    refusal of safe mode. ``what`` names the data ("the file 'x.pkl'").

    A payload's stream spells :data:`FORMAT_MARKER` twice near its start, so one damaged byte leaves
    one; its checksum (``"checksum": "xxh3_64+header:<hex>"``) is recognised with any one byte changed.
    """
    head = bytes(head[:HEAD_BYTES])
    if FORMAT_MARKER not in head or not _is_damage(error, requested):
        return None
    checksum = head_checksum(head)
    if isinstance(error, UnsafePayloadError):
        near = near_written_global(error.what)
        if near:
            found = f"its stream names {shorten(error.what, 80)} where keras_pickle writes {near}"
        else:
            found = f"its stream holds what keras_pickle never writes ({shorten(str(error), 200)})"
    elif isinstance(error, NotAPayloadError):  # the reader's own words: "<what> is not a well-formed pickle (...)"
        found = shorten(error.detail, 300)
    elif requested is not None and _is_missing(error):
        near = near_written_global(requested)
        written = f" where keras_pickle writes {near}" if near else ", a name keras_pickle never writes"
        found = f"its stream names {shorten(requested, 80)}{written}"
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


def head_checksum(head: bytes) -> str | None:
    """The checksum a stream's first bytes (``head``) show a keras_pickle payload carries, read from its
    bytes (:data:`DAMAGED_CHECKSUM` where one byte of it changed); None where they show none."""
    head = bytes(head[:HEAD_BYTES])
    if FORMAT_MARKER not in head or CHECKSUM_BYTES.search(head) is None:
        return None
    text = CHECKSUM_TEXT.search(head.decode("latin-1"))
    return text.group(0) if text else DAMAGED_CHECKSUM


def verdict_damage(head: bytes, error: BaseException) -> KerasUnpicklingError | None:
    """The error for a schema check's verdict (``error``, whose ``lead`` is :data:`~keras_pickle.errors.CORRUPT`,
    raised while the stream was read) on a payload whose header no longer shows the checksum its stream's
    first bytes (``head``) still do: a damaged length or opcode took the checksum out of the header
    dict (``"its header lacks checksum"``). A :class:`~keras_pickle.ChecksumMismatchError`; else None.
    """
    if type(error) is not KerasUnpicklingError or error.lead != CORRUPT:
        return None
    checksum = head_checksum(head)
    if checksum is None:
        return None
    return damaged(shorten(error.detail, 300), checksum=checksum, cause=error)


def _is_missing(error: BaseException) -> bool:
    """Whether ``error`` says the loading process lacks a module or a class (outside safe mode)."""
    return isinstance(error, ImportError) or (isinstance(error, AttributeError) and "Can't get attribute" in str(error))


def _is_damage(error: BaseException, requested: str | None = None) -> bool:
    """Whether an unpickler's ``error`` is one a damaged stream raises (see :func:`stream_damage`)."""
    if isinstance(error, UnsafePayloadError):
        # "_codecs.encode": refused for its codec argument, which keras_pickle always writes as "latin1"
        # "persistent_load": a persistent id, which no keras_pickle payload holds, is what one damaged opcode
        # byte makes of a memo store (BINPUT "q" -> BINPERSID "Q") or of a string (BINUNICODE "X" -> PERSID "P").
        if error.what in ("dict key", "BUILD", "_codecs.encode", "persistent_load"):
            return True
        named = error.lead == REFUSED_GLOBAL  # a global the stream named, not a Lambda, a dtype...
        return near_written_global(error.what) is not None or (named and garbled_global(error.what))
    if isinstance(error, NotAPayloadError):
        return True  # the stream is malformed, or unpickles to no payload: its head shows one
    if isinstance(error, KerasPickleError):
        return False  # a reconstructor's own verdict, made after the stream was read
    if _is_missing(error):  # the loading process lacks a module or a class (outside safe mode)...
        # ...unless what the stream asked for is a written global with a damaged byte
        return requested is not None and (near_written_global(requested) is not None or garbled_global(requested))
    return isinstance(error, Exception)
