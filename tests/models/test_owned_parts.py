"""An optimizer or metric that belongs to a model in the same pickle travels as that model's."""

from __future__ import annotations

import copy
import io
import pickle

import joblib
import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def compiled(optimizer=None, metrics=None):
    model = zoo.sequential()
    model.compile(optimizer=optimizer or keras.optimizers.Adam(0.01), loss="mse", metrics=metrics)
    model.fit(*zoo.data(), epochs=1, batch_size=8, verbose=0)
    return model


def test_a_built_optimizer_after_its_model_comes_back_as_that_models_optimizer():
    model = compiled()
    for dump in (pickle.dumps, keras_pickle.dumps):
        restored, optimizer = pickle.loads(dump((model, model.optimizer)))
        assert optimizer is restored.optimizer
        assert_same_state(model, restored)
    restored, optimizer = keras_pickle.loads(keras_pickle.dumps({"model": model, "opt": model.optimizer})).values()
    assert optimizer is restored.optimizer


def test_a_built_optimizer_alone_or_before_its_model_is_refused_naming_its_model():
    model = compiled()
    for data in (model.optimizer, (model.optimizer, model)):
        with pytest.raises(keras_pickle.PickleRefusedError) as info:
            pickle.dumps(data)
        message = str(info.value)
        assert f"belongs to Sequential '{model.name}' (its optimizer)" in message
        assert "before it in the same pickle" in message


def test_a_metric_given_to_compile_comes_back_as_the_restored_models_metric():
    """With the running totals fit left in it: the model's payload carries them."""
    auc = keras.metrics.MeanSquaredError(name="mse_metric")
    model = compiled(metrics=[auc])
    assert float(auc.result()) != 0.0
    restored, metric = pickle.loads(pickle.dumps((model, auc)))
    assert metric is restored._compile_metrics._user_metrics[0]
    assert metric.name == "mse_metric" and float(metric.result()) == float(auc.result())
    copied, copied_metric = copy.deepcopy((model, auc))
    assert copied_metric is copied._compile_metrics._user_metrics[0]
    assert float(copied_metric.result()) == float(auc.result())


def test_deepcopy_keeps_the_pair_together():
    model = compiled()
    copied, optimizer = copy.deepcopy((model, model.optimizer))
    assert optimizer is copied.optimizer and copied is not model
    assert_same_state(model, copied)


sklearn = pytest.importorskip("scikeras.wrappers")


def build():
    return keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(8), keras.layers.Dense(1)])


def test_a_fitted_scikeras_estimator_with_an_optimizer_instance_pickles_and_continues_bit_identically():
    x, y = zoo.data(32)
    estimator = sklearn.KerasRegressor(
        build, optimizer=keras.optimizers.Adam(0.01), loss="mse", epochs=1, batch_size=8, verbose=0, shuffle=False
    )
    estimator.fit(x, y[:, 0])
    assert estimator.optimizer is estimator.model_.optimizer
    buffer = io.BytesIO()
    joblib.dump(estimator, buffer)
    buffer.seek(0)
    for restored in (pickle.loads(pickle.dumps(estimator)), copy.deepcopy(estimator), joblib.load(buffer)):
        assert restored.optimizer is restored.model_.optimizer
        assert restored.model_ is not estimator.model_
        assert_same_state(estimator.model_, restored.model_)
    restored.partial_fit(x, y[:, 0])
    estimator.partial_fit(x, y[:, 0])
    assert_same_state(estimator.model_, restored.model_)
    assert np.array_equal(restored.predict(x), estimator.predict(x))
