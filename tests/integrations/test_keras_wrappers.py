"""Keras's own scikit-learn wrappers: keras.wrappers.SKLearnClassifier / SKLearnRegressor.

A fitted wrapper keeps ``history_``, the ``keras.callbacks.History`` that
``fit`` returned. History is the one callback keras_pickle pickles by default:
it is a plain record of the fit (every attribute is kept, including the model
it is attached to), so nothing would be lost.
"""

from __future__ import annotations

import pickle

import integration_models as im
import numpy as np
import pytest
from helpers import assert_same_state, variable_values

pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install -e '.[test]' installs it)")

import joblib  # noqa: E402
from keras.wrappers import SKLearnClassifier, SKLearnRegressor  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402


def assert_same_fitted(fitted, loaded, x):
    assert loaded.model_ is not fitted.model_
    assert_same_state(fitted.model_, loaded.model_)
    assert np.array_equal(fitted.predict(x), loaded.predict(x))
    assert loaded.history_.history == fitted.history_.history
    assert loaded.history_.model is loaded.model_  # the History still belongs to its model


def test_grid_search_over_a_model_instance_with_custom_layers(tmp_path):
    x, y = im.classification_data()
    fit_kwargs = {"batch_size": 16, "verbose": 0, "shuffle": False}
    estimator = SKLearnClassifier(model=im.softmax_classifier(), fit_kwargs={**fit_kwargs, "epochs": 1})
    grid = {"fit_kwargs": [{**fit_kwargs, "epochs": 1}, {**fit_kwargs, "epochs": 2}]}
    search = GridSearchCV(estimator, grid, cv=2, n_jobs=2, error_score="raise").fit(x, y)
    best = search.best_estimator_
    assert {type(layer) for layer in best.model_.layers} >= {im.Shift, im.Gate}
    assert len(best.history_.history["loss"]) == best.fit_kwargs["epochs"]

    assert_same_fitted(best, pickle.loads(pickle.dumps(best)), x)
    joblib.dump(best, tmp_path / "best.joblib")
    assert_same_fitted(best, joblib.load(tmp_path / "best.joblib"), x)


def test_grid_search_over_a_regressor_instance_with_custom_layers(tmp_path):
    x, y = im.regression_data()
    model = im.regressor()
    before = variable_values(model)
    fit_kwargs = {"batch_size": 8, "verbose": 0, "shuffle": False}
    estimator = SKLearnRegressor(model=model, fit_kwargs={**fit_kwargs, "epochs": 1})
    grid = {"fit_kwargs": [{**fit_kwargs, "epochs": 1}, {**fit_kwargs, "epochs": 2}]}
    search = GridSearchCV(estimator, grid, cv=2, n_jobs=2, error_score="raise").fit(x, y)
    best = search.best_estimator_
    assert variable_values(model) == before  # the workers and the refit trained copies
    assert best.model_ is not model
    assert {type(layer) for layer in best.model_.layers} >= {im.Shift, im.Gate}
    epochs = best.fit_kwargs["epochs"]
    assert len(best.history_.history["loss"]) == epochs
    assert int(best.model_.optimizer.iterations) == 4 * epochs  # the refit: 32 samples, batch 8

    assert_same_fitted(best, pickle.loads(pickle.dumps(best)), x)
    joblib.dump(best, tmp_path / "best.joblib")
    assert_same_fitted(best, joblib.load(tmp_path / "best.joblib"), x)


def test_fitted_regressor_pickles_and_trains_on():
    x, y = im.regression_data()
    estimator = SKLearnRegressor(model=im.regressor(), fit_kwargs={"epochs": 2, "batch_size": 8, "verbose": 0})
    estimator.fit(x, y)
    loaded = pickle.loads(pickle.dumps(estimator, protocol=5))
    assert_same_fitted(estimator, loaded, x)
    assert int(loaded.model_.optimizer.iterations) == 8
    for fitted in (estimator, loaded):  # warm training continues identically
        fitted.model_.fit(x, y.reshape(-1, 1), epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert_same_state(estimator.model_, loaded.model_)
