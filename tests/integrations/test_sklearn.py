"""scikit-learn + scikeras 0.13: parallel grid searches, fitted estimators, clone, import order.

Instances of metrics and callbacks inside estimators are refused by default where state would be
lost (an optimizer instance travels by its config, or as its model's once fitted); the two ways
forward (the scikeras way, and ``install(allow=("metrics", "callbacks"))``) are tested here with a
real ``GridSearchCV(n_jobs=2)`` and ``joblib.dump`` / ``joblib.load``.
"""

from __future__ import annotations

import copy
import pickle

import integration_models as im
import keras
import numpy as np
import pytest
from helpers import TESTS_DIR, assert_same_state, run_python, run_script, variable_values

import keras_pickle

pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install -e '.[test]' installs it)")
pytest.importorskip("scikeras", reason="scikeras is not installed (pip install -e '.[test]' installs it)")

import joblib  # noqa: E402
from scikeras.wrappers import KerasClassifier  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402

X, Y = im.classification_data()
FIT = {"batch_size": 16, "verbose": 0, "random_state": 0}


@pytest.fixture
def allow_metrics_and_callbacks():
    keras_pickle.install(allow=("metrics", "callbacks"))
    yield
    keras_pickle.install(allow=())


def assert_same_estimator(fitted, loaded):
    """The loaded estimator's model is bit-identical and predicts exactly the same."""
    assert type(loaded) is type(fitted)
    assert loaded.model_ is not fitted.model_
    assert_same_state(fitted.model_, loaded.model_)
    assert np.array_equal(fitted.predict_proba(X), loaded.predict_proba(X))
    assert np.array_equal(fitted.predict(X), loaded.predict(X))


def grid_search(estimator, grid):
    search = GridSearchCV(estimator, grid, cv=2, n_jobs=2, error_score="raise")
    return search.fit(X, Y)


# --------------------------------------------------------------------------
# A compiled model instance with custom layers
# --------------------------------------------------------------------------


def test_grid_search_over_a_compiled_model_instance(tmp_path):
    model = im.binary_classifier()
    before = variable_values(model)
    estimator = KerasClassifier(model=model, epochs=1, **FIT)
    search = grid_search(estimator, {"epochs": [1, 2]})

    # The workers and the refit trained clones: the user's model is untouched.
    assert variable_values(model) == before
    best = search.best_estimator_
    assert best.model_ is not model
    assert {type(layer) for layer in best.model_.layers} >= {im.Shift, im.Gate}
    assert int(best.model_.optimizer.iterations) == 3 * best.epochs  # 48 samples, batch 16

    assert_same_estimator(best, pickle.loads(pickle.dumps(best)))
    joblib.dump(best, tmp_path / "best.joblib")
    assert_same_estimator(best, joblib.load(tmp_path / "best.joblib"))


def test_clone_does_not_share_the_keras_model():
    estimator = KerasClassifier(model=im.binary_classifier(), epochs=1, **FIT).fit(X, Y)
    twin = clone(estimator)
    assert twin.model is not estimator.model
    assert_same_state(estimator.model, twin.model)  # also: no variable shared
    twin.fit(X, Y)
    assert int(twin.model_.optimizer.iterations) == 2 * int(estimator.model_.optimizer.iterations)
    assert variable_values(estimator.model) != variable_values(twin.model)


# --------------------------------------------------------------------------
# Metric, callback and optimizer instances
# --------------------------------------------------------------------------


def instances_estimator(**overrides):
    params = dict(
        model=im.build_for_scikeras,
        loss="binary_crossentropy",
        optimizer="adam",
        optimizer__learning_rate=0.02,
        metrics=[keras.metrics.AUC(name="auc")],
        callbacks=[keras.callbacks.EarlyStopping(monitor="loss", patience=1)],
        epochs=2,
        **FIT,
    )
    params.update(overrides)
    if not isinstance(params["optimizer"], str):
        del params["optimizer__learning_rate"]  # routed parameters need a class
    return KerasClassifier(**params)


def accumulated_auc() -> keras.metrics.AUC:
    metric = keras.metrics.AUC(name="auc")
    metric.update_state([0.0, 1.0], [0.2, 0.9])
    return metric


def built_adam() -> keras.optimizers.Adam:
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build([keras.Variable(np.zeros(3, "float32"))])
    return optimizer


@pytest.mark.parametrize(
    "overrides, refused",
    [
        ({"callbacks": None, "metrics": [accumulated_auc]}, "keras.metrics.AUC"),
        ({"metrics": None}, "keras.callbacks.EarlyStopping"),
        ({"metrics": None, "callbacks": None, "optimizer": built_adam}, "keras.optimizers.Adam"),
    ],
)
def test_instances_in_an_estimator_are_refused_where_state_would_be_lost_naming_their_class(overrides, refused):
    """A metric that accumulated state, a callback, a built optimizer: refused. (A fresh metric and an optimizer
    never built hold nothing their config does not: they travel, tests/diagnostics/test_api_advice.py.)"""
    overrides = {key: ([v() for v in value] if isinstance(value, list) else value() if callable(value) else value)
                 for key, value in overrides.items()}  # fmt: skip
    estimator = instances_estimator(**overrides)
    with pytest.raises(keras_pickle.PickleRefusedError, match=f"Refusing to pickle {refused}") as info:
        pickle.dumps(estimator)
    if refused == "keras.optimizers.Adam":  # allow= never covers a built optimizer: the scikeras spelling is named
        assert "optimizer='adam', optimizer__learning_rate=0.01" in str(info.value)
    else:
        assert "keras_pickle.install(allow=(" in str(info.value)


def metrics_results(model) -> dict:
    return {name: float(keras.ops.convert_to_numpy(value)) for name, value in model.get_metrics_result().items()}


def test_a_grid_search_over_a_metric_instance_pickles_with_the_models_running_totals(tmp_path):
    """The everyday style, metrics=[keras.metrics.AUC()]: after a whole search, pickle.dump(search) works and the
    best estimator's model comes back with the same metrics results, its AUC still the estimator's own."""
    search = grid_search(instances_estimator(callbacks=None), {"epochs": [1, 2]})
    best = search.best_estimator_
    assert best.metrics[0] is best.model_._compile_metrics.metrics[0]
    assert metrics_results(best.model_)["auc"] != 0.0
    with open(tmp_path / "search.pkl", "wb") as f:
        pickle.dump(search, f)
    with open(tmp_path / "search.pkl", "rb") as f:
        loaded = pickle.load(f).best_estimator_
    assert metrics_results(loaded.model_) == metrics_results(best.model_)
    assert loaded.metrics[0] is loaded.model_._compile_metrics.metrics[0]
    assert_same_estimator(best, loaded)


def test_partial_fit_with_a_metric_instance_pickles_between_calls_and_keeps_its_history_names():
    """scikeras's test_partial_fit_history_metric_names, pickled between the calls: the history keeps one
    entry per metric and per call."""
    estimator = instances_estimator(callbacks=None, epochs=1)
    names = None
    for calls in (1, 2):
        estimator.partial_fit(X, Y)
        estimator = pickle.loads(pickle.dumps(estimator))
        names = names or list(estimator.history_)
        assert list(estimator.history_) == names and len(names) == 2 and "loss" in names
        assert [len(values) for values in estimator.history_.values()] == [calls, calls]


def scikeras_way_estimator():
    """The same estimator without instances: classes, strings and routed parameters."""
    return KerasClassifier(
        model=im.build_for_scikeras,
        loss="binary_crossentropy",
        optimizer="adam",
        optimizer__learning_rate=0.02,
        metrics=[keras.metrics.AUC],
        callbacks=[keras.callbacks.EarlyStopping],
        callbacks__monitor="loss",
        callbacks__patience=1,
        epochs=2,
        **FIT,
    )


@pytest.mark.parametrize("fitted", [False, True], ids=["unfitted", "fitted"])
def test_check_names_where_instances_sit_and_passes_the_scikeras_way(fitted):
    estimator = instances_estimator()
    scikeras_way = scikeras_way_estimator()
    if fitted:
        estimator.fit(X, Y)
        scikeras_way.fit(X, Y)

    report = keras_pickle.check(estimator, name="estimator")
    problems = {p.path: p for p in report.problems}
    # The metric object holds only its config before fit, and travels as its fitted model's after (that model's
    # payload carries its totals): only the callback is refused.
    refused = [("estimator.callbacks[0]", "EarlyStopping", "callbacks")]
    assert set(problems) == {path for path, _, _ in refused}, str(report)
    for path, cls, kind in refused:
        problem = problems[path]
        assert problem.type_name.rsplit(".", 1)[-1] == cls, problem.type_name
        assert "refused by design" in problem.reason
        assert "install(allow=" in problem.advice and repr(kind) in problem.advice, problem.advice
        assert f"{path} ({problem.type_name})" in str(report)
    with pytest.raises(keras_pickle.PickleRefusedError):  # check() tells the truth
        pickle.dumps(estimator)

    report = keras_pickle.check(scikeras_way, name="estimator")
    assert report.ok and not report.notes, str(report)
    assert "estimator is pickle-safe" in str(report)
    restored = pickle.loads(pickle.dumps(scikeras_way))
    if fitted:
        assert_same_estimator(scikeras_way, restored)


def test_the_scikeras_way_strings_classes_and_routed_parameters(tmp_path):
    search = grid_search(scikeras_way_estimator(), {"optimizer__learning_rate": [0.01, 0.05]})
    best = search.best_estimator_
    assert keras.ops.convert_to_numpy(best.model_.optimizer.learning_rate) == np.float32(best.optimizer__learning_rate)
    # scikeras made an EarlyStopping instance from the class; it is not pickled...
    assert isinstance(best._fit_callbacks[0], keras.callbacks.EarlyStopping)
    joblib.dump(best, tmp_path / "best.joblib")
    loaded = joblib.load(tmp_path / "best.joblib")
    assert_same_estimator(best, loaded)
    # ...but derived again from the parameters on load, as scikeras does in fit().
    (callback,) = loaded._fit_callbacks
    assert type(callback) is keras.callbacks.EarlyStopping and callback.patience == 1
    assert callback is not best._fit_callbacks[0]
    loaded.partial_fit(X, Y)  # the loaded estimator trains on
    assert int(loaded.model_.optimizer.iterations) == int(best.model_.optimizer.iterations) + 3


def metric_state(metric):
    return [keras.ops.convert_to_numpy(v).tobytes() for v in metric.variables]


@pytest.mark.usefixtures("allow_metrics_and_callbacks")
def test_allow_metrics_and_callbacks_grid_search_and_joblib(tmp_path):
    search = grid_search(instances_estimator(), {"epochs": [1, 2]})
    best = search.best_estimator_
    (auc,) = best.metrics
    (stopping,) = best.callbacks
    assert float(np.sum(keras.ops.convert_to_numpy(auc.true_positives))) > 0, (
        "the metric instance carries training state"
    )
    assert stopping.model is best.model_ and stopping.best is not None

    joblib.dump(best, tmp_path / "best.joblib")
    loaded = joblib.load(tmp_path / "best.joblib")
    assert_same_estimator(best, loaded)
    (auc2,) = loaded.metrics
    assert type(auc2) is keras.metrics.AUC and auc2 is not auc
    assert metric_state(auc2) == metric_state(auc) and float(auc2.result()) == float(auc.result())
    (stopping2,) = loaded.callbacks
    assert sorted(vars(stopping2)) == sorted(vars(stopping))
    for name in ("monitor", "patience", "wait", "stopped_epoch", "best", "best_epoch", "params"):
        assert getattr(stopping2, name) == getattr(stopping, name), name
    # Every attribute: the model it is attached to is the estimator's model, as before.
    assert stopping2.model is loaded.model_
    assert loaded._fit_callbacks[0] is stopping2


def test_an_optimizer_instance_needs_no_opting_in_unfitted_or_fitted():
    """What docs/integrations/README.md and scikit-learn-scikeras.md say: no install(allow=("optimizers",))."""
    estimator = instances_estimator(optimizer=keras.optimizers.Adam(0.01), metrics=None, callbacks=None, epochs=1)
    restored = pickle.loads(pickle.dumps(estimator))  # never built: its config
    assert restored.optimizer.get_config() == estimator.optimizer.get_config() and not restored.optimizer.built
    estimator.fit(X, Y)
    restored = pickle.loads(pickle.dumps(estimator))  # built: its model's, with the model's state
    assert restored.optimizer is restored.model_.optimizer
    assert int(restored.optimizer.iterations) == int(estimator.optimizer.iterations) > 0
    assert_same_estimator(estimator, restored)


@pytest.mark.usefixtures("allow_metrics_and_callbacks")
def test_built_optimizers_travel_only_as_their_models_under_allow():
    keras_pickle.install(allow=("metrics", "callbacks", "optimizers"))
    estimator = instances_estimator(optimizer=keras.optimizers.Adam(0.01), epochs=1)
    restored = pickle.loads(pickle.dumps(estimator))  # not built yet: config and state
    assert restored.optimizer.get_config() == estimator.optimizer.get_config()
    estimator.fit(X, Y)
    assert estimator.optimizer.built and estimator.optimizer is estimator.model_.optimizer
    # Pickled with the fitted model that owns it: that model's optimizer, its state the model's.
    restored = pickle.loads(pickle.dumps(estimator))
    assert restored.optimizer is restored.model_.optimizer
    assert int(restored.optimizer.iterations) == int(estimator.optimizer.iterations)
    # Alone, a built optimizer stays refused, allow= or not.
    with pytest.raises(keras_pickle.PickleRefusedError, match="optimizer__learning_rate") as info:
        pickle.dumps(estimator.optimizer)
    assert "keras.optimizers.Adam: it is built" in str(info.value)


# --------------------------------------------------------------------------
# scikeras patches Keras on import: keras_pickle wins in either order
# --------------------------------------------------------------------------

ORDER_SCRIPT = """
    import copy, os, pickle, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    order = sys.argv[1]
    if order == "scikeras first":
        import scikeras.wrappers
    import keras, numpy as np
    import keras_pickle
    keras_pickle.install()
    # "keras_pickle first": importing scikeras now patches Keras; keras_pickle's
    # post-import hook must put its own hooks back at once.
    import scikeras.wrappers
    import integration_models as im
    import helpers

    assert keras_pickle.is_installed()
    for cls in (keras.Model, keras.losses.Loss, keras.metrics.Metric, keras.optimizers.Optimizer):
        for name in ("__reduce__", "__reduce_ex__"):
            assert getattr(cls, name).__module__ == "keras_pickle._protocol.mixins", (cls, name)
    assert keras.Model.__deepcopy__.__module__ == "keras_pickle._protocol.mixins"

    model = im.binary_classifier()
    x, y = im.classification_data()
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    assert b"keras_pickle._format" in pickle.dumps(model, protocol=2)
    helpers.assert_same_state(model, copy.deepcopy(model))  # Dropout seed state too: keras_pickle's copy
    helpers.assert_same_state(model, pickle.loads(pickle.dumps(model)))
    accumulated = keras.metrics.Mean()
    accumulated.update_state([1.0, 2.0])
    try:
        pickle.dumps(accumulated)  # scikeras pickles it by config, its state reset; keras_pickle refuses
        raise SystemExit("scikeras's config-only metric pickling won")
    except keras_pickle.PickleRefusedError:
        pass

    # scikeras's own use: fit, clone, pickle.
    estimator = scikeras.wrappers.KerasClassifier(model=model, epochs=1, batch_size=16, verbose=0).fit(x, y)
    twin = pickle.loads(pickle.dumps(estimator))
    assert np.array_equal(twin.predict_proba(x), estimator.predict_proba(x))
    from sklearn.base import clone
    assert clone(estimator).model is not estimator.model
    print("order ok:", order)
"""


@pytest.mark.parametrize("order", ["scikeras first", "keras_pickle first"])
def test_keras_pickle_wins_whichever_is_imported_first(order):
    out = run_python(
        ORDER_SCRIPT, order, env={"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"}, timeout=300, keras_imported=True
    )
    assert f"order ok: {order}" in out


def test_uninstall_removes_the_scikeras_integration():
    import scikeras.wrappers

    base = scikeras.wrappers.BaseWrapper
    assert base.__getstate__.__module__ == "keras_pickle.integrations._scikeras"
    keras_pickle.uninstall()
    try:
        assert "__getstate__" not in base.__dict__ and "__setstate__" not in base.__dict__
    finally:
        keras_pickle.install()
    assert base.__getstate__.__module__ == "keras_pickle.integrations._scikeras"


def test_deepcopy_of_an_estimator_keeps_working():
    estimator = KerasClassifier(model=im.binary_classifier(), epochs=1, **FIT).fit(X, Y)
    twin = copy.deepcopy(estimator)
    assert_same_estimator(estimator, twin)


# --------------------------------------------------------------------------
# A build function defined in the script travels by value
# --------------------------------------------------------------------------

SEARCH_SCRIPT = """
import pickle, sys
import keras, numpy as np
from scikeras.wrappers import KerasClassifier
from sklearn.model_selection import GridSearchCV
import keras_pickle

keras_pickle.install()


def build_model(meta, compile_kwargs, hidden=2):  # defined in __main__: pickle would store it by name
    model = keras.Sequential([keras.Input((meta["n_features_in_"],)), keras.layers.Dense(hidden, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(**compile_kwargs)
    return model


if __name__ == "__main__":
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    estimator = KerasClassifier(model=build_model, loss="binary_crossentropy", epochs=1, batch_size=16, verbose=0,
                                random_state=0)
    search = GridSearchCV(estimator, {"model__hidden": [2, 3]}, cv=2, n_jobs=2, error_score="raise").fit(x, y)
    with open(sys.argv[1], "wb") as file:
        pickle.dump(search, file)
    np.save(sys.argv[2], search.predict_proba(x))
    np.save(sys.argv[3], x)
    np.save(sys.argv[4], y)
    print("written")
"""

READ_SEARCH = """
import json, pickle, sys
import numpy as np
with open(sys.argv[1], "rb") as file:
    search = pickle.load(file)  # this process's __main__ defines no build_model
x, y = np.load(sys.argv[3]), np.load(sys.argv[4])
same = bool((search.predict_proba(x) == np.load(sys.argv[2])).all())
refit = search.best_estimator_.fit(x, y)  # calls the carried build_model again
print(json.dumps({"same": same, "build": refit.model.__name__, "module": refit.model.__module__,
                  "hidden": refit.model_.layers[0].units}))
"""


def test_a_search_whose_build_function_is_defined_in_the_script_loads_in_a_fresh_process(tmp_path):
    """pickle stores a function by reference (``__main__.build_model``): the search loaded only in a rerun of
    the script ("Can't get attribute 'build_model'"). The function travels by value, as classes do."""
    import json

    script = tmp_path / "search.py"
    script.write_text(SEARCH_SCRIPT)
    files = [str(tmp_path / name) for name in ("search.pkl", "proba.npy", "x.npy", "y.npy")]
    assert run_script(script, *files, cwd=tmp_path, timeout=400, keras_imported=True).splitlines()[-1] == "written"
    found = json.loads(run_python(READ_SEARCH, *files, cwd=tmp_path, timeout=300, keras_imported=True).splitlines()[-1])
    assert found["same"] is True
    assert found["build"] == "build_model" and found["module"] == "__main__"
    assert found["hidden"] in (2, 3)
