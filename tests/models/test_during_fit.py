"""A model pickled from inside fit (a callback) carries the values of that moment, on every backend."""

from __future__ import annotations

import copy
import pickle

import keras
import pytest
import zoo
from helpers import variable_values as named_values

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def variable_values(obj) -> list[tuple]:
    """(dtype, shape, raw bytes) of every variable and optimizer slot, in order (names differ between copies)."""
    return [values[1:] for values in named_values(obj)]


class Snapshots(keras.callbacks.Callback):
    """Pickles and deep-copies ``model`` (held directly, not through ``self.model``) during fit.

    Keras's ``Callback.model`` syncs the JAX trainer's state into the variables; a reference
    held any other way (a closure, an attribute, a data structure) sees what keras_pickle syncs.
    """

    def __init__(self, model):
        super().__init__()
        self.held = model
        self.taken = []

    def take(self, moment):
        payload = pickle.dumps(self.held, protocol=5)
        twin = copy.deepcopy(self.held)
        self.taken.append((moment, payload, twin, variable_values(self.model)))

    def on_train_batch_end(self, batch, logs=None):
        if batch == 1:
            self.take(f"batch {batch}")

    def on_epoch_end(self, epoch, logs=None):
        self.take(f"epoch {epoch}")


def test_a_model_pickled_inside_fit_carries_the_values_of_that_moment():
    model = zoo.sequential()
    model.compile(optimizer="adam", loss="mse")
    x, y = zoo.data(32)
    snapshots = Snapshots(model)
    model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0, callbacks=[snapshots])
    assert [moment for moment, *_ in snapshots.taken] == ["batch 1", "epoch 0", "batch 1", "epoch 1"]
    previous = None
    for moment, payload, twin, expected in snapshots.taken:
        for restored in (pickle.loads(payload), twin):
            assert variable_values(restored) == expected, f"{moment}: not the values of that moment"
        assert expected != previous, f"{moment}: training did not move between snapshots"
        previous = expected
    assert variable_values(model) == snapshots.taken[-1][3]
