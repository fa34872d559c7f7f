"""Reading a decoded Keras config (plain JSON data): one walk, several questions.

Loading asks how many layers a config lists (a resource limit); collecting custom objects asks
which classes and functions it names; safe mode (:mod:`keras_pickle._safe_mode.config_judge`) asks
every node that names something, under every spelling; the inspector asks all of these without
Keras. Each question is a fold over :func:`iter_nodes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


def iter_nodes(config: Any, descend: Callable[[dict], bool] | None = None) -> Iterator[dict]:
    """Every dict in ``config``, depth first in document order; lists and tuples are searched.

    ``descend(node)`` False skips the values of ``node`` (the node itself is yielded).
    Iterative: a config nested a million deep costs memory, not the C stack.
    """
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            if descend is None or descend(node):
                stack.extend([value for value in reversed(node.values()) if type(value) not in JSON_SCALARS])
        elif isinstance(node, (list, tuple)):
            stack.extend([value for value in reversed(node) if type(value) not in JSON_SCALARS])


JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
"""JSON's scalar types: never a node, so never put on the walk's stack."""


def object_refs(config: Any) -> Iterator[dict]:
    """Every ``{"module", "class_name", ...}`` entry: the objects a config names."""
    return (node for node in iter_nodes(config) if "class_name" in node and "module" in node)


def keras_class_name(node: dict) -> str | None:
    """The class a ``keras*`` module's entry names, by its last dotted part (Keras resolves
    ``"keras"`` + ``"layers.Lambda"`` as ``keras.layers.Lambda``); ``None`` for another module."""
    class_name = node.get("class_name")
    if not (isinstance(class_name, str) and str(node.get("module", "")).startswith("keras")):
        return None
    return class_name.rpartition(".")[2]


def custom_object_key(ref: dict) -> Any:
    """The key Keras's deserializer looks ``ref`` up by in custom objects, before any name of its own:
    a function's name; a class's registered name (the class name when the entry has none)."""
    if ref.get("class_name") == "function":
        return ref.get("config")
    return ref.get("registered_name", ref.get("class_name"))


def named_nodes(config: Any) -> Iterator[dict]:
    """Every node that names a class or function to Keras: a dict whose ``class_name`` is a string,
    spelt with or without ``module`` or ``registered_name`` (Keras's legacy spelling has neither),
    at any depth. What safe mode judges; :func:`object_refs` is the writer's narrower view."""
    return (node for node in iter_nodes(config) if isinstance(node.get("class_name"), str))


def spellings(node: dict) -> list[str]:
    """Every name a Keras lookup could resolve ``node`` by, in either dialect: its class name (a
    function node's function name), its ``spec_name``, its registered name, and each one's part after ``>`` (a
    registered package) and after the last dot (a dotted path), without repeats."""
    class_name, inner = node.get("class_name"), node.get("config")
    names = [inner if class_name == "function" and isinstance(inner, str) else class_name]
    if isinstance(node.get("spec_name"), str):  # tf-keras and Keras resolve a __typespec__ node by it
        names.append(node["spec_name"])
    registered = node.get("registered_name")
    if isinstance(registered, str) and not (class_name == registered == "function"):
        names.append(registered)  # Keras 3 writes a registered function's registered_name as "function"
    found: list[str] = []
    for name in names:
        if not isinstance(name, str):
            continue
        for variant in (name, name.rpartition(">")[2], name.rpartition(".")[2]):
            if variant and variant not in found:
                found.append(variant)
    return found


def dotted_names(node: dict) -> list[str]:
    """The names of :func:`spellings` that hold a dot: tf-keras resolves ``"a.b"`` in a module as
    attribute ``b`` of its attribute ``a``."""
    return [name for name in spellings(node) if "." in name]


def layer_name(node: dict) -> str:
    """The ``name`` in a layer node's config, for messages (``"?"`` when it has none)."""
    inner = node.get("config")
    return str(inner.get("name", "?")) if isinstance(inner, dict) else "?"


def count_listed_layers(config: Any) -> int:
    """Layer configs listed anywhere in the config (nested models included): what MAX_LAYERS bounds."""
    return sum(len(node["layers"]) for node in iter_nodes(config) if isinstance(node.get("layers"), list))


def count_top_layers(config: Any) -> int | None:
    """How many layers the config lists at its top level (``len(model.layers)``).

    ``None`` when the config does not list its layers: a subclassed model
    (whose constructor creates them) or a single layer.
    """
    if not isinstance(config, dict):
        return None
    inner = config.get("config")
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if not isinstance(layers, list):
        return None
    if config.get("class_name") == "Sequential":
        # Sequential.layers leaves out the InputLayer its config records.
        return sum(1 for layer in layers if not (isinstance(layer, dict) and layer.get("class_name") == "InputLayer"))
    return len(layers)
