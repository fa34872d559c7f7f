"""Custom layers and model builders for the integration tests (importable by reference).

Nothing here is registered with Keras: keras_pickle must carry it anyway.
"""

from __future__ import annotations

import keras
import numpy as np

FEATURES = 4


class Gate(keras.layers.Layer):
    """An unregistered custom layer with a trainable weight."""

    def build(self, input_shape):
        self.gate = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gate")

    def call(self, x):
        return x * keras.ops.sigmoid(self.gate)


class Shift(keras.layers.Layer):
    """An unregistered custom layer with a constructor argument and a weight."""

    def __init__(self, offset: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.offset = offset

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="bias")

    def call(self, x):
        return x + self.bias + self.offset

    def get_config(self):
        return {**super().get_config(), "offset": self.offset}


def classification_data(n: int = 48, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int64")
    return x, y


def regression_data(n: int = 32, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    return x, (x @ np.arange(1, FEATURES + 1, dtype="float32")).astype("float32")


def layers(outputs: int, activation: str | None) -> list:
    return [
        keras.Input((FEATURES,)),
        Shift(0.25),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dropout(0.1, seed=4),
        Gate(),
        keras.layers.Dense(outputs, activation=activation),
    ]


def binary_classifier(seed: int = 0, compiled: bool = True) -> keras.Model:
    """A Sequential binary classifier (one sigmoid unit) with two custom layers."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(layers(1, "sigmoid"))
    if compiled:
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy")
    return model


def softmax_classifier(classes: int = 2, seed: int = 0) -> keras.Model:
    """A compiled Functional classifier with one-hot targets (Keras's wrappers)."""
    keras.utils.set_random_seed(seed)
    inputs, *rest = layers(classes, "softmax")
    h = inputs
    for layer in rest:
        h = layer(h)
    model = keras.Model(inputs, h)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="categorical_crossentropy")
    return model


def regressor(seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(layers(1, None))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


def build_for_scikeras(meta: dict, compile_kwargs: dict) -> keras.Model:
    """A scikeras ``model=`` function: the wrapper routes optimizer, loss, metrics."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(layers(1, "sigmoid"))
    model.compile(**compile_kwargs)
    return model


def fit_regressor(model: keras.Model, epochs: int = 1) -> keras.Model:
    """Train in place, reproducibly (no shuffling): 2 steps per epoch."""
    x, y = regression_data(16)
    model.fit(x, y, epochs=epochs, batch_size=8, shuffle=False, verbose=0)
    return model
