"""Bounding the values of a payload's stream that keras_pickle walks, before anything walks them.

Recorded constructor and ``compile()`` arguments and the custom-object table are objects of the
pickle stream, and a stream shares an object by its memo: a list holding the previous list twice,
40 levels deep, is a 3 kB stream and a tree of 2^40 nodes to whatever copies it. :func:`check_value`
walks a value as a tree (each shared reference counted every time it is reached, as a copy would
meet it) and stops at ``limits.MAX_VALUE_NODES`` nodes or ``limits.MAX_VALUE_DEPTH`` levels (a
reference cycle meets the latter): the walk costs at most the limit, whatever the stream says.
"""

from __future__ import annotations

from typing import Any

from .. import limits

_CONTAINERS = (list, tuple, dict, set, frozenset)


def check_value(value: Any, what: str) -> None:
    """Raise :class:`~keras_pickle.ResourceLimitError` when ``value``, walked as a tree, exceeds the limits."""
    max_nodes, max_depth = limits.MAX_VALUE_NODES, limits.MAX_VALUE_DEPTH
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            limits.check_limit("MAX_VALUE_NODES", nodes, f"{what} holds more values (shared references counted)")
        if not isinstance(item, _CONTAINERS):
            continue
        if depth >= max_depth:
            limits.check_limit("MAX_VALUE_DEPTH", depth + 1, f"{what} nests deeper (or holds itself)")
        children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)


def config_depth(config: Any) -> int:
    """How deep a decoded JSON config nests (lists and dicts), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(config, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest
