"""The optional xxh3-64 checksum of a payload's content."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import xxhash

from ..errors import KerasUnpicklingError
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
    custom objects' code; of recorded constructor calls (format version 3), the qualified
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


def _feeder(digest: Any) -> Callable[..., None]:
    """``feed(*parts)``: each part into ``digest``, length-prefixed (buffers raw, anything else as its repr)."""

    def feed(*parts: object) -> None:
        for part in parts:
            if isinstance(part, (bytes, bytearray, memoryview, pickle.PickleBuffer)):
                view = memoryview(part)
                digest.update(len(view.cast("B")).to_bytes(8, "little"))
                digest.update(view)
            else:
                text = repr(part).encode()
                digest.update(len(text).to_bytes(8, "little"))
                digest.update(text)

    return feed


def _feed_body(feed: Callable[..., None], body: dict, constructed_names: list[str]) -> None:
    """Everything in the body but the custom objects' values (their keys are fed)."""
    feed(body.get("config", ""), body.get("optimizer_built"))
    if "dtype_policy" in body:  # absent from format version 1
        feed("dtype_policy", body["dtype_policy"])
    for section in ("variables", "optimizer_variables"):
        feed(section)
        for key, dtype, shape, data in body.get(section, ()):
            feed(key, dtype, shape, data)
    feed("layer_states")
    for index, own_variables, assets in body.get("layer_states", ()):
        feed(index)
        for key, dtype, shape, data in own_variables:
            feed(key, dtype, shape, data)
        for path, content in assets:
            feed(path, content)
    feed("custom_objects", sorted(body.get("custom_objects", {})))
    if "metric_variables" not in body:  # format versions 1 and 2 end here
        return
    feed("metric_variables")
    for key, dtype, shape, data in body["metric_variables"]:
        feed(key, dtype, shape, data)
    feed("held_optimizers")
    for path, config, built, targets, entries in body["held_optimizers"]:
        feed(path, config, built, targets)
        for key, dtype, shape, data in entries:
            feed(key, dtype, shape, data)
    feed("compile_objects", sorted(body["compile_objects"].items()))
    # Recorded constructor and compile() arguments are objects of the pickle stream (a model among
    # them is a payload of its own, with its own checksum): only the constructed classes are fed.
    feed("constructed", constructed_names)
