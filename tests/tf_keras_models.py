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


class Annotated(tf_keras.layers.Layer):
    """A custom layer whose config holds a string ``vocabulary`` (a name, no file) and ``K_type`` / ``K_module``
    keys: safe mode refuses such fields only where tf-keras reads a file or merges a module from them."""

    def __init__(self, vocabulary="english", scale_type="function", scale_module="my_lab.scales", **kwargs):
        super().__init__(**kwargs)
        self.vocabulary, self.scale_type, self.scale_module = vocabulary, scale_type, scale_module

    def call(self, x):
        return x * 2.0

    def get_config(self):
        own = {"vocabulary": self.vocabulary, "scale_type": self.scale_type, "scale_module": self.scale_module}
        return {**super().get_config(), **own}


class MyLookup(tf_keras.layers.StringLookup):
    """A user's subclass of a layer that reads a file its ``vocabulary`` names."""


class MyResidualWrapper(tf_keras.src.layers.rnn.cell_wrappers.ResidualWrapper):
    """A user's subclass of tf-keras's ResidualWrapper, whose from_config merges the module its config names."""


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


def text_classifier() -> tuple[tf_keras.Model, np.ndarray, np.ndarray]:
    """keras.io's text classification, small: TextVectorization (its vocabulary is a lookup table, not a
    variable), Embedding, a Bidirectional GRU with dropout; with its data."""
    texts = np.array(["the cat sat", "a dog ran far", "the bird flew", "cats and dogs", "a cat ran"] * 4)
    labels = np.array([0, 1, 0, 1, 1] * 4)
    vectorize = tf_keras.layers.TextVectorization(max_tokens=20, output_sequence_length=5)
    vectorize.adapt(texts)
    inputs = tf_keras.Input((1,), dtype=tf.string)
    x = tf_keras.layers.Embedding(21, 8)(vectorize(inputs))
    x = tf_keras.layers.Bidirectional(tf_keras.layers.GRU(4, dropout=0.2))(x)
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(1, activation="sigmoid")(x))
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    return model, texts[:, None], labels


def normalized_regressor() -> tuple[tf_keras.Model, np.ndarray, np.ndarray]:
    """An adapted Normalization layer (its mean and variance tensors derive from its variables) and a Dense."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(3.0, 2.0, size=(24, 4)).astype("float32"), rng.normal(size=(24, 2)).astype("float32")
    normalize = tf_keras.layers.Normalization()
    normalize.adapt(x)
    model = tf_keras.Sequential([tf_keras.Input((4,)), normalize, tf_keras.layers.Dense(2)])
    model.compile("adam", "mse")
    return model, x, y


def mobilenet() -> tuple[tf_keras.Model, np.ndarray, np.ndarray]:
    """tf_keras.applications.MobileNetV2, small (alpha 0.35, 32x32 inputs, untrained weights)."""
    rng = np.random.default_rng(2)
    model = tf_keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), classes=4, alpha=0.35)
    model.compile("adam", "sparse_categorical_crossentropy")
    return model, rng.random((8, 32, 32, 3), dtype=np.float32), rng.integers(0, 4, size=(8,))


WITH_DATA = {"text": text_classifier, "normalization": normalized_regressor, "mobilenet": mobilenet}


def weight_values(model: tf_keras.Model) -> list[np.ndarray]:
    """Every weight as numpy, a lookup layer's vocabulary (a weight handler's tensors) included."""
    values = []
    for weight in list(model.weights) + list(model.optimizer.variables):
        tensors = weight.get_tensors() if hasattr(weight, "get_tensors") else [weight]
        values += [tensor.numpy() for tensor in tensors]
    return values


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


def reference_predictions(kind: str, stored: dict[str, np.ndarray]) -> np.ndarray:
    """Predictions on ``stored["x"]`` of a ``BUILDERS[kind]`` model built here from its code and given the stored
    values (``var_###``, in :func:`all_values` order; the model's own variables come first): what a stored payload's
    model computes on this machine, without loading the payload. Raises ``AssertionError`` where the code no
    longer builds variables of the stored shapes and dtypes."""
    model = BUILDERS[kind]()
    x = stored["x"]
    model(x[:1])
    for i, variable in enumerate(model.variables):
        value = stored[f"var_{i:03d}"]
        have = (np.dtype(variable.dtype.as_numpy_dtype), tuple(variable.shape))
        assert have == (value.dtype, value.shape), (
            f"variable #{i} {variable.name}: {have} here, stored {value.dtype}{value.shape}"
        )
        variable.assign(value)
    return model.predict(x, verbose=0)
