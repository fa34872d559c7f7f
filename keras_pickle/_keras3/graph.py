"""Rebuild a Functional or Sequential graph without tracing every layer again.

Keras rebuilds a Functional model by calling each layer on symbolic tensors:
``Layer.__call__`` then works out the output's shape and dtype
(``compute_output_spec``), opens name scopes and checks its inputs, for every
node. The original model knew all of that. At dump time,
:func:`annotate` records next to each node the config lists its outputs'
specs (shape, dtype, sparse, ragged) under :data:`SPEC_KEY`; Keras's own
loader ignores the key. At load time, :func:`functional_from_config` and
:func:`build_sequential` follow Keras's own reconstruction (layers created and
built from their build configs exactly as Keras does), but create each node
directly from the recorded specs, as Keras's ``clone_graph_nodes`` does,
where that is safe (:func:`_wirable`): a Keras built-in layer that is built,
whose class keeps Keras's ``__call__``, and that runs no user code. Anything
else, and any node without specs, takes the ordinary symbolic call.

The caller verifies the result (every variable's shape and dtype against the
payload) and rebuilds the ordinary way on any disagreement or error.

A Functional subclass called as ``CustomModel(inputs, outputs)`` is rebuilt by
its constructor (:mod:`keras_pickle._keras3.recorded.construct`), and the symbolic tensors
among its arguments belong to the original's graph. :func:`arguments_config`
records where they sit and which tensors of the graph they are;
:func:`rebuild_nodes` rebuilds that graph for the constructor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keras.src.backend.common.keras_tensor import KerasTensor
from keras.src.backend.common.name_scope import current_path
from keras.src.distribution import distribution_lib
from keras.src.layers.core.input_layer import InputLayer
from keras.src.layers.layer import Layer
from keras.src.models.functional import Functional, deserialize_node, functional_like_constructor, make_node_key
from keras.src.models.sequential import Sequential
from keras.src.ops.node import Node
from keras.src.saving import serialization_lib
from keras.src.utils import python_utils

SPEC_KEY = "keras_pickle_outputs"
"""The key, in a layer's entry of a Functional or Sequential config, of its nodes' output specs."""

# Keras layers that run user code, or another framework's, when called: always the real call.
_RUN_CODE = frozenset(("Lambda", "TFSMLayer", "TorchModuleWrapper", "JaxLayer", "FlaxLayer"))


# --------------------------------------------------------------------------
# Dump time
# --------------------------------------------------------------------------


def _spec(tensor: Any) -> list:
    return [list(tensor.shape), str(tensor.dtype), bool(tensor.sparse), bool(getattr(tensor, "ragged", False))]


def annotate(config: Any, obj: Any) -> Any:
    """Add the recorded output specs of ``obj``'s nodes to ``config`` (its serialization), in place; returns it."""
    inner = config.get("config") if isinstance(config, dict) else None
    if not (isinstance(inner, dict) and isinstance(inner.get("layers"), list)):
        return config
    if isinstance(obj, Sequential):
        _annotate_sequential(inner["layers"], obj)
    elif isinstance(obj, Functional):
        _annotate_functional(inner["layers"], obj)
    return config


def _annotate_functional(layer_configs: list, model: Functional) -> None:
    by_name = {operation.name: operation for operation in model.operations}
    for layer_data in layer_configs:
        operation = by_name.get(layer_data.get("name")) if isinstance(layer_data, dict) else None
        if operation is None:
            continue
        specs = [
            [_spec(t) for t in node.outputs]
            for index, node in enumerate(operation._inbound_nodes)
            if make_node_key(operation, index) in model._nodes and node.input_tensors
        ]
        if len(specs) == len(layer_data.get("inbound_nodes", ())):
            layer_data[SPEC_KEY] = specs
        annotate(layer_data, operation)


def _annotate_sequential(layer_configs: list, model: Sequential) -> None:
    functional = getattr(model, "_functional", None)
    if functional is None or len(layer_configs) != len(model._layers):
        return
    for layer, layer_data in zip(model._layers, layer_configs):
        if isinstance(layer, InputLayer) or not isinstance(layer_data, dict):
            continue
        own = [n for i, n in enumerate(layer._inbound_nodes) if make_node_key(layer, i) in functional._nodes]
        if len(own) != 1:
            return
        layer_data[SPEC_KEY] = [[_spec(t) for t in own[0].outputs]]
        annotate(layer_data, layer)


# --------------------------------------------------------------------------
# Load time
# --------------------------------------------------------------------------


def _wirable(layer: Any) -> bool:
    """Whether creating ``layer``'s node from recorded specs is what its symbolic call would do."""
    cls = type(layer)
    if not (isinstance(layer, Layer) and cls.__module__.startswith("keras.src.")):
        return False
    # By name, outside Keras's backend classes (the JAX backend's own Layer base is named JaxLayer).
    if any(b.__name__ in _RUN_CODE and not b.__module__.startswith("keras.src.backend.") for b in cls.__mro__):
        return False
    if cls.__call__ is not Layer.__call__ or cls.symbolic_call is not Layer.symbolic_call:
        return False
    if distribution_lib.distribution() is not None:
        return False
    if not layer.built and not (python_utils.is_default(layer.build) and not layer._layers):
        return False
    return all(sub.built for sub in layer._flatten_layers(include_self=False, recursive=True))


def _node(layer: Any, args: tuple, kwargs: dict, specs: Any) -> Any:
    """One node: created from ``specs`` where :func:`_wirable`, else by calling the layer."""
    if specs is None or not _wirable(layer):
        return layer(*args, **kwargs)
    outputs = [KerasTensor(shape=tuple(s[0]), dtype=s[1], sparse=s[2], ragged=s[3]) for s in specs]
    Node(layer, call_args=tuple(args), call_kwargs=kwargs, outputs=outputs)
    layer._called = True
    layer.built = True
    return outputs[0] if len(outputs) == 1 else outputs


def has_specs(config: Any) -> bool:
    """Whether every layer of a Functional or Sequential config has recorded specs."""
    layers = config.get("config", {}).get("layers") if isinstance(config, dict) else None
    return (
        isinstance(layers, list)
        and bool(layers)
        and all(isinstance(d, dict) and (SPEC_KEY in d or d.get("class_name") == "InputLayer") for d in layers)
    )


def functional_from_config(config: dict, custom_objects: dict[str, Any]) -> Functional:
    """A plain ``Functional`` from its inner config: Keras's ``functional_from_config`` with recorded specs."""
    tensors = rebuild_nodes(config, custom_objects, wire=True)
    rest = {
        k: v for k, v in config.items() if k not in ("layers", "input_layers", "output_layers", "name", "trainable")
    }
    return Functional(
        inputs=tensors(config["input_layers"]),
        outputs=tensors(config["output_layers"]),
        name=config.get("name"),
        trainable=config.get("trainable"),
        **rest,
    )


def rebuild_nodes(config: dict, custom_objects: dict[str, Any], *, wire: bool) -> Callable[[Any], Any]:
    """Create the layers a Functional config lists and their nodes, as Keras's ``functional_from_config`` does.

    Nodes come from recorded specs where ``wire`` and :func:`_wirable`. Returns
    the function that maps a structure of ``[layer name, node index, tensor
    index]`` references (the config's ``input_layers``, ``output_layers``) to
    the tensors of the rebuilt graph.
    """
    created: dict[str, Any] = {}
    pending: dict[Any, list] = {}
    for layer_data in config["layers"]:
        layer = serialization_lib.deserialize_keras_object(layer_data, custom_objects=custom_objects)
        created[layer_data["name"]] = layer
        inbound, specs = layer_data["inbound_nodes"], layer_data.get(SPEC_KEY) if wire else None
        nodes = list(zip(inbound, specs)) if specs else [(node_data, None) for node_data in inbound]
        if nodes:
            pending.setdefault(layer, []).extend(nodes)
    while pending:
        progressed = False
        for layer_data in config["layers"]:
            layer = created[layer_data["name"]]
            queue = pending.get(layer)
            if queue is None:
                continue
            done = 0
            for node_data, specs in queue:
                try:
                    args, kwargs = deserialize_node(node_data, created)
                except IndexError:  # an inbound node does not exist yet
                    break
                _node(layer, args, kwargs, specs)
                done += 1
            if done:
                progressed = True
                if done == len(queue):
                    del pending[layer]
                else:
                    pending[layer] = queue[done:]
        if not progressed:
            raise ValueError("Invalid Functional config: loops or disconnected nodes.")

    def tensor(layer_name: str, node_index: int, tensor_index: int) -> Any:
        layer = created[layer_name]
        if isinstance(layer, Functional):
            node_index -= 1  # as Keras does: a nested Functional's first node is its own
        return layer._inbound_nodes[node_index].output_tensors[tensor_index]

    def tensors(structure: Any) -> Any:
        if isinstance(structure, list) and len(structure) == 3 and isinstance(structure[0], str):
            return tensor(*structure)
        if isinstance(structure, dict):
            return {key: tensors(value) for key, value in structure.items()}
        if isinstance(structure, tuple):
            return tuple(tensors(value) for value in structure)
        return [tensors(value) for value in structure]

    return tensors


def build_sequential(model: Sequential, layer_configs: list) -> bool:
    """``model._maybe_rebuild()`` with nodes from recorded specs; False (nothing done) where that does not apply."""
    layers = model._layers
    if not (len(layers) > 1 and isinstance(layers[0], InputLayer)) or len(layer_configs) != len(layers):
        return False
    specs = [config.get(SPEC_KEY) for config in layer_configs[1:]]
    if any(s is None or len(s) != 1 for s in specs):
        return False
    model.built = False
    model._functional = None
    with model._open_name_scope():
        model._path = current_path()
        inputs = x = layers[0].output
        for layer, (node_specs,) in zip(layers[1:], specs):
            x = _node(layer, (x,), {}, node_specs)
        model._functional = Functional(inputs=inputs, outputs=x)
    # What Layer's build wrapper records and does after build().
    model._build_shapes_dict = {"input_shape": layers[0].batch_shape}
    model.built = True
    model._post_build()
    model._lock_state()
    return True


# --------------------------------------------------------------------------
# Symbolic tensors among a model's recorded constructor arguments
# --------------------------------------------------------------------------

TENSORS_KEY = "keras_pickle_tensors"
"""The key, in the config of a model rebuilt by its constructor, of the symbolic tensors its recorded
arguments held: ``[[place, [layer name, node index, tensor index]], ...]`` (see :func:`arguments_config`)."""

_MAX_DEPTH = 32


def symbolic_places(args: tuple, kwargs: dict) -> list[tuple[tuple, KerasTensor]] | None:
    """``(place, tensor)`` of every symbolic tensor among constructor arguments.

    A place is ``("args", i, ...)`` or ``("kwargs", name, ...)``, followed by
    the list and tuple indices and dict keys that lead to the tensor. None if
    a tensor sits under a dict key a config cannot hold (not a str or int).
    """
    found: list[tuple[tuple, KerasTensor]] = []

    def visit(value: Any, place: tuple, depth: int) -> bool:
        if isinstance(value, KerasTensor):
            found.append((place, value))
        elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
            return all(visit(item, (*place, i), depth + 1) for i, item in enumerate(value))
        elif depth < _MAX_DEPTH and isinstance(value, dict):
            for key, item in value.items():
                before = len(found)
                if not visit(item, (*place, key), depth + 1):
                    return False
                if len(found) > before and (type(key) is not str and type(key) is not int):
                    return False
        return True

    complete = all(visit(a, ("args", i), 0) for i, a in enumerate(args)) and all(
        visit(v, ("kwargs", k), 0) for k, v in kwargs.items()
    )
    return found if complete else None


def replace_at(args: tuple, kwargs: dict, placed: dict[tuple, Any]) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with the value at each place of ``placed`` replaced (see :func:`symbolic_places`).

    Only the lists, tuples and dicts on the way to a place are copied; raises
    ``KeyError`` for a place that leads nowhere.
    """
    on_the_way = {place[:n] for place in placed for n in range(1, len(place))}
    reached: set[tuple] = set()

    def rebuilt(value: Any, place: tuple) -> Any:
        if place in placed:
            reached.add(place)
            return placed[place]
        if place not in on_the_way:
            return value
        if isinstance(value, dict):
            copied = value.copy()
            for key, item in value.items():
                copied[key] = rebuilt(item, (*place, key))
            return copied
        if isinstance(value, list):
            return [rebuilt(item, (*place, i)) for i, item in enumerate(value)]
        if isinstance(value, tuple):
            items = [rebuilt(item, (*place, i)) for i, item in enumerate(value)]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return value

    new_args = tuple(rebuilt(a, ("args", i)) for i, a in enumerate(args))
    new_kwargs = {k: rebuilt(v, ("kwargs", k)) for k, v in kwargs.items()}
    missing = set(placed) - reached
    if missing:
        raise KeyError(f"no argument at {sorted(missing, key=repr)[0]!r}")
    return new_args, new_kwargs


def without_symbolic(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with every symbolic tensor :func:`symbolic_places` finds replaced by None."""
    found = symbolic_places(args, kwargs) or []
    return replace_at(args, kwargs, {place: None for place, _ in found}) if found else (args, kwargs)


def _tensor_reference(model: Functional, tensor: KerasTensor) -> list | None:
    """``[layer name, node index, tensor index]`` of ``tensor`` in ``model``'s config (as Keras's
    ``get_config`` numbers nodes), or None if it is not a tensor of ``model``'s graph."""
    history = getattr(tensor, "_keras_history", None)
    if history is None:
        return None
    operation, node_index, tensor_index = history
    if make_node_key(operation, node_index) not in model._nodes:
        return None
    kept = 1 if isinstance(operation, Functional) else 0
    kept += sum(1 for i in range(node_index) if make_node_key(operation, i) in model._nodes)
    return [operation.name, kept, tensor_index]


def arguments_config(model: Any, args: tuple, kwargs: dict) -> dict | None:
    """What the config of ``model``, rebuilt by calling its class with ``args`` and ``kwargs``, must add.

    ``{}`` when no argument is a symbolic tensor. When some are (a Functional
    subclass called as ``CustomModel(inputs, outputs)``), those tensors belong
    to the original's graph and must never be handed to the constructor again:
    the config becomes the model's Functional config (layers, nodes, inputs,
    outputs), and :data:`TENSORS_KEY` records where each tensor sits among the
    arguments and which tensor of that graph it is. Loading rebuilds the graph
    (:func:`rebuild_nodes`) and calls the constructor with its tensors. None
    when a tensor is not one of the model's graph (a model that cloned its
    inputs): the model's own config must then do, as with Keras.
    """
    found = symbolic_places(args, kwargs)
    if found == []:
        return {}
    if not found or not isinstance(model, Functional):
        return None
    references = [_tensor_reference(model, tensor) for _place, tensor in found]
    if any(reference is None for reference in references):
        return None
    return {**_functional_config(model), TENSORS_KEY: [[list(p), r] for (p, _t), r in zip(found, references)]}


def _functional_config(model: Functional) -> dict:
    """``model``'s Functional config, also for a subclass whose constructor is not Functional's
    (Keras's ``get_config`` then declines): that of a plain Functional over the same graph."""
    if functional_like_constructor(type(model)):
        return Functional.get_config(model)
    twin = Functional(model._inputs_struct, model._outputs_struct, name=model.name, trainable=model.trainable)
    return twin.get_config()
