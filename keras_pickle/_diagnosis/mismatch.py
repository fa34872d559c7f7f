"""A payload's content against the checksum it carries: the evidence, and the error that reports damage.

keras_pickle writes every payload whole and well-formed, and a checksum (``checksum=True``) is
taken over that content. So when a payload that carries a checksum fails a structural check, it
no longer is what was checksummed: its content does not match its checksum, whether or not the
checksum can still be recomputed. Every reader reports that the same way, through
:func:`damaged`: a :class:`~keras_pickle.ChecksumMismatchError` (the payload carries a checksum)
or a :class:`~keras_pickle.KerasUnpicklingError` (it carries none) whose message starts with
:data:`PREFIX` and, with a checksum, says that the content does not match it.

The evidence is read from what a reader has at hand, damaged or not, and never trusted further: a
header dict (:func:`carried_checksum`), a header and body (:func:`recomputed`). The schema's checks
(:mod:`keras_pickle._wire.schema`) report through here, so nothing here imports the schema or Keras.
"""

from __future__ import annotations

import re
from typing import Any

from .._wire.checksum import CHECKSUM_ALGORITHMS, checksum_algorithm, checksummable, content_checksum
from .._wire.reprs import shorten
from ..errors import ChecksumMismatchError, KerasUnpicklingError

PREFIX = "Damaged keras_pickle payload"
"""How every damage message starts."""

DAMAGED_CHECKSUM = "a checksum, itself damaged,"
"""How a message names a checksum too damaged to read (``"... (a checksum, itself damaged, in the header ...)"``)."""

CHECKSUM_TEXT = re.compile(r"(?:xxh3_64\+header|xxh3_64):[0-9a-f]{16}")
"""A checksum as a header spells it."""
CHECKSUM_BYTES = re.compile(rb"xxh3_64|header:[0-9a-f]{16}|checksum[\s\S]{1,16}?:[0-9a-f]{16}")
"""A checksum in a stream's bytes, one byte of it (or of the ``"checksum"`` key) changed: at least one of
these disjoint parts of ``"checksum": "xxh3_64+header:<16 hex digits>"`` is intact."""


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
        found = CHECKSUM_TEXT.search(text)
        if found:
            return found.group(0)
    if value is not None or any(CHECKSUM_BYTES.search(text.encode("latin-1", "replace")) for text in texts):
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
