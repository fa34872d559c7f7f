"""Classes pickle cannot name (defined inside a function): by registered name, by value, or a clear error."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import keras
import numpy as np
import pytest
import zoo
from helpers import run_python

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def local_layer_class(register: bool = False):
    class Doubler(keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

        def call(self, x):
            return x * self.w * 2.0

    if register:
        Doubler = keras.saving.register_keras_serializable(package="test_local_classes")(Doubler)
    return Doubler


def model_of(layer_class) -> keras.Model:
    return keras.Sequential([keras.Input((zoo.FEATURES,)), layer_class(), keras.layers.Dense(1)])


def test_an_unregistered_local_class_round_trips_in_its_process_as_it_does_without_keras_pickle():
    # Keras's own pickling and scikeras register such a class in the process; keras_pickle names it
    # for this process only, without touching Keras's registry.
    cls = local_layer_class()
    model = model_of(cls)
    data = pickle.dumps(model)
    assert cls not in keras.saving.get_custom_objects().values()
    x = zoo.data()[0]
    for restored in (pickle.loads(data), keras_pickle.loads(data)):
        assert type(restored.layers[0]) is cls
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))
    report = keras_pickle.check(model)
    assert not report.ok and "defined inside a function" in str(report)


def test_an_unregistered_local_class_is_a_clear_error_in_another_process(tmp_path):
    data = pickle.dumps(model_of(local_layer_class()))
    path = tmp_path / "model.pkl"
    path.write_bytes(data)
    code = f"""
import pickle, keras_pickle
try:
    pickle.loads(open({str(path)!r}, "rb").read())
except keras_pickle.KerasUnpicklingError as e:
    print("ERROR", e)
"""
    output = run_python(code, keras_imported=True)
    assert "ERROR" in output and "local_layer_class.<locals>.Doubler" in output
    assert "loads in that process only" in output and "register_keras_serializable" in output


def test_an_unregistered_local_class_travels_by_value_with_cloudpickle():
    model = model_of(local_layer_class())
    restored = cloudpickle.loads(cloudpickle.dumps(model))
    x = zoo.data()[0]
    assert type(restored.layers[0]).__qualname__.endswith("<locals>.Doubler")
    assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))


def test_a_registered_local_class_travels_by_its_registered_name():
    cls = local_layer_class(register=True)
    model = model_of(cls)
    data = pickle.dumps(model)
    assert b"test_local_classes>Doubler" in data
    x = zoo.data()[0]
    for restored in (pickle.loads(data), keras_pickle.loads(data), copy.deepcopy(model)):
        assert type(restored.layers[0]) is cls
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))


def test_a_registered_name_unknown_where_it_loads_is_a_clear_error():
    cls = local_layer_class(register=True)
    data = pickle.dumps(model_of(cls))
    name = keras.saving.get_registered_name(cls)
    registry = keras.saving.get_custom_objects()
    del registry[name]
    try:
        with pytest.raises(keras_pickle.KerasUnpicklingError, match="not registered in this process"):
            pickle.loads(data)
    finally:
        registry[name] = cls


def test_deepcopy_of_a_local_class_needs_no_pickling():
    model = model_of(local_layer_class())
    twin = copy.deepcopy(model)
    assert type(twin.layers[0]) is type(model.layers[0])
