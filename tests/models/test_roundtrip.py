"""In-process round trips: every variable bit-exact, predictions identical,
and one more epoch of training identical to training the original."""

from __future__ import annotations

import pickle

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_predictions, assert_same_state, assert_trains_identically

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def round_trip(obj, protocol=pickle.HIGHEST_PROTOCOL):
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


@pytest.mark.parametrize("kind", sorted(zoo.BUILDERS))
@pytest.mark.parametrize("loss", ["mse", "custom_function", "custom_class"])
def test_compiled_trained_model(kind, loss):
    loss = {"mse": "mse", "custom_function": zoo.custom_mse, "custom_class": zoo.CustomMSE()}[loss]
    model = zoo.trained(zoo.BUILDERS[kind], loss=loss)
    restored = round_trip(model)
    assert type(restored) is type(model)
    assert_same_state(model, restored)
    assert (
        keras.ops.convert_to_numpy(restored.optimizer.iterations)
        == keras.ops.convert_to_numpy(model.optimizer.iterations)
        == 2
    )
    x, y = zoo.data()
    assert_same_predictions(model, restored, x)
    assert_trains_identically(model, restored, x, y)


@pytest.mark.parametrize("kind", sorted(zoo.BUILDERS))
def test_uncompiled_model(kind):
    keras.utils.set_random_seed(2)
    model = zoo.BUILDERS[kind]()
    restored = round_trip(model)
    assert_same_state(model, restored)
    assert_same_predictions(model, restored, zoo.data()[0])
    assert not restored.compiled


def test_compiled_but_untrained_model():
    model = zoo.sequential()
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    assert not model.optimizer.built
    restored = round_trip(model)
    for a, b in zip(model.variables, restored.variables):
        assert np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b)), a.path
    assert float(restored.optimizer.learning_rate) == float(model.optimizer.learning_rate)
    assert int(restored.optimizer.iterations) == 0
    x, y = zoo.data()
    assert_trains_identically(model, restored, x, y)


def untrained_with_loss_scaling() -> keras.Model:
    model = keras.Sequential(
        [keras.Input((zoo.FEATURES,)), keras.layers.Dense(4, dtype="mixed_float16"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.05)), loss="mse")
    model.optimizer.iterations.assign(3)
    assert not model.optimizer.built
    return model


def test_compiled_but_untrained_model_keeps_its_optimizer_unbuilt():
    """Building a LossScaleOptimizer adds its loss scale between its own variables and its inner optimizer's."""
    model = untrained_with_loss_scaling()
    data = pickle.dumps(model)
    restored = pickle.loads(data)
    assert not restored.optimizer.built
    assert_same_state(model, restored)
    assert pickle.dumps(restored) == data
    x, y = zoo.data()
    assert_trains_identically(model, restored, x, y)


def test_state_of_an_unbuilt_optimizer_goes_to_its_variables_in_a_built_one():
    """If the rebuilt optimizer is built anyway, the saved variables find their counterparts by name."""
    from keras_pickle._capture import gather_state as _capture_state
    from keras_pickle._rebuild import assign_state as _rebuild_state

    model = untrained_with_loss_scaling()
    state = _capture_state.capture(model)
    twin = keras.models.clone_model(model)
    twin.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.05)), loss="mse")
    twin.optimizer.build(twin.trainable_variables)
    _rebuild_state.apply_to_optimizer(twin, state)
    model.optimizer.build(model.trainable_variables)  # what the first training step does
    assert [keras.ops.convert_to_numpy(v).tolist() for v in twin.optimizer.variables] == [
        keras.ops.convert_to_numpy(v).tolist() for v in model.optimizer.variables
    ]


def test_unbuilt_models_stay_unbuilt_and_build_alike():
    model = keras.Sequential([keras.layers.Dense(3), zoo.Scale(2.0)])
    restored = round_trip(model)
    assert not restored.built and restored.variables == []
    assert [type(layer) for layer in restored.layers] == [keras.layers.Dense, zoo.Scale]
    assert restored.layers[1].factor == 2.0

    subclassed = zoo.Tower(5)
    restored_subclassed = round_trip(subclassed)
    assert type(restored_subclassed) is zoo.Tower and restored_subclassed.units == 5
    assert not restored_subclassed.built


def test_standalone_layers():
    x = zoo.data()[0]
    unbuilt = zoo.Scale(4.0)
    restored = round_trip(unbuilt)
    assert type(restored) is zoo.Scale and not restored.built and restored.factor == 4.0

    built = zoo.Scale(4.0)
    built(x)
    restored = round_trip(built)
    assert_same_state(built, restored)
    assert np.array_equal(keras.ops.convert_to_numpy(built(x)), keras.ops.convert_to_numpy(restored(x)))

    dense = keras.layers.Dense(3, activation=zoo.scaled_relu)
    dense(x)
    restored = round_trip(dense)
    assert_same_state(dense, restored)
    assert restored.activation is zoo.scaled_relu

    block = zoo.Block(5)
    block(x)
    restored = round_trip(block)
    assert_same_state(block, restored)
    assert np.array_equal(
        keras.ops.convert_to_numpy(block(x, training=False)), keras.ops.convert_to_numpy(restored(x, training=False))
    )


def test_dropout_seed_state_travels():
    """Dropout draws from a seed generator whose state must survive, or training diverges."""
    model = zoo.trained(zoo.sequential)
    seed_paths = [v.path for v in model.variables if "seed_generator" in v.path]
    assert seed_paths, "the model should have a seed generator"
    restored = round_trip(model)
    x, y = zoo.data()
    assert_trains_identically(model, restored, x, y)


def test_preprocessing_layers_keep_adapted_state():
    texts = np.array(["the cat sat", "the dog ran", "a cat ran far"])
    lookup = keras.layers.StringLookup()
    lookup.adapt(np.array(["a", "b", "c", "a"]))
    vectorizer = keras.layers.TextVectorization(output_mode="tf_idf", max_tokens=20)
    vectorizer.adapt(texts)
    normalization = keras.layers.Normalization()
    normalization.adapt(zoo.data()[0])

    for layer, sample in [(lookup, np.array(["a", "c", "zzz"])), (vectorizer, texts), (normalization, zoo.data()[0])]:
        restored = round_trip(layer)
        assert np.array_equal(
            keras.ops.convert_to_numpy(layer(sample)), keras.ops.convert_to_numpy(restored(sample))
        ), type(layer).__name__
    assert round_trip(lookup).get_vocabulary() == lookup.get_vocabulary()
    assert round_trip(vectorizer).get_vocabulary() == vectorizer.get_vocabulary()


def test_model_with_preprocessing_layers():
    x, y = zoo.data()
    normalization = keras.layers.Normalization()
    normalization.adapt(x)
    inputs = keras.Input((zoo.FEATURES,))
    outputs = keras.layers.Dense(1)(zoo.Scale(0.5)(normalization(inputs)))
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    model.fit(x, y, verbose=0)
    restored = round_trip(model)
    assert_same_state(model, restored)
    assert_same_predictions(model, restored, x)
    assert_trains_identically(model, restored, x, y)


def test_keras_application_architecture():
    model = keras.applications.MobileNetV3Small(
        weights=None, input_shape=(32, 32, 3), classes=3, include_preprocessing=True
    )
    restored = round_trip(model)
    assert_same_state(model, restored)
    x = np.random.default_rng(0).uniform(0, 255, size=(2, 32, 32, 3)).astype("float32")
    assert_same_predictions(model, restored, x)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="JAX trains these eagerly in minutes; PyTorch's CPU training of EfficientNetB0 is not deterministic "
    "(two identical copies diverge after one step), so bit-identical training cannot be asked of a copy",
)
@pytest.mark.parametrize("name", ["EfficientNetB0", "ResNet50V2"])
def test_trained_keras_applications_continue_bit_identically(name):
    """Dropout seeds (EfficientNet), BatchNorm statistics and Adam slots: one step after a round trip."""
    model = getattr(keras.applications, name)(weights=None, input_shape=(32, 32, 3), classes=3)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", run_eagerly=True)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, size=(4, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 3, size=(4,))
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    restored = round_trip(model)
    assert_same_state(model, restored)
    assert_same_predictions(model, restored, x)
    model.fit(x, y, epochs=1, batch_size=4, shuffle=False, verbose=0)
    restored.fit(x, y, epochs=1, batch_size=4, shuffle=False, verbose=0)
    assert_same_state(model, restored)


def test_registered_custom_layer_round_trips():
    x = zoo.data()[0]
    layer = zoo.RegisteredScale(1.25)
    layer(x)
    restored = round_trip(layer)
    assert type(restored) is zoo.RegisteredScale
    assert_same_state(layer, restored)


def test_loss_objects_keep_pickling():
    loss = keras.losses.MeanSquaredError(reduction="sum", name="my_mse")
    restored = round_trip(loss)
    assert type(restored) is type(loss) and restored.reduction == "sum" and restored.name == "my_mse"
    custom = round_trip(zoo.CustomMSE(name="custom"))
    assert type(custom) is zoo.CustomMSE and custom.name == "custom"
    y_true, y_pred = np.ones((2, 3), "float32"), np.zeros((2, 3), "float32")
    assert float(custom(y_true, y_pred)) == float(zoo.CustomMSE()(y_true, y_pred))


def test_keras_pickle_dumps_and_loads_with_options(tmp_path):
    model = zoo.trained(zoo.functional)
    data = keras_pickle.dumps(model, checksum=True)
    restored = keras_pickle.loads(data)
    assert_same_state(model, restored)

    path = tmp_path / "model.pkl"
    with open(path, "wb") as f:
        keras_pickle.dump({"model": model, "note": "hello"}, f)
    with open(path, "rb") as f:
        loaded = keras_pickle.load(f)
    assert loaded["note"] == "hello"
    assert_same_state(model, loaded["model"])


def test_sequential_without_input_built_by_a_call_and_a_deep_stack():
    x, y = zoo.data()
    called = keras.Sequential([keras.layers.Dense(4), zoo.Scale(1.1), keras.layers.Dense(1)])
    called(x)
    deep = keras.Sequential([keras.Input((zoo.FEATURES,))] + [keras.layers.Dense(4) for _ in range(40)])
    for model in (called, deep):
        restored = round_trip(model)
        assert restored.built and len(restored.layers) == len(model.layers)
        assert_same_state(model, restored)
        assert_same_predictions(model, restored, x)
