"""Models as people write them, where keras_pickle used to lose or refuse state."""

from __future__ import annotations

import copy
import pickle

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state, assert_trains_identically
from keras import ops

import keras_pickle
from keras_pickle._keras3 import survey as _survey

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def test_an_adapted_discretization_keeps_its_bin_boundaries():
    values = np.arange(100, dtype="float32").reshape(-1, 1)
    bins = keras.layers.Discretization(num_bins=4)
    bins.adapt(values)
    model = keras.Sequential([keras.Input((1,)), bins])
    probe = np.array([[10.0], [30.0], [60.0], [90.0]], dtype="float32")
    expected = keras.ops.convert_to_numpy(model(probe))
    assert sorted(set(expected.ravel().tolist())) == [0, 1, 2, 3]
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert restored.layers[0].bin_boundaries == bins.bin_boundaries
        assert np.array_equal(keras.ops.convert_to_numpy(restored(probe)), expected)


def test_an_adapted_normalization_still_normalizes():
    x = zoo.data(64)[0] * 5.0 + 3.0
    norm = keras.layers.Normalization()
    norm.adapt(x)
    model = keras.Sequential([keras.Input((zoo.FEATURES,)), norm])
    expected = keras.ops.convert_to_numpy(model(x))
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), expected)


def test_deepcopy_of_a_model_built_under_a_mixed_policy_under_a_float32_policy():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(8), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        x, y = zoo.data()
        model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    finally:
        keras.config.set_dtype_policy(previous)
    assert keras.config.dtype_policy().name == "float32"
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert twin.layers[0].dtype_policy.name == "mixed_float16"
        assert_same_state(model, twin)
        assert_trains_identically(copy.deepcopy(model), twin, x, y)


def test_a_lambda_that_needs_a_module_global_fails_at_dumps_naming_it():
    inputs = keras.Input((zoo.FEATURES,))
    outputs = keras.layers.Lambda(lambda t: ops.relu(t) * 2.0, name="doubled_relu")(inputs)
    model = keras.Model(inputs, outputs)
    with pytest.raises(keras_pickle.KerasPicklingError) as info:
        pickle.dumps(model)
    message = str(info.value)
    assert "'doubled_relu'" in message and "'ops'" in message and "global" in message
    report = keras_pickle.check(model)
    assert not report.ok and "'ops'" in str(report), report
    # A lambda that needs nothing from its module still pickles, and loads.
    plain = keras.Model(inputs, keras.layers.Lambda(lambda t: t * 2.0, name="doubled")(inputs))
    restored = pickle.loads(pickle.dumps(plain))
    x = zoo.data()[0]
    assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(plain(x)))


def quantized_model(mode: str) -> keras.Model:
    model = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(16), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    x, y = zoo.data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    model.quantize(mode)
    model.compile(optimizer="adam", loss="mse")
    return model


def values_by_place(model: keras.Model) -> dict[str, tuple]:
    """Every variable and optimizer slot, keyed by its place in the model (independent of creation order)."""
    keys = _survey.variable_keys(model)
    slots = _survey.optimizer_variable_keys(model.optimizer, list(zip(model.variables, keys)))
    pairs = [*zip(keys, model.variables), *zip(slots, model.optimizer.variables)]
    assert len({key for key, _ in pairs}) == len(pairs), "places are not unique"
    values = {}
    for key, variable in pairs:
        array = keras.ops.convert_to_numpy(variable)
        values[key] = (array.dtype.str, array.shape, array.tobytes())
    return values


@pytest.mark.parametrize("mode", ["int8", "int4", "float8"])
def test_quantized_models_round_trip_with_variables_matched_by_place(mode):
    model = quantized_model(mode)
    x = zoo.data()[0]
    expected = keras.ops.convert_to_numpy(model(x))
    weights = [w.tobytes() for w in model.get_weights()]
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert values_by_place(restored) == values_by_place(model)
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), expected)
        # Listed in the original's order (a float8 Dense rebuilt from its config creates its scales first).
        assert [w.tobytes() for w in restored.get_weights()] == weights
        assert [v.name for v in restored.optimizer.variables] == [v.name for v in model.optimizer.variables]


def test_lora_enabled_layers_round_trip():
    inputs = keras.Input((3,), dtype="int32")
    embedded = keras.layers.Embedding(10, 4, name="embed")(inputs)
    mixed = keras.layers.EinsumDense("abc,cd->abd", output_shape=(3, 5), name="einsum")(embedded)
    outputs = keras.layers.Dense(2, name="dense")(keras.layers.Flatten()(mixed))
    model = keras.Model(inputs, outputs)
    for name in ("embed", "einsum", "dense"):
        model.get_layer(name).enable_lora(2)
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).integers(0, 10, size=(16, 3)).astype("int32")
    y = np.random.default_rng(1).normal(size=(16, 2)).astype("float32")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert_same_state(model, restored)
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))
        assert_trains_identically(copy.deepcopy(model), restored, x, y)


def test_a_stateful_rnn_carries_its_states():
    model = keras.Sequential(
        [keras.Input((3, 2), batch_size=4), keras.layers.LSTM(5, stateful=True), keras.layers.Dense(1)]
    )
    x = np.random.default_rng(0).normal(size=(4, 3, 2)).astype("float32")
    model(x)  # the carried states are no longer zeros (JAX's predict leaves the variables as they were)
    states = [keras.ops.convert_to_numpy(s) for s in model.layers[0].states]
    assert all(np.abs(s).max() > 0 for s in states)
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        restored_states = [keras.ops.convert_to_numpy(s) for s in restored.layers[0].states]
        assert all(np.array_equal(a, b) for a, b in zip(states, restored_states))
        assert_same_state(model, restored)
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))
        # The call advanced the original's states: restore them for the next copy.
        for variable, value in zip(model.layers[0].states, states):
            variable.assign(value)


def test_models_with_concrete_valued_variables_are_built_once_on_load(monkeypatch):
    """A stateful RNN makes its states from zeros in build(): the deferred rebuild no longer falls back."""
    from keras_pickle._rebuild import from_blueprint as _from_blueprint

    model = keras.Sequential(
        [keras.Input((3, 2), batch_size=4), keras.layers.GRU(5, stateful=True), keras.layers.Dense(1)]
    )
    model(np.random.default_rng(0).normal(size=(4, 3, 2)).astype("float32"))  # carried states are not zeros
    data = pickle.dumps(model)
    builds = []
    original = _from_blueprint.from_config
    monkeypatch.setattr(_from_blueprint, "from_config", lambda *a, **k: builds.append(1) or original(*a, **k))
    for restored in (pickle.loads(data), copy.deepcopy(model)):
        assert_same_state(model, restored)
    assert len(builds) == 2, f"{len(builds)} builds for 2 copies"


@pytest.mark.parametrize("optimizer", ["adam", "ema", "loss_scale"])
def test_a_built_optimizers_slots_are_created_from_the_saved_values(optimizer, monkeypatch):
    """Loading a trained model runs no initializer of a variable whose saved value is in the payload:
    the optimizer's slots are created from their values, as the layers' variables are."""
    if optimizer == "loss_scale":
        keras.config.set_dtype_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    finally:
        keras.config.set_dtype_policy("float32")
    chosen = {
        "adam": keras.optimizers.Adam(0.01),
        "ema": keras.optimizers.Adam(0.01, use_ema=True),
        "loss_scale": keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01)),
    }[optimizer]
    model.compile(optimizer=chosen, loss="mse")
    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0, shuffle=False)
    data = pickle.dumps(model)

    initialized = []
    variable_class = type(model.variables[0])
    original = variable_class._initialize_with_initializer
    monkeypatch.setattr(
        variable_class,
        "_initialize_with_initializer",
        lambda self, initializer: initialized.append(self.path) or original(self, initializer),
    )
    loaded, copied = pickle.loads(data), copy.deepcopy(model)
    for restored in (loaded, copied):
        assert_same_state(model, restored)
        slots = {v.path for v in restored.optimizer.variables}
        assert not slots & set(initialized), f"initializers ran for {sorted(slots & set(initialized))}"
    if optimizer == "ema" and keras.backend.backend() == "jax":
        return  # Keras 3.15's JAX trainer fails a second fit with use_ema=True, with or without keras_pickle
    assert_trains_identically(model, loaded, x, x[:, :1])
    copied.fit(x, x[:, :1], epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert_same_state(model, copied)
