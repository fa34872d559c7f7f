"""A tf-keras model's parts, in an order that does not depend on the process: its layers, its
variables with their keys, its random generators and its optimizer.

tf-keras names variables with process-unique prefixes (``dense_3/kernel:0``), so a key is the
variable's position in ``model.variables`` and its own name (``5/kernel``): the same config rebuilt
by the same code lists the same variables in the same order (what ``get_weights`` /
``set_weights`` rely on too), and the name catches a payload that does not describe the model.
"""

from __future__ import annotations

from typing import Any


def layers(root: Any) -> list:
    """``root`` and every layer in it, each once, depth first (tf-keras's ``_flatten_layers`` order)."""
    if not hasattr(root, "_flatten_layers"):
        return [root]
    return list(root._flatten_layers(include_self=True, recursive=True))


def short_name(variable: Any) -> str:
    """A variable's own name, without its layer's process-unique scope or the ``:0`` suffix."""
    return str(getattr(variable, "name", "?")).rsplit("/", 1)[-1].split(":", 1)[0]


def keyed(variables: list) -> list[tuple[str, Any]]:
    """``(key, variable)`` for a list of variables: ``"<position>/<own name>"``."""
    return [(f"{position}/{short_name(v)}", v) for position, v in enumerate(variables)]


def is_weight_handler(weight: Any) -> bool:
    """A weight that is no variable: a lookup layer's vocabulary table (tf-keras's ``TrackableWeightHandler``)."""
    return hasattr(weight, "get_tensors") and hasattr(weight, "num_tensors")


def _weights(root: Any) -> list:
    """``root.variables``; none for an unbuilt model (tf-keras's Sequential raises there)."""
    try:
        return list(getattr(root, "variables", ()))
    except ValueError:
        return []


def model_variables(root: Any) -> list[tuple[str, Any]]:
    """Every variable of ``root`` (``root.variables``: weights and non-trainable statistics), keyed; weight
    handlers aside (:func:`weight_handlers`)."""
    return keyed([v for v in _weights(root) if not is_weight_handler(v)])


def weight_handlers(root: Any) -> list[tuple[str, Any]]:
    """``(place, handler)`` of the weight handlers among ``root.variables`` (lookup tables), the place
    being the handler's position among them."""
    handlers = [v for v in _weights(root) if is_weight_handler(v)]
    return [(str(position), handler) for position, handler in enumerate(handlers)]


def random_generators(root: Any) -> list[tuple[str, Any]]:
    """``(place, generator)`` of every layer that draws random numbers (Dropout & co: tf-keras's
    ``BaseRandomLayer``), its place being its position in :func:`layers`."""
    found = []
    for position, layer in enumerate(layers(root)):
        generator = layer.__dict__.get("_random_generator")
        if generator is not None and hasattr(generator, "_rng_type"):
            found.append((str(position), generator))
    return found


def optimizer_of(model: Any) -> Any:
    """The optimizer a compiled model trains with, or ``None``."""
    return getattr(model, "optimizer", None)
