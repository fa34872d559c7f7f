"""Where a config makes Keras call something with arguments the payload chose, and what Keras decodes
or runs from a config's values, computed on the decoded config alone. No Keras import.

:func:`walk`: every dict and string of a config with its role, :data:`~.tables.ARGUMENT_ROLE` inside a
Functional node's call arguments and a loss or metric wrapper's ``fn`` beside extra keyword arguments.
:func:`value_refusal`: a node Keras would turn into an allocation larger than what the payload carries
(``__numpy__``, ``__tensor__``), a call node Keras would run eagerly at load (no symbolic input among its
arguments), or one it would look up by a name safe mode does not see (a ``class_name`` that is not a string).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._wire import config_walk
from .._wire.reprs import bounded_repr
from .tables import ARGUMENT_ROLE, KERAS_ROLE

KERAS_TENSOR = "__keras_tensor__"

SPECIAL_VALUES = frozenset(
    {KERAS_TENSOR, "__tensor__", "__numpy__", "__bytes__", "__ellipsis__", "__slice__", "__typespec__"}
)
"""The ``class_name`` of Keras's special config objects: values Keras decodes, never classes it looks up."""

WRAPPER_KEYS = frozenset({"fn", "name", "reduction", "dtype"})
"""What a loss or metric wrapper (``LossFunctionWrapper``, ``MeanMetricWrapper``) passes nothing of to its
``fn``: any other key of its config is a keyword argument the payload chose for ``fn``."""

ALLOCATION_FACTOR = 16
"""A decoded value may hold at most this many bytes per byte of the JSON that spells it (complex128 zeros,
``"0,"``, take 8), plus :data:`ALLOCATION_SLACK`."""

ALLOCATION_SLACK = 4096

PLAIN_KINDS = frozenset("biufcSU")
"""numpy dtype kinds a ``__numpy__`` value may have: booleans, numbers, byte and text strings."""

KERAS_DTYPE_SIZES = {
    "bool": 1, "int4": 1, "uint4": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4,
    "float64": 8, "complex64": 8, "complex128": 16, "string": 1,
}  # fmt: skip
"""Keras's dtype names and their item sizes: what a ``__tensor__`` may declare (a ``string`` tensor holds
the strings the payload spells)."""


def walk(config: Any) -> Iterator[tuple[dict | str, str]]:
    """Every dict and every string of ``config``, depth first in document order, each with its role:
    :data:`~.tables.ARGUMENT_ROLE` inside a Functional node's call arguments (``inbound_nodes``' ``args`` and
    ``kwargs``, the keyword arguments of the legacy list form) and a config's ``fn`` whose other keys are not
    all :data:`WRAPPER_KEYS`; :data:`~.tables.KERAS_ROLE` elsewhere. Strings count: Keras's deserializer turns
    a string equal to a custom or registered object's name into that object, at any depth it reaches.
    Iterative: a config nested a million deep costs memory, not the C stack."""
    stack: list[tuple[Any, str]] = [(config, KERAS_ROLE)]
    while stack:
        value, role = stack.pop()
        if isinstance(value, str):
            yield value, role
        elif isinstance(value, (list, tuple)):
            stack.extend((item, role) for item in reversed(value))
        elif isinstance(value, _Calls):
            stack.extend((argument, ARGUMENT_ROLE) for argument in reversed(value.arguments()))
        elif isinstance(value, dict):
            yield value, role
            children = []
            for key, child in value.items():
                if key == "inbound_nodes" and isinstance(child, list):
                    children.append((_Calls(child), role))
                elif key == "fn" and not set(value) <= WRAPPER_KEYS:
                    children.append((child, ARGUMENT_ROLE))
                else:
                    children.append((child, role))
            stack.extend(reversed(children))


class _Calls:
    """A node's ``inbound_nodes``: what Keras calls it with."""

    def __init__(self, calls: list):
        self.calls = calls

    def arguments(self) -> list:
        found: list = []
        for call in self.calls:
            if isinstance(call, dict):
                found += [call.get("args"), call.get("kwargs")]
            elif isinstance(call, list):
                found += [entry[3] for entry in call if isinstance(entry, list) and len(entry) > 3]
        return found


def value_refusal(node: dict) -> str | None:
    """Why safe mode refuses what Keras would decode or run from ``node`` itself, whatever its class; ``None``
    if nothing. The text follows "Safe mode refused "."""
    if "class_name" in node and "config" in node and not isinstance(node["class_name"], str):
        return (
            f"a node whose class_name is {bounded_repr(node['class_name'])}, not a string: Keras would look the "
            "object up by its registered_name, and Keras never writes one"
        )
    inbound = node.get("inbound_nodes")
    if isinstance(inbound, list):
        for call in inbound:
            if isinstance(call, dict) and not _holds_keras_tensor(call):
                return (
                    f"a call of {bounded_repr(config_walk.layer_name(node))} with no symbolic input among its "
                    "arguments: Keras would run it on the payload's values while loading, and Keras itself never "
                    "writes such a call"
                )
    class_name = node.get("class_name")
    if class_name in ("__numpy__", "__tensor__"):
        return _allocation_refusal(class_name, node.get("config"))
    return None


def _holds_keras_tensor(call: dict) -> bool:
    arguments = [call.get("args"), call.get("kwargs")]
    return any(inner.get("class_name") == KERAS_TENSOR for inner in config_walk.iter_nodes(arguments))


def _allocation_refusal(class_name: str, inner: Any) -> str | None:
    if not isinstance(inner, dict):
        return None  # Keras fails on it before it allocates
    value, dtype = inner.get("value"), inner.get("dtype")
    if class_name == "__numpy__":
        itemsize = _numpy_itemsize(dtype)
    else:
        itemsize = KERAS_DTYPE_SIZES.get(dtype) if isinstance(dtype, str) else None
    if itemsize is None:
        return f"a {class_name} value of dtype {bounded_repr(dtype)}: only plain dtypes are decoded in safe mode"
    spelt = len(json.dumps(value))
    needed = itemsize * max(_leaves(value), 1)
    if needed > ALLOCATION_FACTOR * spelt + ALLOCATION_SLACK:
        return (
            f"a {class_name} value of dtype {bounded_repr(dtype)} that would take {needed} bytes from {spelt} bytes "
            "of config: safe mode decodes a value only where its size is proportional to what the payload carries"
        )
    return None


PLAIN_DTYPE_SPELLING = re.compile(r"[<>|=]?[A-Za-z?]+[0-9]{0,10}")
"""How a plain dtype is spelt (``float32``, ``<f4``, ``S12``): anything else (a shape, fields) is never parsed."""


def _numpy_itemsize(dtype: Any) -> int | None:
    if not isinstance(dtype, str) or not PLAIN_DTYPE_SPELLING.fullmatch(dtype):
        return None
    try:
        parsed = np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError):
        return None
    if parsed.kind not in PLAIN_KINDS or parsed.fields is not None or parsed.subdtype is not None:
        return None
    return parsed.itemsize


def _leaves(value: Any) -> int:
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            count += 1
    return count
