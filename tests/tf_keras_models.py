"""tf-keras (Keras 2) models as people write them, importable by the fresh processes tests start.

Nothing here is registered with tf-keras: keras_pickle carries the custom classes itself. The
random layers draw from ``tf.random.Generator`` state (``enable_tf_random_generator``), which
travels; TensorFlow's legacy stateful random ops keep their state inside the op, where no API
reaches it (docs/guide.md, "tf-keras").
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

tf_keras.backend.experimental.enable_tf_random_generator()


class Gate(tf_keras.layers.Layer):
    """A custom layer with its own weights and constructor argument."""

    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], self.units))
        self.gate = self.add_weight(name="gate", shape=(self.units,), initializer="ones")

    def call(self, x):
        return tf.sigmoid(tf.matmul(x, self.kernel)) * self.gate

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class Classifier(tf_keras.Model):
    """A subclassed model (no get_config): a custom layer, seeded Dropout, BatchNormalization."""

    def __init__(self, classes=3, **kwargs):
        super().__init__(**kwargs)
        self.gate = Gate(8)
        self.dropout = tf_keras.layers.Dropout(0.3, seed=7)
        self.norm = tf_keras.layers.BatchNormalization()
        self.head = tf_keras.layers.Dense(classes, activation="softmax")

    def call(self, x, training=False):
        return self.head(self.norm(self.dropout(self.gate(x), training=training), training=training))


def subclassed() -> tf_keras.Model:
    model = Classifier()
    model.compile(tf_keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def functional() -> tf_keras.Model:
    inputs = tf_keras.Input((6,), name="features")
    x = tf_keras.layers.Dense(16, activation="relu")(inputs)
    x = tf_keras.layers.BatchNormalization()(x)
    x = tf_keras.layers.Dropout(0.2)(x)
    x = Gate(5, name="gate")(x)
    outputs = tf_keras.layers.Dense(3, activation="softmax")(x)
    model = tf_keras.Model(inputs, outputs)
    model.compile(tf_keras.optimizers.AdamW(0.005), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def sequential() -> tf_keras.Model:
    model = tf_keras.Sequential(
        [tf_keras.Input((6,)), tf_keras.layers.Dense(8, activation="tanh"), tf_keras.layers.Dense(3)]
    )
    model.compile("sgd", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


BUILDERS = {"subclassed": subclassed, "functional": functional, "sequential": sequential}


def data(n: int = 32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 6)).astype("float32"), rng.integers(0, 3, size=(n,))


def trained(name: str) -> tf_keras.Model:
    model = BUILDERS[name]()
    x, y = data()
    model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    return model


def all_values(model: tf_keras.Model) -> list[np.ndarray]:
    """Every variable of the model, its optimizer's and its random generators' states, as numpy."""
    variables = list(model.variables) + list(model.optimizer.variables)
    for layer in model._flatten_layers(include_self=True, recursive=True):
        generator = getattr(layer.__dict__.get("_random_generator"), "_generator", None)
        if generator is not None:
            variables.append(generator.state)
    return [v.numpy() for v in variables]


def train_step(model: tf_keras.Model) -> list[np.ndarray]:
    """One more epoch, then every value (:func:`all_values`)."""
    x, y = data()
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    return all_values(model)
