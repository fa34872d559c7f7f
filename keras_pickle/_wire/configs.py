"""Reading a decoded Keras config (plain JSON data): one walk, several questions.

Loading asks how many layers a config lists (a resource limit) and whether it
holds a Lambda layer (safe mode refuses it); collecting custom objects asks
which classes and functions it names; the inspector asks all of these without
Keras. Each question is a fold over :func:`iter_nodes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple


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
                stack.extend(reversed(list(node.values())))
        elif isinstance(node, (list, tuple)):
            stack.extend(reversed(node))


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


def refused_layer_spelt(node: dict) -> str | None:
    """The refused layer kind (``Lambda`` or one of :data:`FOREIGN_LAYERS`) ``node`` names under any
    of its spellings, whatever its ``module`` says (or whether it has one); ``None`` otherwise."""
    if node.get("class_name") == "function":
        return None
    for name in spellings(node):
        if name in REFUSED_LAYERS:
            return name
    return None


def layer_name(node: dict) -> str:
    """The ``name`` in a layer node's config, for messages (``"?"`` when it has none)."""
    inner = node.get("config")
    return str(inner.get("name", "?")) if isinstance(inner, dict) else "?"


def _is_lambda_layer(node: dict) -> bool:
    return refused_layer_spelt(node) == "Lambda"


class LambdaCode(NamedTuple):
    """Python code stored in a config: a Lambda layer (``layer`` is its name) or an inline lambda
    (``field``: the config key holding it, ``None`` for Keras's ``__lambda__`` object)."""

    layer: str | None
    field: str | None = None

    def __str__(self) -> str:
        if self.layer is not None:
            return self.layer
        return "<inline Python lambda>" if self.field is None else f"<Python lambda in {self.field!r}>"


def stored_code_field(node: dict) -> str | None:
    """The key of ``node`` whose value a deserializer loads as Python bytecode, spelt as tf-keras spells
    one: a key ``K`` beside ``K_type`` set to ``"lambda"`` (its RNN cell wrappers' ``residual_fn`` and
    ``dropout_state_filter_visitor``, a Lambda layer's ``function`` and ``output_shape``), whatever
    class the node belongs to; ``None`` when it has none."""
    for key, value in node.items():
        if value == "lambda" and isinstance(key, str) and key.endswith("_type") and key[: -len("_type")] in node:
            return key[: -len("_type")]
    return None


WRAPPER_OWN_MODULES = frozenset({"tf_keras.src.layers.rnn.cell_wrappers", "keras.src.layers.rnn.cell_wrappers"})
"""The one module a tf-keras RNN cell wrapper's ``K_module`` may name: its own, whose namespace it merges
into itself (a no-op)."""


def merged_module_field(node: dict) -> tuple[str, Any] | None:
    """A key ``K_module`` beside ``K_type`` (tf-keras's cell wrappers' spelling), naming a module other than
    the wrapper's own, and its value: tf-keras merges that module's whole namespace (``globals().update``)
    into its cell-wrapper module for the rest of the process. ``None`` when ``node`` has none."""
    for key, value in node.items():
        if isinstance(key, str) and key.endswith("_module") and f"{key[: -len('_module')]}_type" in node:
            if value is not None and value not in WRAPPER_OWN_MODULES:
                return key, value
    return None


def vocabulary_path(node: dict) -> str | None:
    """The file a node's ``config`` names as its ``vocabulary`` (a string where a list is stored): lookup
    layers read it from disk (or any ``gfile`` URL) when they are built; ``None`` when it names none."""
    inner = node.get("config")
    vocabulary = inner.get("vocabulary") if isinstance(inner, dict) else None
    return vocabulary if isinstance(vocabulary, str) else None


def inline_code(node: dict) -> LambdaCode | None:
    """The Python code ``node`` itself stores outside a Lambda layer: Keras's ``__lambda__`` object, or
    a :func:`stored_code_field`; ``None`` when it stores none."""
    if node.get("class_name") == "__lambda__":
        return LambdaCode(None)
    field = stored_code_field(node)
    return None if field is None else LambdaCode(None, field)


def lambdas(config: Any) -> list[LambdaCode]:
    """The Lambda layers (spelt any way, with or without a module), and the inline Python lambdas
    outside them (:func:`inline_code`), in document order."""
    found = []
    for node in iter_nodes(config, descend=lambda n: not (_is_lambda_layer(n) or inline_code(n))):
        if _is_lambda_layer(node):
            found.append(LambdaCode(layer_name(node)))
        elif (code := inline_code(node)) is not None:
            found.append(code)
    return found


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


FOREIGN_LAYERS = {
    "TorchModuleWrapper": "a torch.nn.Module that Keras loads with torch.load (a pickle)",
    "JaxLayer": "JAX functions that Keras imports and calls",
    "FlaxLayer": "a Flax module that Keras rebuilds and calls",
    "TFSMLayer": "a TensorFlow SavedModel whose graph Keras loads and runs",
}
"""Keras layers that embed code or another format, and what loading one would run."""


class ForeignLayer(NamedTuple):
    """A layer of :data:`FOREIGN_LAYERS` in a config: its class and its name."""

    class_name: str
    layer: str


def foreign_layers(config: Any) -> list[ForeignLayer]:
    """The layers that embed code or another format (:data:`FOREIGN_LAYERS`), spelt any way, in
    document order."""
    found = []
    for node in named_nodes(config):
        class_name = refused_layer_spelt(node)
        if class_name in FOREIGN_LAYERS:
            found.append(ForeignLayer(class_name, layer_name(node)))
    return found


REFUSED_LAYERS = {"Lambda": "the Python code stored in the payload", **FOREIGN_LAYERS}
"""Every layer kind safe mode refuses under any spelling, and what loading one would run."""
