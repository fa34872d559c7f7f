"""Models and custom objects shared by the tests (importable by reference).

Nothing here is registered with Keras unless its name says so: keras_pickle
must carry these objects without registration.
"""

from __future__ import annotations

import keras
import numpy as np

FEATURES = 4


def data(n: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = rng.normal(size=(n, 1)).astype("float32")
    return x, y


# Registered, as keras.io's guides do: safe mode loads a plain function only if Keras vouches for it
# (registered) or the caller names it (tests/safe_mode/test_allowlist.py covers unregistered ones).
@keras.saving.register_keras_serializable(package="zoo")
def scaled_relu(x):
    """A custom activation function."""
    return keras.ops.relu(x) * 0.5


@keras.saving.register_keras_serializable(package="zoo")
def custom_mse(y_true, y_pred):
    """A custom loss function."""
    return keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)


class Scale(keras.layers.Layer):
    """An unregistered custom layer with a weight and a constructor argument."""

    def __init__(self, factor: float = 2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

    def call(self, x):
        return x * self.w * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


@keras.saving.register_keras_serializable(package="zoo")
class RegisteredScale(Scale):
    """The same layer, registered with Keras."""


class CustomMSE(keras.losses.Loss):
    """An unregistered custom loss class."""

    def call(self, y_true, y_pred):
        return keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)


class Block(keras.layers.Layer):
    """A custom layer that owns sublayers, including a seeded Dropout."""

    def __init__(self, units: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.dense = keras.layers.Dense(units, activation=scaled_relu)
        self.dropout = keras.layers.Dropout(0.3, seed=7)
        self.norm = keras.layers.BatchNormalization()

    def call(self, x, training=None):
        return self.norm(self.dropout(self.dense(x), training=training), training=training)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class Tower(keras.Model):
    """An unregistered subclassed model: nested blocks, a nested submodel, a shared layer."""

    def __init__(self, units: int = 8, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.block = Block(units)
        self.head = keras.Sequential([keras.layers.Dense(units), Scale(1.5)])
        self.shared = keras.layers.Dense(units)
        self.out = keras.layers.Dense(1)

    def call(self, x, training=None):
        h = self.block(x, training=training)
        h = self.shared(self.head(h)) + self.shared(h)
        return self.out(h)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package="zoo")
class RegisteredTower(Tower):
    """The same subclassed model, registered with Keras."""


class NoConfigModel(keras.Model):
    """A subclassed model without get_config: its arguments cannot be recovered."""

    def __init__(self, units: int = 3):
        super().__init__()
        self.units = units
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)


class Wrapper(keras.Model):
    """A subclassed model without get_config whose constructor takes a model and an array."""

    def __init__(self, encoder, scale, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.scale = scale

    def call(self, x):
        return self.encoder(x) * self.scale


def sequential() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(8, activation=scaled_relu),
            keras.layers.Dropout(0.5, seed=3),
            keras.layers.BatchNormalization(),
            Scale(3.0),
            keras.layers.Dense(1),
        ]
    )


def functional() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    shared = keras.layers.Dense(8, activation="relu")
    inner = keras.Sequential([keras.Input((8,)), RegisteredScale(0.5), keras.layers.Dense(8)])
    a = shared(inputs)
    b = inner(shared(keras.layers.Dense(FEATURES)(inputs)))
    h = keras.layers.Concatenate()([a, b])
    h = keras.layers.Dropout(0.25, seed=11)(h)
    h = Block(6)(h)
    return keras.Model(inputs, keras.layers.Dense(1)(h))


def subclassed() -> keras.Model:
    model = Tower(6)
    model(np.zeros((1, FEATURES), "float32"))
    return model


def registered_subclassed() -> keras.Model:
    model = RegisteredTower(5)
    model(np.zeros((1, FEATURES), "float32"))
    return model


class Reuse(keras.layers.Layer):
    """Applies the layer it is given; several can share one (tied weights through the config)."""

    def __init__(self, inner: keras.layers.Layer, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner

    def build(self, input_shape):
        if not self.inner.built:
            self.inner.build(input_shape)

    def call(self, x):
        return self.inner(x)

    def get_config(self):
        return {**super().get_config(), "inner": keras.saving.serialize_keras_object(self.inner)}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "inner": keras.saving.deserialize_keras_object(config["inner"])})


def shared_objects() -> keras.Model:
    """A Functional whose layers share objects, which its config records (``shared_object_id``).

    Three ``Reuse`` layers share one Dense (two variables in all); two Dense
    layers share an initializer and a regularizer. Not in ``BUILDERS``.
    """
    initializer = keras.initializers.RandomNormal(stddev=0.5, seed=5)
    regularizer = keras.regularizers.L2(1e-3)
    tied = keras.layers.Dense(FEATURES, activation="tanh")
    inputs = keras.Input((FEATURES,))
    h = Reuse(tied)(Reuse(tied)(Reuse(tied)(inputs)))
    h = keras.layers.Dense(8, kernel_initializer=initializer, kernel_regularizer=regularizer)(h)
    h = keras.layers.Dense(8, kernel_initializer=initializer, kernel_regularizer=regularizer)(h)
    return keras.Model(inputs, keras.layers.Dense(1, kernel_regularizer=regularizer)(h))


BUILDERS = {
    "sequential": sequential,
    "functional": functional,
    "subclassed": subclassed,
    "registered_subclassed": registered_subclassed,
}


def trained(builder, *, loss="mse", epochs: int = 1) -> keras.Model:
    """A model built by ``builder``, compiled with Adam and trained for ``epochs``."""
    keras.utils.set_random_seed(1)
    model = builder()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    x, y = data()
    model.fit(x, y, epochs=epochs, batch_size=8, verbose=0, shuffle=False)
    return model


class ReducibleCallback(keras.callbacks.Callback):
    """A plain callback subclass: refused like any callback."""

    def __init__(self, every: int):
        super().__init__()
        self.every = every


class ReducibleCallbackWithReduce(ReducibleCallback):
    """A callback that defines its own pickling: keras_pickle leaves it alone."""

    def __reduce__(self):
        return (type(self), (self.every,))
