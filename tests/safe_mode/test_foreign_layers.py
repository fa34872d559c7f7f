"""Layers that embed code or another format: refused by safe mode up front, carried by plain pickle."""

from __future__ import annotations

import json
import pickle
from unittest import mock

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state

import keras_pickle
from keras_pickle import _format
from keras_pickle._safe_mode.rules import FOREIGN_LAYERS

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def forged_with(class_name: str) -> bytes:
    """A real model's payload whose Dense layer the config now calls ``class_name``."""
    model = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(2, name="wrapped")])
    _restore, (header, body) = model.__reduce_ex__(5)
    config = json.loads(body["config"])
    (layer,) = [entry for entry in config["config"]["layers"] if entry["class_name"] == "Dense"]
    layer.update(class_name=class_name, module="keras.layers", registered_name=None)
    body["config"] = json.dumps(config)

    class Forged:
        def __reduce__(self):
            return _format.restore, (header, body)

    return pickle.dumps(Forged(), protocol=5)


@pytest.mark.parametrize("class_name", sorted(FOREIGN_LAYERS))
def test_safe_mode_refuses_a_layer_embedding_code_before_keras_builds_it(class_name):
    data = forged_with(class_name)
    # Keras's own from_config of these layers imports their framework before it checks safe mode.
    unexpected = AssertionError(f"{class_name}.from_config ran")
    with mock.patch.object(getattr(keras.layers, class_name), "from_config", side_effect=unexpected):
        with pytest.raises(keras_pickle.UnsafePayloadError) as info:
            keras_pickle.loads(data)
    message = str(info.value)
    assert f"{class_name} layer 'wrapped'" in message and "safe_mode=False" in message
    assert info.value.what == f"{class_name} layer 'wrapped'"
    warnings = keras_pickle.inspect(data).warnings
    assert any(class_name in warning and "safe mode refuses it" in warning for warning in warnings), warnings


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="TorchModuleWrapper needs the torch backend")
def test_a_wrapped_torch_module_round_trips_under_plain_pickle():
    import torch

    torch.manual_seed(0)
    inputs = keras.Input((zoo.FEATURES,))
    wrapped = keras.layers.TorchModuleWrapper(
        torch.nn.Linear(zoo.FEATURES, 3), name="torch_linear", output_shape=(None, 3)
    )
    model = keras.Model(inputs, keras.layers.Dense(2)(wrapped(inputs)))
    model.compile("adam", "mse")
    x, y = zoo.data()
    model.fit(x, y[:, :2], epochs=1, batch_size=8, verbose=0)

    data = pickle.dumps(model)
    with pytest.raises(keras_pickle.UnsafePayloadError, match="TorchModuleWrapper layer 'torch_linear'"):
        keras_pickle.loads(data)
    for restored in (pickle.loads(data), keras_pickle.loads(data, safe_mode=False)):
        assert_same_state(model, restored)
        expected = keras.ops.convert_to_numpy(model(x))
        assert np.array_equal(expected, keras.ops.convert_to_numpy(restored(x)))
