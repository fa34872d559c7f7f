"""The only place that knows how a backend stores variable values.

Everything else in keras_pickle speaks numpy and Keras variables. A backend
gets a fast path here when measurements justify one; the generic path works
for every backend Keras supports.
"""

from __future__ import annotations

import keras
import numpy as np


def backend_name() -> str:
    return keras.backend.backend()


def to_numpy(value) -> np.ndarray:
    """The value of a Keras variable, backend tensor or array, as numpy.

    The result may share memory with the variable; callers must not write to
    it.
    """
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, keras.Variable):
        value = value.value
    return np.asarray(keras.ops.convert_to_numpy(value))


def assign(variable, array: np.ndarray) -> None:
    """Set a Keras variable (or a backend-native variable) to ``array``."""
    variable.assign(array)
