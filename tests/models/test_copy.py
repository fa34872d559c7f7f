"""copy.deepcopy / copy.copy of models and layers: in-process, independent, memo-aware."""

from __future__ import annotations

import copy
import pickle
from unittest import mock

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_predictions, assert_same_state, assert_trains_identically, constructed_before_install

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


@pytest.mark.parametrize("kind", sorted(zoo.BUILDERS))
def test_deepcopy_is_faithful_and_independent(kind):
    model = zoo.trained(zoo.BUILDERS[kind])
    twin = copy.deepcopy(model)
    assert type(twin) is type(model)
    assert_same_state(model, twin)
    x, y = zoo.data()
    assert_same_predictions(model, twin, x)
    assert_trains_identically(model, twin, x, y)

    twin.layers[-1].kernel.assign(np.zeros(twin.layers[-1].kernel.shape))
    assert not np.array_equal(
        keras.ops.convert_to_numpy(model.layers[-1].kernel), keras.ops.convert_to_numpy(twin.layers[-1].kernel)
    )


def test_deepcopy_does_not_serialize():
    model = zoo.trained(zoo.sequential)
    with mock.patch.object(pickle, "dumps", side_effect=AssertionError("pickled")):
        with mock.patch("keras_pickle._capture.encode.layer_payload", side_effect=AssertionError("payload")):
            twin = copy.deepcopy(model)
    assert_same_state(model, twin)


@pytest.mark.parametrize("kind", ["sequential", "functional"])
def test_deepcopy_copies_each_variable_where_it_lives_without_a_host_round_trip(kind):
    """No value goes to numpy: each is the backend's tensor on its device, copied there by the twin's
    variable (what keeps a copy on an accelerator at device speed)."""
    from keras_pickle._keras3 import backend

    model = zoo.trained(zoo.BUILDERS[kind])
    moved = []
    to_numpy = backend.to_numpy

    def watched(value, **kwargs):
        if isinstance(value, keras.Variable) or not isinstance(value, np.ndarray):
            moved.append(getattr(value, "path", type(value).__name__))
        return to_numpy(value, **kwargs)

    with mock.patch.object(backend, "to_numpy", watched):
        with mock.patch.object(keras.ops, "convert_to_numpy", side_effect=AssertionError("to the host")):
            twin = copy.deepcopy(model)
    assert moved == [], f"moved to the host: {moved[:5]}"
    assert_same_state(model, twin)


def test_deepcopy_respects_the_memo():
    model = zoo.trained(zoo.functional)
    first_layer = model.layers[1]
    copies = copy.deepcopy({"a": model, "b": model, "layer": first_layer, "var": first_layer.kernel})
    assert copies["a"] is copies["b"]
    assert copies["layer"] is copies["a"].layers[1]
    assert copies["var"] is copies["a"].layers[1].kernel
    assert copies["layer"] is not first_layer


def test_copy_copy_is_an_independent_copy():
    model = zoo.trained(zoo.sequential)
    twin = copy.copy(model)
    assert_same_state(model, twin)
    assert twin.optimizer is not model.optimizer


def test_deepcopy_of_standalone_layer():
    layer = zoo.Scale(2.5)
    layer(zoo.data()[0])
    twin = copy.deepcopy(layer)
    assert twin.factor == 2.5
    assert_same_state(layer, twin)


# --------------------------------------------------------------------------
# What a config cannot rebuild: deepcopy still copies it, as deepcopy without keras_pickle would
# (Keras's own deepcopy tests: inline-lambda regularizers, initializers and constraints; subclassed
# models never built that own variables; layers copied before and after building)
# --------------------------------------------------------------------------


def lambda_conv() -> keras.layers.Conv2D:
    return keras.layers.Conv2D(
        4,
        (3, 3),
        kernel_initializer=lambda shape, dtype=None: keras.ops.ones(shape, dtype=dtype) * 0.1,
        bias_regularizer=lambda x: 1e-3 * keras.ops.sum(x),
        kernel_regularizer=lambda x: 1e-2 * keras.ops.sum(keras.ops.abs(x)),
        kernel_constraint=lambda w: keras.ops.clip(w, -0.5, 0.5),
    )


def numpy_of(variables) -> list[np.ndarray]:
    return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in variables]


def test_deepcopy_of_a_built_layer_with_inline_lambdas():
    layer = lambda_conv()
    images = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(layer(images))
    twin = copy.deepcopy(layer)
    assert type(twin) is keras.layers.Conv2D and twin.built
    assert_same_state(layer, twin)
    assert twin.bias_regularizer is layer.bias_regularizer  # deepcopy shares functions, as without keras_pickle
    assert np.array_equal(keras.ops.convert_to_numpy(twin(images)), expected)
    assert len(twin.losses) == len(layer.losses) == 2
    twin.kernel.assign(np.zeros(twin.kernel.shape, "float32"))
    assert numpy_of([layer.kernel])[0].max() > 0, "assigning the copy's kernel changed the original's"


def test_deepcopy_of_an_unbuilt_layer_with_inline_lambdas_builds_only_the_copy():
    layer = lambda_conv()
    twin = copy.deepcopy(layer)
    assert not twin.built and twin.kernel_constraint is layer.kernel_constraint
    twin(np.ones((1, 5, 5, 3), "float32"))
    assert twin.built and not layer.built, "building the copy built the original"
    assert np.array_equal(numpy_of([twin.kernel])[0], np.full((3, 3, 3, 4), 0.1, "float32"))
    assert len(twin.losses) == 2 and not layer.losses


def lambda_regularized_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((zoo.FEATURES,)),
            keras.layers.Dense(8, kernel_regularizer=lambda w: 1e-3 * keras.ops.sum(keras.ops.square(w))),
            keras.layers.Dense(1),
        ]
    )


def test_deepcopy_of_a_trained_model_holding_an_inline_lambda_trains_like_the_original():
    model = zoo.trained(lambda_regularized_model)
    twin = copy.deepcopy(model)
    assert twin.optimizer is not model.optimizer
    assert_same_state(model, twin)
    x, y = zoo.data()
    assert_same_predictions(model, twin, x)
    before = numpy_of(model.variables)
    twin.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(before, numpy_of(model.variables))), (
        "training the copy moved the original"
    )
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert_same_state(model, twin)


def test_deepcopy_in_one_call_keeps_a_copied_lambda_model_and_its_parts_together():
    model = zoo.trained(lambda_regularized_model)
    first = model.layers[0]
    copies = copy.deepcopy({"model": model, "layer": first, "kernel": first.kernel, "again": model})
    assert copies["model"] is copies["again"]
    assert copies["layer"] is copies["model"].layers[0] and copies["layer"] is not first
    assert copies["kernel"] is copies["model"].layers[0].kernel


class OwnsAVariable(keras.Model):
    """tf-keras's model_subclassing_test ``test_deepcopy``, in Keras 3: never built, a variable of its own."""

    def __init__(self):
        super().__init__()
        self.my_variable = keras.Variable(0.0, trainable=False)
        self.layer = keras.layers.Dense(4)

    def call(self, obs):
        return self.layer(obs)


def test_deepcopy_of_a_never_built_subclassed_model_that_owns_a_variable():
    model = OwnsAVariable()
    model.my_variable.assign(model.my_variable + 1.0)
    twin = copy.deepcopy(model)
    assert type(twin) is OwnsAVariable and not twin.built
    assert float(keras.ops.convert_to_numpy(twin.my_variable.value)) == 1.0
    assert twin.my_variable is not model.my_variable and twin.layer is not model.layer
    twin.my_variable.assign(5.0)
    assert float(keras.ops.convert_to_numpy(model.my_variable.value)) == 1.0
    twin(np.ones((2, 3), "float32"))
    assert twin.layer.built and not model.layer.built, "calling the copy built the original"
    assert len(twin.variables) == 3 and len(model.variables) == 1


def test_deepcopy_that_cannot_copy_either_way_raises_a_keras_pickle_error_naming_both_causes():
    import threading

    layer = lambda_conv()
    layer(np.ones((1, 5, 5, 3), "float32"))
    layer._tracker.unlock()
    layer.guard = threading.Lock()  # no deepcopy copies a lock, with keras_pickle or without
    with pytest.raises(pickle.PicklingError) as raised:
        copy.deepcopy(layer)
    message = str(raised.value)
    assert type(raised.value).__module__ == "keras_pickle.errors"
    assert "Cannot deep-copy Conv2D" in message and "config failed" in message and "lock" in message
    assert "pickle" not in message.lower(), message  # a copy's failure, in a copy's words

    model = keras.Sequential([keras.Input((5, 5, 3)), layer])
    with pytest.raises(keras_pickle.KerasPicklingError) as raised:
        copy.deepcopy({"model": model})
    message = str(raised.value)
    assert message.startswith("Cannot deep-copy Sequential"), message  # what was copied, then the part that failed
    assert (
        f"a part of it cannot be copied: Conv2D '{layer.name}'" in message and "cannot copy '_thread.lock'" in message
    )
    assert "pickle" not in message.lower() and len(message) < 800, message


class _WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """keras.io's warm-up pattern: a constructor and __call__, no get_config."""

    def __init__(self, base):
        self.base = base

    def __call__(self, step):
        return self.base * keras.ops.minimum(1.0, (keras.ops.cast(step, "float32") + 1.0) / 10.0)


def test_an_optimizer_that_cannot_be_copied_says_so_and_each_remedy_copies():
    """Its schedule has no get_config: a family error that says "Cannot deep-copy", names the optimizer and
    the schedule at fault, and whose two remedies work: a get_config(), or the model deep-copied instead."""

    def trained(optimizer):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(np.ones((8, 4), "float32"), np.ones((8, 2), "float32"), verbose=0)
        return model

    early = trained(constructed_before_install(lambda: keras.optimizers.Adam(_WarmUp(0.01))))
    with pytest.raises(keras_pickle.KerasPicklingError, match="Cannot deep-copy Adam") as info:
        copy.deepcopy(early.optimizer)
    assert "_WarmUp" in str(info.value) and "get_config()" in str(info.value)

    class _WarmUpWithConfig(_WarmUp):
        def get_config(self):
            return {"base": self.base}

    configured = trained(keras.optimizers.Adam(_WarmUpWithConfig(0.01)))
    twin = copy.deepcopy(configured.optimizer)  # the first remedy
    assert type(twin._learning_rate) is _WarmUpWithConfig
    assert int(twin.iterations.numpy()) == int(configured.optimizer.iterations.numpy()) == 1
    model = trained(keras.optimizers.Adam(_WarmUp(0.01)))
    copied = copy.deepcopy(model)  # the second
    assert type(copied.optimizer._learning_rate) is _WarmUp and copied.optimizer is not model.optimizer
    assert float(copied.optimizer.learning_rate) == float(model.optimizer.learning_rate)
    assert int(copied.optimizer.iterations.numpy()) == 1
