"""Objects of a user's module that Keras does not vouch for (tests/safe_mode/test_allowlist.py)."""

from __future__ import annotations

import keras


def halve(x):
    """A custom activation nobody registered: safe mode loads it only when the caller names it."""
    return keras.ops.relu(x) * 0.5


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation=halve), keras.layers.Dense(1)])


class Annotated(keras.layers.Layer):
    """A custom layer whose config holds a string ``vocabulary`` (a name, no file) and ``K_type`` / ``K_module``
    keys, as any user's config may: safe mode refuses such fields only where Keras reads a file or merges a
    module from them (tests/safe_mode/test_allowlist.py)."""

    def __init__(self, vocabulary="english", scale_type="function", scale_module="my_lab.scales", **kwargs):
        super().__init__(**kwargs)
        self.vocabulary, self.scale_type, self.scale_module = vocabulary, scale_type, scale_module

    def call(self, x):
        return x * 2.0

    def get_config(self):
        own = {"vocabulary": self.vocabulary, "scale_type": self.scale_type, "scale_module": self.scale_module}
        return {**super().get_config(), **own}


class MyLookup(keras.layers.StringLookup):
    """A user's subclass of a layer that reads a file its ``vocabulary`` names."""
