"""Every piece of state a Keras layer or model holds, as both sides exchange it.

* ``variables``: ``obj.variables``. That is every weight, every
  non-trainable variable (BatchNormalization statistics, Normalization
  mean/variance) and every ``SeedGenerator`` state (Dropout & co).
* ``metric_variables``: the variables of the metrics a layer holds as
  attributes (keras.io's ``self.total_loss_tracker = keras.metrics.Mean()``), then
  the running totals of a fitted model's compile metrics
  (:mod:`keras_pickle._keras3.recorded.compile_metrics`).
* ``optimizer_variables``: ``obj.optimizer.variables`` (iterations, learning
  rate, slots) of a compiled model; ``held_optimizers``: any other optimizer
  the model holds as an attribute (keras.io's GAN: ``d_optimizer``,
  ``g_optimizer``), with the variables it was built for.
* ``layer_states``: state kept outside Keras variables
  (:mod:`keras_pickle._keras3.layer_state`): vocabularies, assets, carried RNN states.

Each value is stored with a key that names its place in the model and does
not depend on the process (``survey.variable_keys``: ``block/dense/kernel``).
On load, values are matched to the rebuilt object's variables by key (a
rebuilt layer may create its variables in another order: a float8-quantized
Dense does), by position where the keys do not pair one to one (older
payloads), and every pair is checked for shape and dtype.

A payload written under another backend may hold an integer variable in
another dtype (int64 iterations on TensorFlow, int32 on JAX and PyTorch;
seed-generator state): :mod:`keras_pickle._keras3.convert` converts it, exactly or
not at all. A payload of the same backend is assigned untouched.

A model compiled without metrics carries no compile-time totals: its loss
tracker's, which Keras resets at the start of every ``fit`` / ``evaluate``, travel
only beside compile metrics (:mod:`keras_pickle._keras3.recorded.compile_metrics`).
"""

from __future__ import annotations

from typing import Any

from .._blueprint import Blueprint as Blueprint
from .._blueprint import CapturedState as CapturedState
from .._blueprint import HeldOptimizer as HeldOptimizer
from .._blueprint import describe as describe
from .census import census_of
from .recorded import compile_metrics as _compile_metrics


def metric_variables(obj: Any) -> list[tuple[str, Any]]:
    """``(key, variable)`` of every metric a layer of ``obj`` (or of its census) holds as an attribute
    (Keras tracks them in ``_metrics``; a compiled model's compile metrics and loss tracker are not
    among them), then those of the root's compile metrics whose totals travel
    (:func:`keras_pickle._keras3.recorded.compile_metrics.carried`)."""
    census = census_of(obj)
    found = []
    for layer in census.layers:
        if not getattr(layer, "_metrics", None):
            continue
        prefix = census.place_of(layer)
        for metric in getattr(layer, "_metrics", ()):
            for v in metric.variables:
                found.append((f"{prefix}/{metric.name}/{v.name}".lstrip("/"), v))
    return found + _compile_metrics.carried(census.root)


def optimizer_of(obj: Any):
    optimizer = getattr(obj, "optimizer", None)
    if optimizer is None or not hasattr(optimizer, "variables"):
        return None
    return optimizer
