"""Functions joblib's workers run for tests/integrations/test_joblib_weights.py (importable by name in a worker)."""

from __future__ import annotations

import keras
import numpy as np


def kernel_sum(model) -> float:
    return float(np.asarray(keras.ops.convert_to_numpy(model.layers[0].kernel), dtype=np.float64).sum())


def bump_then_sum(model) -> float:
    """Changes the worker's model, then reads it: a later task must never see the change."""
    kernel = model.layers[0].kernel
    kernel.assign(kernel + 1.0)
    return kernel_sum(model)


def state_sum(model) -> float:
    """Every variable of the model and of its optimizer, summed: what a task saw of the whole state."""
    values = [*model.variables, *model.optimizer.variables]
    return float(sum(np.asarray(keras.ops.convert_to_numpy(v), dtype=np.float64).sum() for v in values))


class Store:
    """A stand-in for joblib's pickler, which array_store keeps snapshots for (weakly referenced)."""
