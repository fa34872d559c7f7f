"""Objects of a user's module that Keras does not vouch for (tests/test_allowlist.py)."""

from __future__ import annotations

import keras


def halve(x):
    """A custom activation nobody registered: safe mode loads it only when the caller names it."""
    return keras.ops.relu(x) * 0.5


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation=halve), keras.layers.Dense(1)])
