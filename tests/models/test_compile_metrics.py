"""A fitted model's compile metrics travel with their running totals: ``get_metrics_result()`` is equal
after loading, and the rebuilt model keeps the metrics and losses Keras resolved from the labels' shape."""

from __future__ import annotations

import copy
import pickle

import keras
import numpy as np
import pytest
import zoo

import keras_pickle
from keras_pickle._inspect.machine import evaluate
from keras_pickle._inspect.opening import opened

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def results(model) -> dict:
    return {name: float(keras.ops.convert_to_numpy(value)) for name, value in model.get_metrics_result().items()}


def holds_totals(metric) -> bool:
    return any(np.any(keras.ops.convert_to_numpy(v)) for v in metric.variables)


def round_trips(model) -> list:
    """``(how, copy)`` of ``model`` by each way there is, all taken before any is used."""
    return [
        ("pickle", pickle.loads(pickle.dumps(model))),
        ("keras_pickle", keras_pickle.loads(keras_pickle.dumps(model))),
        ("deepcopy", copy.deepcopy(model)),
    ]


def binary_model():
    keras.utils.set_random_seed(1)
    x = np.linspace(0, 1, 64, dtype="float32").reshape(32, 2)
    y = (x.sum(axis=1, keepdims=True) > 1).astype("float32")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=[keras.metrics.AUC(), "accuracy"])
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    return model, x, y


def test_a_fitted_models_metrics_results_are_equal_after_loading():
    model, _x, _y = binary_model()
    expected = results(model)
    # the AUC is "auc", or "auc_N" where an earlier test of the process made one: Keras numbers default names
    auc = model._compile_metrics.metrics[0].name
    assert set(expected) == {"loss", auc, "accuracy"} and auc.startswith("auc")
    assert holds_totals(model._compile_metrics.metrics[0])
    for how, restored in round_trips(model):
        assert results(restored) == expected, how


def test_sparse_labels_on_two_outputs_come_back_sparse():
    """'accuracy' and 'crossentropy' resolve from the labels' shape: sparse here, as the original's."""
    keras.utils.set_random_seed(2)
    x = np.linspace(-1, 1, 96, dtype="float32").reshape(24, 4)
    y = (np.arange(24) % 3).reshape(24, 1)
    inputs = keras.Input((4,))
    outputs = [keras.layers.Dense(3, activation="softmax", name=name)(inputs) for name in ("a", "b")]
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="crossentropy", metrics=["accuracy", "accuracy"])
    model.fit(x, [y, y], epochs=1, batch_size=8, verbose=0)
    expected = results(model)
    assert {"a_loss", "b_loss", "a_accuracy", "b_accuracy"} <= set(expected)
    copies = round_trips(model)
    for how, restored in copies:
        assert results(restored) == expected, how
        classes = [type(m).__name__ for m in restored._compile_metrics.metrics]
        assert classes == ["SparseCategoricalAccuracy"] * 2, how
        losses = [loss.loss.fn.__name__ for loss in restored._compile_loss._flat_losses]
        assert losses == ["sparse_categorical_crossentropy"] * 2, how
    # evaluate() resets the totals, then counts these batches: the same numbers as the original's.
    evaluated = model.evaluate(x, [y, y], verbose=0)
    for how, restored in copies:
        assert restored.evaluate(x, [y, y], verbose=0) == evaluated, how


@keras.saving.register_keras_serializable("test_compile_metrics")
class TwoLayers(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))


def test_a_subclassed_models_metrics_are_built_from_its_build_config():
    keras.utils.set_random_seed(3)
    model = TwoLayers()
    model.compile(optimizer="adam", loss="mse", metrics=[keras.metrics.MeanAbsoluteError()])
    x, y = zoo.data()
    model.fit(x, y[:, :1], epochs=1, batch_size=8, verbose=0)
    expected = results(model)
    for how, restored in round_trips(model):
        assert results(restored) == expected, how


def metric_keys(data: bytes) -> list[str]:
    """The keys of the payload's metric_variables, read by the inspector's stack machine (nothing runs)."""
    with opened(data) as stream:
        (payload,) = evaluate(stream, hold_data=False).payloads
    body = payload.args[1]
    return [entry[0] for entry in body["metric_variables"]]


def test_only_a_model_whose_compile_metrics_are_built_carries_totals():
    """A model compiled without metrics, or never fitted, carries what it did before: no compile totals."""
    x, y = zoo.data()
    without = zoo.sequential()
    without.compile(optimizer="adam", loss="mse")
    without.fit(x, y, epochs=1, verbose=0)
    unfitted = zoo.sequential()
    unfitted.compile(optimizer="adam", loss="mse", metrics=["mae"])
    assert metric_keys(keras_pickle.dumps(without)) == []
    assert metric_keys(keras_pickle.dumps(unfitted)) == []
    model, _x, _y = binary_model()
    assert metric_keys(keras_pickle.dumps(model)) == [
        "compile_loss/total",
        "compile_loss/count",
        *(f"compile_metrics/0/AUC/{v.name}" for v in model._compile_metrics.metrics[0].variables),
        "compile_metrics/1/BinaryAccuracy/total",
        "compile_metrics/1/BinaryAccuracy/count",
    ]


def test_a_compile_metric_after_its_fitted_model_comes_back_as_the_models_own_with_its_totals():
    model, _x, _y = binary_model()
    auc = model._compile_metrics._user_metrics[0]
    restored, restored_auc = pickle.loads(pickle.dumps((model, auc)))
    assert restored_auc is restored._compile_metrics.metrics[0]
    assert holds_totals(auc) and float(restored_auc.result()) == float(auc.result())
    assert [keras.ops.convert_to_numpy(v).tolist() for v in restored_auc.variables] == [
        keras.ops.convert_to_numpy(v).tolist() for v in auc.variables
    ]


def test_a_standalone_metric_keeps_its_refusal():
    model, _x, _y = binary_model()
    auc = model._compile_metrics._user_metrics[0]
    for obj in (auc, (auc, model)):
        with pytest.raises(keras_pickle.PickleRefusedError, match="Refusing to pickle keras.metrics.AUC"):
            pickle.dumps(obj)
