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

import keyword
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

DAMAGED_CHECKSUM = "a checksum, itself damaged,"
"""How a message names a checksum too damaged to read (``"... (a checksum, itself damaged, in the header ...)"``)."""

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

    Its ``"checksum"`` field when that is a string (whatever its algorithm now reads). Else, when
    that field or its key was damaged: a checksum found in the header's strings (a key or a value,
    in a string that a damaged length let swallow its neighbours, or a tuple one damaged opcode
    made), or, where nothing reads as one any more, :data:`DAMAGED_CHECKSUM` when the header still
    shows what is left of one (its algorithm's name, a ``"checksum"`` field that is neither a string
    nor None). A header whose ``"checksum"`` is None carries none.
    """
    if not isinstance(header, dict):
        return None
    value = header.get("checksum")
    if isinstance(value, str):
        return shorten(value, 80)
    if "checksum" in header and value is None:
        return None
    texts = list(_texts(header, budget=[64]))
    for text in texts:
        found = _CHECKSUM_TEXT.search(text)
        if found:
            return found.group(0)
    if value is not None or any(_CHECKSUM_BYTES.search(text.encode("latin-1", "replace")) for text in texts):
        return DAMAGED_CHECKSUM
    return None


def _texts(value: Any, *, budget: list[int], depth: int = 0):
    """The strings (bytes read as latin-1) among ``value``'s keys and values, a few levels and items deep."""
    if budget[0] <= 0 or depth > 3:
        return
    budget[0] -= 1
    if isinstance(value, str):
        yield value[: 1 << 16]
    elif isinstance(value, (bytes, bytearray)):
        yield bytes(value[: 1 << 16]).decode("latin-1")
    elif isinstance(value, dict):
        for key, item in list(value.items())[:32]:
            yield from _texts(key, budget=budget, depth=depth + 1)
            yield from _texts(item, budget=budget, depth=depth + 1)
    elif isinstance(value, (tuple, list)):
        for item in value[:32]:
            yield from _texts(item, budget=budget, depth=depth + 1)


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
        found = shorten(str(error).removeprefix("Not a keras_pickle payload: ").rstrip("."), 300)
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
    if FORMAT_MARKER not in head or _CHECKSUM_BYTES.search(head) is None:
        return None
    text = _CHECKSUM_TEXT.search(head.decode("latin-1"))
    return text.group(0) if text else DAMAGED_CHECKSUM


def verdict_damage(head: bytes, error: BaseException) -> KerasUnpicklingError | None:
    """The error for a schema check's verdict (``error``: "Corrupt keras_pickle payload: …", raised
    while the stream was read) on a payload whose header no longer shows the checksum its stream's
    first bytes (``head``) still do: a damaged length or opcode took the checksum out of the header
    dict (``"its header lacks checksum"``). A :class:`~keras_pickle.ChecksumMismatchError`; else None.
    """
    if type(error) is not KerasUnpicklingError or not str(error).startswith(_CORRUPT):
        return None
    checksum = head_checksum(head)
    if checksum is None:
        return None
    return damaged(shorten(str(error).removeprefix(_CORRUPT).rstrip("."), 300), checksum=checksum, cause=error)


_CORRUPT = "Corrupt keras_pickle payload: "


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
        named = str(error).startswith(f"Safe mode refused global {error.what}:")  # not a Lambda's, a dtype's...
        return near_written_global(error.what) is not None or (named and garbled_global(error.what))
    if isinstance(error, NotAPayloadError):
        return True  # the stream is malformed, or unpickles to no payload: its head shows one
    if isinstance(error, KerasPickleError):
        return False  # a reconstructor's own verdict, made after the stream was read
    if _is_missing(error):  # the loading process lacks a module or a class (outside safe mode)...
        # ...unless what the stream asked for is a written global with a damaged byte
        return requested is not None and (near_written_global(requested) is not None or garbled_global(requested))
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


_WRITTEN_NAMES = {known.rpartition(".")[2]: known.rpartition(".")[0] for known in _WRITTEN_GLOBALS}
_WRITTEN_MODULES = frozenset(_WRITTEN_NAMES.values())
_PAYLOAD_FIELDS = frozenset(
    ("format", "format_version", "dialect", "keras_version", "backend", "class", "kind", "n_variables")
    + ("weight_bytes", "checksum", "config", "variables", "optimizer_variables", "optimizer_built", "layer_states")
    + ("custom_objects", "dtype_policy", "metric_variables", "held_optimizers", "constructed", "compile_call")
    + ("compile_objects",)
)
"""The names of a payload's header and body fields: strings a damaged stream can hand a global opcode."""


def garbled_global(dotted: Any) -> bool:
    """Whether ``dotted`` (``module.name``, as a refusal names it) is no global any pickler writes, but
    what a damaged opcode makes of a keras_pickle payload's stream.

    * A part that is no Python identifier (or is a keyword): a global opcode's line end was damaged,
      so it read on into the stream (``keras_pickle._format.restoreJq…``, the header's bytes after
      ``J``), or a damaged opcode read a global from the middle of one, or a damaged memo reference
      handed ``STACK_GLOBAL`` two of the payload's strings (``dense/bias.<f4``).
    * A global keras_pickle writes, cut short or split by a line end a damaged byte made
      (``keras_pickle._format.resto``, ``_c.decs``), or its name under another module
      (``restore.restore``: a memo entry read twice; ``odecs.encode``: a line read from inside ``_codecs``).
    * A module or a name that is a payload's header or body field (``format.keras_pickle``,
      ``kind.layer``): two of its strings handed to ``STACK_GLOBAL`` by an opcode one damaged byte made.

    A global a newer keras_pickle may write (``keras_pickle._format.restore_v2``) is none of these.
    """
    if not isinstance(dotted, str) or not dotted:
        return False
    parts = dotted.split(".")
    if not all(part.isidentifier() and not keyword.iskeyword(part) for part in parts):
        return True
    module, _, name = dotted.rpartition(".")
    if any(len(dotted) == len(known) and sum(a != b for a, b in zip(dotted, known)) == 1 for known in _WRITTEN_MODULES):
        return True  # a written module, one byte of it made a line end: read as a module and a name
    written_module = _WRITTEN_NAMES.get(name)
    if written_module is not None and module != written_module:
        # not any module's function of that name (one the loading process lacks is its own error): a
        # written name where its module belongs, or the tail of its module cut by a misread opcode
        return module in _WRITTEN_NAMES or written_module.endswith(module)
    if any(module == of and known != name and known.startswith(name) for known, of in _WRITTEN_NAMES.items()):
        return True
    return module in _PAYLOAD_FIELDS or name in _PAYLOAD_FIELDS
