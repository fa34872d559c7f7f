"""The hard limits keras_pickle enforces on untrusted input, stated up front.

Two sets, both module attributes that a caller may raise (``keras_pickle.limits.MAX_LAYERS =
...``) when a real payload needs it; each refusal is a :class:`~keras_pickle.ResourceLimitError`
naming the limit it hit.

*Loading* checks the header and the body against the first set before the reconstructor
decodes a single array or asks Keras to build anything. *Inspecting* (``keras_pickle.inspect``,
``keras-pickle inspect``) reads the stream with the second set, which bounds what hostile input
can cost by what the inspector keeps, not by the size it decompresses to.

This module imports nothing: reading the limits costs nothing.
"""

from __future__ import annotations

from .errors import ResourceLimitError

# --------------------------------------------------------------------------
# Loading a payload
# --------------------------------------------------------------------------

MAX_VARIABLES = 1_000_000
"""Array entries in one payload (weights, optimizer state and layer state together)."""
MAX_WEIGHT_BYTES = 1 << 38
"""Bytes of array data in one payload (256 GiB)."""
MAX_ARRAY_BYTES = MAX_WEIGHT_BYTES
"""Bytes of one array entry (safe mode also bounds numpy ``_reconstruct`` by it)."""
MAX_ARRAY_RANK = 64
"""Dimensions of one array entry (numpy's own maximum)."""
MAX_LAYERS = 100_000
"""Layer configs one payload's config may list (nested models included)."""
MAX_CONFIG_BYTES = 1 << 27
"""Characters of the config's JSON text (128 MiB; ResNet50's is 169 kB, about 1 kB per layer)."""
MAX_CONFIG_OBJECTS = 2_000_000
"""``{`` characters in the config's JSON text, an upper bound on the objects parsing it creates
(ResNet50: 2,211). Checked before parsing, which bounds its memory to a few hundred MiB."""
MAX_CONFIG_DEPTH = 256
"""Levels of nesting in a config's JSON (lists and objects): ResNet50's has 12, a nested model adds
about 6. Deeper JSON would exhaust the stack of Keras's recursive deserializer."""
MAX_VALUE_NODES = 1_000_000
"""Values in the stream's objects that keras_pickle walks (recorded constructor and ``compile()``
arguments, the custom-object table), each shared reference counted every time it is reached:
what a copy of them would hold. Arrays count as one value."""
MAX_VALUE_DEPTH = 100
"""Levels of nesting in those objects; a reference cycle is refused by this limit."""

# --------------------------------------------------------------------------
# Inspecting a payload
# --------------------------------------------------------------------------

MAX_DECOMPRESSED_BYTES = 1 << 34
"""Bytes read from a compressed file (joblib.dump(..., compress=...)) in all: 16 GiB."""
MAX_OPCODES = 1 << 21
"""Opcodes evaluated: 2 Mi (a keras_pickle payload has about 14 per variable; each opcode may keep
a value of up to about 200 bytes alive)."""
MAX_HELD_BYTES = 1 << 28
"""Bytes of opcode arguments held beyond the size of the input itself: 256 MiB.

Reading uncompressed input never reaches it; a compressed file may hold this
much more than its compressed size (a protocol 0-2 payload's weights are
strings, always held; a protocol 3+ payload's weights are held only to verify
a checksum, and past this limit the checksum is reported as not verified)."""
MAX_CONFIG_CHARS = 1 << 24
"""Characters of a config that is parsed as JSON: 16 Mi (ResNet50's has 169 k; parsing may take
about 20 bytes a character). A longer one is reported, not parsed."""


def check_limit(limit_name: str, value: int, what: str) -> None:
    """Raise :class:`ResourceLimitError` when ``value`` exceeds the limit ``limit_name`` (read now)."""
    limit = globals()[limit_name]
    if value > limit:
        shown = human_bytes(limit) if limit_name.endswith("BYTES") else f"{limit:,}"
        raise ResourceLimitError(
            f"Refusing this payload before allocating anything: {what}, more than the limit "
            f"of {shown} (keras_pickle.limits.{limit_name}).",
            limit_name=limit_name,
            limit=limit,
            value=value,
        )


def human_bytes(n: int) -> str:
    """``n`` in binary units, ``"1.5 MiB"``; an absurd size by its power of two."""
    if n < 1024:
        return f"{n} bytes"
    if n >= 1 << 60:
        return f"about 2^{n.bit_length() - 1} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024
        if n < 1024 or unit == "PiB":
            return f"{n:,.1f} {unit}"
    raise AssertionError("unreachable")
