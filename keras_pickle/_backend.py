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

    No copy where the backend allows it: a TensorFlow resource-variable read
    aliases the variable's buffer (copy-on-write protects it from later
    assignments), and ``np.asarray`` of a CPU tensor aliases the tensor. The
    result may be read-only; callers must not write to it.
    """
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, keras.Variable):
        value = value.value
    read_value = getattr(value, "read_value", None)
    if callable(read_value):
        value = read_value()
    try:
        return np.asarray(value)
    except Exception:
        return np.asarray(keras.ops.convert_to_numpy(value))


def assign(variable, array: np.ndarray) -> None:
    """Set a Keras variable (or a backend-native variable) to ``array``.

    A deferred variable (see :func:`is_uninitialized`) is created directly
    from ``array``.
    """
    if is_uninitialized(variable):
        initialize(variable, array)
    else:
        variable.assign(array)


def is_uninitialized(variable) -> bool:
    """True for a Keras variable created in a ``StatelessScope`` and not yet given a value."""
    return isinstance(variable, keras.Variable) and getattr(variable, "_value", False) is None


def initialize(variable, value) -> None:
    """Give a deferred Keras variable its first value, without running its initializer."""
    variable._initialize(value)


def initialize_with_initializer(variable) -> None:
    """Run a deferred Keras variable's own initializer."""
    variable._deferred_initialize()
