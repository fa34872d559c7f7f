"""Ray: a real local runtime (``ray.init(num_cpus=2)``), loopback only.

Ray serializes with cloudpickle and protocol 5, so with keras_pickle installed
a model's weights travel out of band: each arrives as a view of Ray's object
store, not as bytes copied into the pickle stream.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import integration_models as im
import keras
import numpy as np
import pytest
from helpers import REPO_DIR, TESTS_DIR, assert_same_state, variable_values

import keras_pickle
from keras_pickle._wire import arrays

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[test]' installs it)")

TIMEOUT = 240


@pytest.fixture(scope="module")
def ray_runtime():
    """A local Ray runtime whose workers can import the tests' modules, this one included (``fit_remotely``)."""
    saved = os.environ.get("PYTHONPATH")
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_DIR), str(TESTS_DIR), here, saved]))
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=256 << 20,
            configure_logging=False,
        )
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture
def arriving_weights(monkeypatch):
    """The type of the data each decoded weight array arrived in."""
    seen: list[type] = []
    decode = arrays.decode_array

    def spy(entry):
        seen.append(type(entry[3]))
        return decode(entry)

    monkeypatch.setattr(arrays, "decode_array", spy)
    return seen


@pytest.mark.backends
@pytest.mark.timeout(TIMEOUT)
def test_put_and_get_round_trip_with_weights_out_of_band(ray_runtime, arriving_weights):
    model = im.fit_regressor(im.regressor())
    restored = ray.get(ray.put(model), timeout=TIMEOUT)
    assert restored is not model
    assert_same_state(model, restored)
    x = im.regression_data(8, seed=2)[0]
    assert np.array_equal(model.predict(x, verbose=0), restored.predict(x, verbose=0))

    weights = len(model.variables) + len(model.optimizer.variables)
    assert len(arriving_weights) == weights
    # In band, pickle would hand each array over as bytes copied out of the stream.
    assert not any(issubclass(kind, (bytes, bytearray)) for kind in arriving_weights), arriving_weights


@ray.remote
def fit_remotely(model: keras.Model, epochs: int) -> keras.Model:
    return im.fit_regressor(model, epochs)


@pytest.mark.timeout(TIMEOUT)
def test_a_remote_task_takes_and_returns_a_model_with_custom_layers(ray_runtime):
    models = [im.regressor(seed) for seed in (1, 2)]
    before = [variable_values(m) for m in models]
    trained = ray.get([fit_remotely.remote(m, 2) for m in models], timeout=TIMEOUT)
    for model, original, values in zip(trained, models, before):
        assert variable_values(original) == values
        assert {type(layer) for layer in model.layers} >= {im.Shift, im.Gate}
        assert int(model.optimizer.iterations) == 4  # 2 epochs of 16 samples, batch 8
        assert_same_state(im.fit_regressor(copy.deepcopy(original), epochs=2), model)
    assert keras_pickle.is_installed()
