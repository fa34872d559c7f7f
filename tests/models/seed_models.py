"""Models whose layers draw from seed generators, inside the wrappers that hold or clone them
(issue 35, section 3), for tests/models/test_seed_generators.py and the fresh process it starts.

Each builder returns a compiled model, trained one epoch so that every generator's counter has
moved (an untrained copy cannot tell two generators of equal counters apart), and its data.
The generators are unseeded, as the issue's model has them: their seeds come from
``keras.utils.set_random_seed``, one per generator in the order they are made.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers

SEQUENCE = (10, 4)


def sequences() -> tuple[np.ndarray, np.ndarray]:
    """The issue's data: eight masked sequences of different lengths, three classes."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, *SEQUENCE)).astype("float32")
    for i, length in enumerate([10, 7, 3, 9, 5, 10, 2, 6]):
        x[i, length:] = 0.0
    return x, rng.integers(0, 3, (8,))


@keras.saving.register_keras_serializable(package="seed_models")
class TwoGeneratorNoise(layers.Layer):
    """A layer with two seed generators of its own (dropout, then noise): both states have one name."""

    def __init__(self, rate=0.2, stddev=0.1, **kwargs):
        super().__init__(**kwargs)
        self.rate, self.stddev = rate, stddev
        self.dropout_generator = keras.random.SeedGenerator()
        self.noise_generator = keras.random.SeedGenerator()

    def call(self, inputs, training=False):
        if not training:
            return inputs
        kept = keras.random.dropout(inputs, self.rate, seed=self.dropout_generator)
        return kept + keras.random.normal(keras.ops.shape(inputs), stddev=self.stddev, seed=self.noise_generator)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "stddev": self.stddev}


@keras.saving.register_keras_serializable(package="seed_models")
class TwoGeneratorCell(layers.Layer):
    """An RNN cell with two seed generators (input dropout, state noise), for ``RNN`` and ``Bidirectional``."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units
        self.input_generator = keras.random.SeedGenerator()
        self.state_generator = keras.random.SeedGenerator()

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units), name="recurrent_kernel")

    def call(self, inputs, states, training=False):
        state = states[0] if isinstance(states, (list, tuple)) else states
        if training:
            inputs = keras.random.dropout(inputs, 0.2, seed=self.input_generator)
            state = state + keras.random.normal(keras.ops.shape(state), stddev=0.05, seed=self.state_generator)
        output = keras.ops.tanh(keras.ops.matmul(inputs, self.kernel) + keras.ops.matmul(state, self.recurrent_kernel))
        return output, [output]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def _classifier(hidden) -> keras.Model:
    """``hidden(masked inputs)`` under a Dropout and a softmax, compiled and trained one epoch."""
    inputs = keras.Input(shape=SEQUENCE)
    x = hidden(layers.Masking(mask_value=0.0)(inputs))
    x = layers.Dropout(0.2)(x)
    model = keras.Model(inputs, layers.Dense(3, activation="softmax")(x))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x_data, y_data = sequences()
    model.fit(x_data, y_data, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return model


def issue_recipe(x):
    """The issue's model: two Bidirectional GRUs, the first with dropout and recurrent dropout."""
    x = layers.Bidirectional(layers.GRU(8, return_sequences=True, dropout=0.1, recurrent_dropout=0.1))(x)
    return layers.Bidirectional(layers.GRU(8))(x)


def lstm_and_simple_rnn(x):
    """Bidirectional LSTM and SimpleRNN, both dropouts set: each cell's one generator serves both."""
    x = layers.Bidirectional(layers.LSTM(6, return_sequences=True, dropout=0.2, recurrent_dropout=0.3))(x)
    return layers.Bidirectional(layers.SimpleRNN(5, dropout=0.3, recurrent_dropout=0.2))(x)


def explicit_backward_layer(x):
    """A Bidirectional given its backward layer (another class, its own dropouts), then concatenated."""
    backward = layers.LSTM(6, dropout=0.3, recurrent_dropout=0.1, go_backwards=True, return_sequences=True)
    x = layers.Bidirectional(layers.GRU(6, dropout=0.2, return_sequences=True), backward_layer=backward)(x)
    return layers.GlobalAveragePooling1D()(x)


def stacked_cells(x):
    """A Bidirectional RNN of stacked cells, each with its own dropouts."""
    cells = [layers.GRUCell(6, dropout=0.2, recurrent_dropout=0.1), layers.LSTMCell(5, dropout=0.1)]
    return layers.Bidirectional(layers.RNN(layers.StackedRNNCells(cells)))(x)


def two_generator_cell(x):
    """A custom cell with two generators, cloned by Bidirectional (both of its states have one name).
    Unrolled on JAX: a cell that draws at every step cannot run inside JAX's scan (and PyTorch's
    unrolled RNN fails on a mask)."""
    unroll = keras.backend.backend() == "jax"
    return layers.Bidirectional(layers.RNN(TwoGeneratorCell(6), unroll=unroll))(x)


def time_distributed(x):
    """A layer with two generators and a Dropout, each inside TimeDistributed, before a Bidirectional GRU."""
    x = layers.TimeDistributed(TwoGeneratorNoise())(x)
    x = layers.TimeDistributed(layers.Dropout(0.3))(x)
    return layers.Bidirectional(layers.GRU(5, dropout=0.2))(x)


HIDDEN = {
    "the issue's Bidirectional GRUs": issue_recipe,
    "Bidirectional LSTM and SimpleRNN": lstm_and_simple_rnn,
    "Bidirectional with a backward layer": explicit_backward_layer,
    "Bidirectional stacked cells": stacked_cells,
    "Bidirectional cell with two generators": two_generator_cell,
    "TimeDistributed layers with generators": time_distributed,
}


def build(name: str) -> keras.Model:
    """The model ``name`` (a key of :data:`HIDDEN`), seeded, compiled and trained one epoch."""
    keras.utils.set_random_seed(0)
    return _classifier(HIDDEN[name])


def values(model) -> list[bytes]:
    """Every variable of ``model`` and its optimizer, in order, as raw bytes."""
    variables = list(model.variables) + list(model.optimizer.variables)
    return [np.asarray(keras.ops.convert_to_numpy(v.value)).tobytes() for v in variables]


def seed_states(model) -> list[bytes]:
    """The seed-generator states among ``model.variables``, in order."""
    return [
        np.asarray(keras.ops.convert_to_numpy(v.value)).tobytes()
        for v in model.variables
        if v.name == "seed_generator_state"
    ]


def next_step(model) -> list[bytes]:
    """:func:`values` after one more training step. PyTorch draws an unseeded dropout from torch's
    global generator, not from the layer's state: the global seed is set the same for every copy."""
    keras.utils.set_random_seed(1)
    x, y = sequences()
    model.train_on_batch(x[:4], y[:4])
    return values(model)
