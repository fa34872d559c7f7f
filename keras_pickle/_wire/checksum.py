"""The optional xxh3-64 checksum of a payload's content."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
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
    states = body.get("layer_states", [])
    if not (isinstance(states, list) and all(isinstance(s, tuple) and len(s) == 3 for s in states)):
        return False
    held = body.get("held_optimizers", [])
    if not (isinstance(held, list) and all(isinstance(h, tuple) and len(h) == 5 for h in held)):
        return False
    if not all(_plain(h[0]) and _plain(h[1]) and _plain(h[2]) and _plain(h[3]) for h in held):
        return False
    optimizers = body.get("compile_objects", {})
    if not (isinstance(optimizers, dict) and all(_plain(k) and _plain(v) for k, v in optimizers.items())):
        return False
    sections = [body.get("variables", []), body.get("optimizer_variables", []), body.get("metric_variables", [])]
    sections += [s[1] for s in states] + [h[4] for h in held]
    for entries in sections:
        if not isinstance(entries, list):
            return False
        for entry in entries:
            if not (isinstance(entry, tuple) and len(entry) == 4 and all(_plain(part) for part in entry)):
                return False
    for index, _own, assets in states:
        if not (_plain(index) and isinstance(assets, list)):
            return False
        if not all(isinstance(a, tuple) and len(a) == 2 and _plain(a[0]) and _plain(a[1]) for a in assets):
            return False
    return True


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
