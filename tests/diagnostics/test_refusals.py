"""Optimizers, metrics and callbacks refuse to pickle, clearly; deepcopy keeps their state."""

from __future__ import annotations

import copy
import pickle

import keras
import numpy as np
import pytest
import zoo

import keras_pickle


def built_optimizer():
    model = zoo.trained(zoo.sequential)
    return model, model.optimizer


def built_alone():
    """A built optimizer that no model holds: its slots would be lost (one never built travels by config)."""
    optimizer = keras.optimizers.Adam(0.1)
    optimizer.build([keras.Variable(np.zeros(3, "float32"))])
    return optimizer


def mean_metric():
    metric = keras.metrics.Mean()
    metric.update_state([1.0, 2.0])
    return metric


REFUSED = {
    "optimizer": (built_alone, "keras.optimizers.Adam", "Pickle the compiled model"),
    "metric": (mean_metric, "keras.metrics.Mean", "type(metric), metric.get_config()"),
    "callback": (
        lambda: keras.callbacks.EarlyStopping(patience=3),
        "keras.callbacks.EarlyStopping",
        "functools.partial(keras.callbacks.EarlyStopping",
    ),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_refusal_names_class_reason_and_alternative(kind, protocol):
    factory, public_name, alternative = REFUSED[kind]
    obj = factory()
    with pytest.raises(keras_pickle.PickleRefusedError) as info:
        pickle.dumps(obj, protocol=protocol)
    error = info.value
    assert isinstance(error, pickle.PicklingError) and isinstance(error, keras_pickle.KerasPickleError)
    message = str(error)
    assert f"Refusing to pickle {public_name}" in message
    assert "would" in message  # the reason: state would be lost
    assert alternative in message
    assert error.obj_type is type(obj)


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_refusal_says_what_happened_on_one_line_then_each_remedy_on_its_own(kind):
    factory, public_name, alternative = REFUSED[kind]
    with pytest.raises(keras_pickle.PickleRefusedError) as info:
        pickle.dumps(factory())
    first, *remedies = str(info.value).splitlines()
    assert first.startswith(f"Refusing to pickle {public_name}: ") and "would" in first
    assert remedies and all(line.startswith("  ") and not line.startswith("   ") for line in remedies), remedies
    assert any(alternative in line for line in remedies)
    assert any("pickle that model before it in the same pickle" in line for line in remedies)
    assert all(len(line) < 250 for line in [first, *remedies]), "one remedy a line"


def test_refusal_through_keras_pickle_dumps_and_in_containers():
    with pytest.raises(keras_pickle.PickleRefusedError, match="keras.metrics.Mean"):
        keras_pickle.dumps({"metrics": [mean_metric()]})


def test_refusal_covers_user_subclasses_without_own_reducer():
    class MyCallback(keras.callbacks.Callback):
        pass

    with pytest.raises(keras_pickle.PickleRefusedError, match="MyCallback"):
        pickle.dumps(MyCallback())


def test_a_class_with_its_own_reducer_keeps_it():
    with pytest.raises(keras_pickle.PickleRefusedError):
        pickle.dumps(zoo.ReducibleCallback(5))
    restored = pickle.loads(pickle.dumps(zoo.ReducibleCallbackWithReduce(5)))
    assert type(restored) is zoo.ReducibleCallbackWithReduce and restored.every == 5


def test_deepcopy_of_metric_keeps_accumulated_state():
    metric = mean_metric()
    twin = copy.deepcopy(metric)
    assert float(twin.result()) == 1.5
    assert [float(v) for v in twin.variables] == [3.0, 2.0]
    twin.update_state([10.0])
    assert float(metric.result()) == 1.5, "the copy must not share variables"


def test_deepcopy_of_built_optimizer_keeps_iterations_and_slots():
    model, optimizer = built_optimizer()
    twin = copy.deepcopy(optimizer)
    assert twin.built and int(twin.iterations) == int(optimizer.iterations) == 2
    assert len(twin.variables) == len(optimizer.variables)
    for a, b in zip(optimizer.variables, twin.variables):
        assert np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b)), a.path
        assert a is not b
    assert type(twin).get_config(twin) == optimizer.get_config()


def test_deepcopy_of_unbuilt_optimizer_and_callback_keep_settings():
    optimizer = keras.optimizers.SGD(learning_rate=0.3, momentum=0.5)
    twin = copy.deepcopy(optimizer)
    assert not twin.built
    assert twin.get_config() == optimizer.get_config()

    callback = keras.callbacks.EarlyStopping(monitor="val_loss", patience=4, min_delta=0.1)
    clone = copy.deepcopy(callback)
    assert (clone.monitor, clone.patience, clone.min_delta) == ("val_loss", 4, 0.1)
    assert clone is not callback


def test_deepcopy_of_model_and_its_optimizer_together_is_consistent():
    model, optimizer = built_optimizer()
    copies = copy.deepcopy({"model": model, "optimizer": optimizer})
    assert copies["optimizer"] is copies["model"].optimizer


def test_sklearn_style_clone_through_deepcopy_of_params():
    """sklearn.base.clone deep-copies non-estimator parameters."""
    params = {"optimizer": keras.optimizers.Adam(0.01), "metrics": [keras.metrics.AUC()], "loss": zoo.CustomMSE()}
    cloned = copy.deepcopy(params)
    assert cloned["optimizer"].get_config() == params["optimizer"].get_config()
    assert type(cloned["metrics"][0]) is keras.metrics.AUC
    assert type(cloned["loss"]) is zoo.CustomMSE


def test_copy_copy_of_metric_optimizer_and_callback():
    metric = mean_metric()
    twin = copy.copy(metric)
    assert float(twin.result()) == 1.5 and twin.variables[0] is not metric.variables[0]
    _model, optimizer = built_optimizer()
    assert int(copy.copy(optimizer).iterations) == 2
    callback = keras.callbacks.EarlyStopping(patience=9)
    shallow = copy.copy(callback)
    assert shallow is not callback and shallow.patience == 9


class SuperReducingLayer(zoo.Scale):
    """A user __reduce__ that defers to the inherited one."""

    def __reduce__(self):
        return super().__reduce__()


def test_user_reduce_calling_super_gets_the_keras_pickle_payload():
    layer = SuperReducingLayer(3.0)
    layer(zoo.data()[0])
    restored = pickle.loads(pickle.dumps(layer))
    assert type(restored) is SuperReducingLayer and restored.factor == 3.0
    assert np.array_equal(keras.ops.convert_to_numpy(layer.w), keras.ops.convert_to_numpy(restored.w))
