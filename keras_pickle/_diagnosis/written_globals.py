"""The globals keras_pickle writes, and what one damaged byte makes of them in a stream.

A global a stream names that no pickler writes, but that is one byte away from a global keras_pickle
writes (:func:`near_written_global`) or is what a damaged opcode reads out of a payload's stream
(:func:`garbled_global`), shows a damaged payload, not a foreign one. The reconstructors' paths and the
payload's field names are read from the format (:mod:`keras_pickle._wire.schema`). Nothing here imports Keras.
"""

from __future__ import annotations

import keyword
from typing import Any

from .._safe_mode.rules import CODECS_ENCODE
from .._wire import schema

WRITTEN_GLOBALS = tuple(".".join(path) for path in (*schema.RECONSTRUCTORS, CODECS_ENCODE))
"""Every global a keras_pickle stream names: the reconstructors, and ``_codecs.encode`` (how protocols 0-2
spell bytes, with the codec "latin1")."""

_WRITTEN_NAMES = {known.rpartition(".")[2]: known.rpartition(".")[0] for known in WRITTEN_GLOBALS}
_WRITTEN_MODULES = frozenset(_WRITTEN_NAMES.values())
_CURRENT_LAYER = {"kind": schema.KIND_LAYER, "format_version": schema.FORMAT_VERSION}
_PAYLOAD_FIELDS = schema.HEADER_FIELDS | schema.body_fields(_CURRENT_LAYER)
"""The names of a payload's header and body fields: strings a damaged stream can hand a global opcode."""


def near_written_global(dotted: Any) -> str | None:
    """The global keras_pickle writes (a reconstructor, ``_codecs.encode``) that ``dotted`` (``module.name``,
    as a refusal names it) spells with one byte changed, else None.

    One character differs, or the name is followed by what a text protocol's damaged line end
    let in (``keras_pickle._format.restore\x0bp0``). A stream that names such a global is a
    payload with a damaged name in it.
    """
    if not isinstance(dotted, str):
        return None
    for known in WRITTEN_GLOBALS:
        start = dotted[: len(known)]
        if len(start) < len(known) or (start == known and len(dotted) == len(known)):
            continue
        if start == known and not (dotted[len(known)].isalnum() or dotted[len(known)] == "_"):
            return known
        if sum(a != b for a, b in zip(start, known)) == 1:
            return known
    return None


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
