"""keras.io's compile objects without ``**kwargs`` or ``get_config`` (issue 35, sections 2 and 5), for
tests/models/test_compile_objects.py and the fresh process it starts.

``CustomMSE`` and ``CategoricalTruePositives`` are the training guide's, with constructors that take
no ``**kwargs`` (so Keras's ``cls(**config)`` refuses the ``reduction``/``dtype`` their base configs
write). ``WarmUpCosine`` is the keras.io schedule pattern: a constructor and ``__call__``, no
``get_config``.
"""

from __future__ import annotations

import math

import keras
import numpy as np


class CustomMSE(keras.losses.Loss):
    def __init__(self, regularization_factor=0.1, name="custom_mse"):
        super().__init__(name=name)
        self.regularization_factor = regularization_factor

    def call(self, y_true, y_pred):
        mse = keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)
        reg = keras.ops.mean(keras.ops.square(0.5 - y_pred), axis=-1)
        return mse + reg * self.regularization_factor


class CategoricalTruePositives(keras.metrics.Metric):
    def __init__(self, name="categorical_true_positives"):
        super().__init__(name=name)
        self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = keras.ops.reshape(keras.ops.argmax(y_pred, axis=1), (-1, 1))
        y_true = keras.ops.reshape(keras.ops.argmax(y_true, axis=1), (-1, 1))
        values = keras.ops.cast(keras.ops.equal(y_true, y_pred), "float32")
        self.true_positives.assign_add(keras.ops.sum(values))

    def result(self):
        return self.true_positives.value  # the guide returns the variable, which JAX cannot trace

    def reset_state(self):
        self.true_positives.assign(0.0)


class WarmUpCosine(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, learning_rate_base, total_steps, warmup_learning_rate, warmup_steps):
        super().__init__()
        self.learning_rate_base = learning_rate_base
        self.total_steps = total_steps
        self.warmup_learning_rate = warmup_learning_rate
        self.warmup_steps = warmup_steps
        self.pi = math.pi

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        progress = (step - self.warmup_steps) / float(self.total_steps - self.warmup_steps)
        rate = 0.5 * self.learning_rate_base * (1 + keras.ops.cos(self.pi * progress))
        slope = (self.learning_rate_base - self.warmup_learning_rate) / self.warmup_steps
        warmup = slope * step + self.warmup_learning_rate
        return keras.ops.where(step < self.warmup_steps, warmup, rate)


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 16)]
    return x, y


def compiled(*, schedule: bool = False) -> keras.Model:
    """A Functional model compiled with ``CustomMSE(0.5)`` and the metric (and WarmUpCosine), trained an epoch."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(3)(keras.layers.Dense(8, activation="relu")(inputs))
    model = keras.Model(inputs, outputs)
    rate = WarmUpCosine(0.05, total_steps=20, warmup_learning_rate=0.0, warmup_steps=3) if schedule else 0.01
    model.compile(
        optimizer=keras.optimizers.Adam(rate),
        loss=CustomMSE(regularization_factor=0.5),
        metrics=[CategoricalTruePositives()],
    )
    x, y = data()
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    return model


def values(model) -> list[bytes]:
    """Every variable of ``model`` and its optimizer, in order, as raw bytes."""
    variables = list(model.variables) + list(model.optimizer.variables)
    return [np.asarray(keras.ops.convert_to_numpy(v.value)).tobytes() for v in variables]


def next_steps(model) -> list:
    """:func:`values` after two more training steps, and the metric's result and loss of the last."""
    x, y = data()
    for _ in range(2):
        logs = model.train_on_batch(x[:8], y[:8], return_dict=True)
    return [*values(model), sorted((k, float(v)) for k, v in logs.items())]
