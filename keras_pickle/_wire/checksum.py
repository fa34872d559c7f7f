"""The optional xxh3-64 checksum of a payload's content."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import xxhash

from ..errors import KerasUnpicklingError
from .layout import SECTIONS, Section, loose_entry_lists
from .refs import qualified_name
from .reprs import bounded_repr

CHECKSUM_ALGORITHM = "xxh3_64+header"
"""The checksum keras_pickle writes: xxh3-64 over the header's other fields, the body,
and the qualified name of every custom object (see :func:`content_checksum`)."""
BODY_ONLY_CHECKSUM = "xxh3_64"
"""The checksum of format version 1: the body, custom objects' keys only. Still verified."""
CHECKSUM_ALGORITHMS = (CHECKSUM_ALGORITHM, BODY_ONLY_CHECKSUM)

# The header fields a checksum covers: all but the checksum itself (and "dialect", where there is one).
CHECKSUMMED_HEADER_FIELDS = (
    "format",
    "format_version",
    "keras_version",
    "backend",
    "class",
    "kind",
    "n_variables",
    "weight_bytes",
)


def checksum_algorithm(checksum: str) -> str:
    return checksum.partition(":")[0]


def content_checksum(
    header: dict,
    body: dict,
    algorithm: str = CHECKSUM_ALGORITHM,
    custom_object_names: dict[str, str] | None = None,
    constructed_names: list[str] | None = None,
) -> str:
    """``"<algorithm>:<hex>"``: xxh3-64 of the payload's content, as ``algorithm`` defines it.

    :data:`CHECKSUM_ALGORITHM` covers the header's fields (but the checksum),
    everything in the body, and for each custom object its key and the
    qualified name it resolves to (``custom_object_names``; by default read
    from the body's objects, or from safe mode's inert references). Not the
    custom objects' code; of recorded constructor calls (since format version 3), the qualified
    name of each class (``constructed_names``; by default read from the body), not the
    arguments. :data:`BODY_ONLY_CHECKSUM` covers the body, and only
    the custom objects' keys. The caller has validated ``header`` and
    ``body`` (the schema's structure checks): every value fed here is plain
    and bounded.
    """
    if algorithm not in CHECKSUM_ALGORITHMS:
        raise KerasUnpicklingError(f"Unknown checksum algorithm {bounded_repr(algorithm)}.")
    digest = xxhash.xxh3_64()
    feed = _feeder(digest)
    if algorithm == CHECKSUM_ALGORITHM:
        # Format version 4 added "dialect"; earlier checksums never fed it.
        fields = CHECKSUMMED_HEADER_FIELDS + (("dialect",) if "dialect" in header else ())
        feed("header", *[(key, header.get(key)) for key in fields])
        if custom_object_names is None:
            custom_object_names = {key: qualified_name(v) for key, v in body.get("custom_objects", {}).items()}
        feed("custom_object_names", sorted(custom_object_names.items()))
    if constructed_names is None:
        constructed_names = [qualified_name(entry[0]) for entry in body.get("constructed", ())]
    _feed_body(feed, body, constructed_names)
    return f"{algorithm}:{digest.hexdigest()}"


def checksummable(header: dict, body: dict) -> bool:
    """Whether every value :func:`content_checksum` feeds (as its repr) is plain, so that computing it is cheap.

    For a header and body that may not have passed the schema's checks (a damaged payload, a
    payload the inspector reads): checks the header's fields, the body's scalars, every entry's
    key, dtype, shape and data, every asset's path and content, the custom objects' keys and
    the shape of the ``constructed`` list. Shared nested values make a repr exponential; they
    are refused here rather than fed. True does not mean the payload is well-formed.
    """
    if not all(isinstance(key, str) and _plain(value) for key, value in header.items()):
        return False
    if not all(_plain(body.get(key)) for key in ("config", "optimizer_built", "dtype_policy")):
        return False
    custom = body.get("custom_objects", {})
    if not (isinstance(custom, dict) and all(isinstance(key, str) for key in custom)):
        return False
    constructed = body.get("constructed", [])
    if not (isinstance(constructed, (list, tuple)) and all(isinstance(c, tuple) and c for c in constructed)):
        return False
    optimizers = body.get("compile_objects", {})
    if not (isinstance(optimizers, dict) and all(_plain(k) and _plain(v) for k, v in optimizers.items())):
        return False
    for section in SECTIONS:
        records = body.get(section.key, [])
        if not isinstance(records, list):
            return False
        if section.record and not all(_plain_record(section, record) for record in records):
            return False
    return all(
        isinstance(entries, list)
        and all(
            isinstance(entry, tuple) and len(entry) == 4 and all(_plain(part) for part in entry) for entry in entries
        )
        for _section, entries in loose_entry_lists(body)
    )


def _plain_record(section: Section, record: Any) -> bool:
    """A record of the section's length whose fields, but its entries, are plain or lists of plain items."""
    if not (isinstance(record, tuple) and len(record) == len(section.record)):
        return False
    return all(
        _plain(value) or (isinstance(value, list) and all(_plain(item) for item in value))
        for field, value in zip(section.record, record)
        if field.name != section.entries
    )


BUFFERS = (bytes, bytearray, memoryview, pickle.PickleBuffer, np.ndarray)
"""What a variable's data may be: a numpy array where a pickler stores arrays its own way (joblib)."""


def _plain(value: Any, depth: int = 1) -> bool:
    """A scalar (an int of at most 64 bits), or a tuple or list of at most 64 of them: its repr is cheap."""
    if value is None or isinstance(value, (bool, float, str) + BUFFERS):
        return True
    if isinstance(value, int):
        return value.bit_length() <= 64
    if isinstance(value, (tuple, list)) and depth > 0 and len(value) <= 64:
        return all(_plain(item, depth - 1) for item in value)
    return False


def _feeder(digest: Any) -> Callable[..., None]:
    """``feed(*parts)``: each part into ``digest``, length-prefixed (buffers raw, anything else as its repr)."""

    def feed(*parts: object) -> None:
        for part in parts:
            if isinstance(part, BUFFERS):
                view = memoryview(part)
                digest.update(len(view.cast("B")).to_bytes(8, "little"))
                digest.update(view)
            else:
                text = repr(part).encode()
                digest.update(len(text).to_bytes(8, "little"))
                digest.update(text)

    return feed


def _feed_body(feed: Callable[..., None], body: dict, constructed_names: list[str]) -> None:
    """Everything in the body but the custom objects' values (their keys are fed), in the checksum's order."""
    feed(body.get("config", ""), body.get("optimizer_built"))
    if "dtype_policy" in body:  # absent from format version 1
        feed("dtype_policy", body["dtype_policy"])
    sections = {section.key: section for section in SECTIONS}
    for key in ("variables", "optimizer_variables", "layer_states"):
        _feed_section(feed, sections[key], body.get(key, ()))
    feed("custom_objects", sorted(body.get("custom_objects", {})))
    if "metric_variables" not in body:  # format versions 1 and 2 end here
        return
    for key in ("metric_variables", "held_optimizers"):
        _feed_section(feed, sections[key], body[key])
    feed("compile_objects", sorted(body["compile_objects"].items()))
    # Recorded constructor and compile() arguments are objects of the pickle stream (a model among
    # them is a payload of its own, with its own checksum): only the constructed classes are fed.
    feed("constructed", constructed_names)


def _feed_section(feed: Callable[..., None], section: Section, value: Any) -> None:
    """One array section: its key; then each entry, or, for each record, its plain fields at once, its
    entries, and each item of its list fields (a layer's assets)."""
    feed(section.key)
    if not section.record:
        _feed_entries(feed, value)
        return
    for record in value:
        fields = list(zip(section.record, record))
        feed(*[v for field, v in fields if field.name != section.entries and field.item_problem is None])
        _feed_entries(feed, record[section.entries_index])
        for field, items in fields:
            if field.item_problem is not None:
                for item in items:
                    feed(*item)


def _feed_entries(feed: Callable[..., None], entries: Any) -> None:
    for key, dtype, shape, data in entries:
        feed(key, dtype, shape, data)
