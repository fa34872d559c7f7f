"""Every piece of state a Keras layer or model holds, as both sides exchange it.

* ``variables``: ``obj.variables``. That is every weight, every
  non-trainable variable (BatchNormalization statistics, Normalization
  mean/variance) and every ``SeedGenerator`` state (Dropout & co).
* ``metric_variables``: the variables of the metrics a layer holds as
  attributes (keras.io's ``self.total_loss_tracker = keras.metrics.Mean()``).
* ``optimizer_variables``: ``obj.optimizer.variables`` (iterations, learning
  rate, slots) of a compiled model; ``held_optimizers``: any other optimizer
  the model holds as an attribute (keras.io's GAN: ``d_optimizer``,
  ``g_optimizer``), with the variables it was built for.
* ``layer_states``: state kept outside Keras variables
  (:mod:`keras_pickle._keras3.layer_state`): vocabularies, assets, carried RNN states.

Each value is stored with a key that names its place in the model and does
not depend on the process (``_names.variable_keys``: ``block/dense/kernel``).
On load, values are matched to the rebuilt object's variables by key (a
rebuilt layer may create its variables in another order: a float8-quantized
Dense does), by position where the keys do not pair one to one (older
payloads), and every pair is checked for shape and dtype.

A payload written under another backend may hold an integer variable in
another dtype (int64 iterations on TensorFlow, int32 on JAX and PyTorch;
seed-generator state): :mod:`keras_pickle._keras3.convert` converts it, exactly or
not at all. A payload of the same backend is assigned untouched.

The running totals of a compiled model's compile metrics are not captured:
Keras resets them at the start of every ``fit`` / ``evaluate``.
"""


from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .census import census_of
from .layer_state import LayerState


@dataclasses.dataclass
class HeldOptimizer:
    """An optimizer a model holds as an attribute, other than ``model.optimizer``."""

    path: str
    config_json: str
    built: bool
    # Positions, in the model's variables, of those it was built for (its trainable variables).
    targets: list[int]
    variables: list[tuple[str, np.ndarray]]


@dataclasses.dataclass
class CapturedState:
    variables: list[tuple[str, np.ndarray]]
    optimizer_variables: list[tuple[str, np.ndarray]]
    layer_states: list[LayerState]
    # An unbuilt optimizer holds only iterations and learning rate; the
    # rebuilt one may already be built (compile_from_config builds it).
    optimizer_built: bool = True
    # The backend that wrote the payload (loading only); None: this process.
    backend: str | None = None
    metric_variables: list[tuple[str, np.ndarray]] = dataclasses.field(default_factory=list)
    held_optimizers: list[HeldOptimizer] = dataclasses.field(default_factory=list)


def metric_variables(obj: Any) -> list[tuple[str, Any]]:
    """``(key, variable)`` of every metric a layer of ``obj`` (or of its census) holds as an attribute
    (Keras tracks them in ``_metrics``; a compiled model's compile metrics and loss tracker are not
    among them)."""
    census = census_of(obj)
    found = []
    for layer in census.layers:
        if not getattr(layer, "_metrics", None):
            continue
        prefix = census.place_of(layer)
        for metric in getattr(layer, "_metrics", ()):
            for v in metric.variables:
                found.append((f"{prefix}/{metric.name}/{v.name}".lstrip("/"), v))
    return found


def optimizer_of(obj: Any):
    optimizer = getattr(obj, "optimizer", None)
    if optimizer is None or not hasattr(optimizer, "variables"):
        return None
    return optimizer


def describe(obj: Any) -> str:
    return f"{type(obj).__name__} '{getattr(obj, 'name', '?')}'"


@dataclasses.dataclass(frozen=True)
class Blueprint:
    """Everything a layer or model is rebuilt from: what a payload's body decodes to, and what
    ``copy.deepcopy`` takes from the live object (``_capture.payload.snapshot``)."""

    config_json: str
    custom_objects: dict[str, Any]
    state: Any  # a CapturedState
    dtype_policy: str | None = None
    # Objects rebuilt from recorded constructor calls (_construct.Constructed), by placeholder index.
    constructed: list = dataclasses.field(default_factory=list)
    # A recorded compile() call to replay (_compile), and the configs of the optimizers it marks.
    compile_call: Any = None
    compile_objects: dict = dataclasses.field(default_factory=dict)
