"""dask.distributed: a real LocalCluster with two worker processes.

Dask's own Keras serializer (written for Keras 2) fails on every Keras 3
model; with keras_pickle installed, models travel as keras_pickle payloads
(a pickle-stream frame plus one zero-copy frame per weight array) and
tokenize deterministically.
"""

from __future__ import annotations

import copy
import pickle

import integration_models as im
import keras
import numpy as np
import pytest
from helpers import TESTS_DIR, assert_same_state, engine, run_python, variable_values

import keras_pickle

pytest.importorskip("distributed", reason="distributed is not installed (pip install -e '.[test]' installs it)")

import dask  # noqa: E402
from dask.base import tokenize  # noqa: E402
from dask.sizeof import sizeof  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from distributed.protocol import deserialize, serialize  # noqa: E402

from keras_pickle.integrations.dask import InstallOnWorkers  # noqa: E402

TIMEOUT = 240


def build_and_fit(seed: int) -> tuple[keras.Model, list]:
    """A task that creates its model on the worker; also returns what its variables were there."""
    model = im.fit_regressor(im.regressor(seed))
    return model, variable_values(model)


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        yield client


# --------------------------------------------------------------------------
# The serializer, in-process
# --------------------------------------------------------------------------


def test_dask_serializes_as_a_pickle_stream_plus_one_zero_copy_frame_per_weight():
    model = im.fit_regressor(im.regressor())
    header, frames = serialize(model, on_error="raise")
    assert header["serializer"] == "pickle"
    weights = [keras.ops.convert_to_numpy(v) for v in model.variables] + [
        keras.ops.convert_to_numpy(v) for v in model.optimizer.variables
    ]
    assert len(frames) == 1 + len(weights)
    assert all(isinstance(frame, memoryview) for frame in frames[1:])
    assert sorted(frame.nbytes for frame in frames[1:]) == sorted(w.nbytes for w in weights)
    assert b"keras_pickle" in bytes(frames[0])

    restored = deserialize(header, frames)
    assert_same_state(model, restored)
    x = im.regression_data(8, seed=2)[0]
    assert np.array_equal(model.predict(x, verbose=0), restored.predict(x, verbose=0))


def test_uninstall_puts_back_what_dask_had():
    model = im.regressor()
    keras_pickle.uninstall()
    try:
        with pytest.raises(TypeError, match="Could not serialize object of type Sequential"):
            serialize(model, on_error="raise")
        with pytest.raises(dask.tokenize.TokenizationError):
            tokenize(model, ensure_deterministic=True)
    finally:
        keras_pickle.install()
    assert serialize(model, on_error="raise")[0]["serializer"] == "pickle"


def test_tokens_follow_the_model_state():
    model = im.fit_regressor(im.regressor())
    token = tokenize(model, ensure_deterministic=True)
    assert tokenize(model, ensure_deterministic=True) == token
    assert tokenize(copy.deepcopy(model), ensure_deterministic=True) == token

    changed = copy.deepcopy(model)
    kernel = changed.layers[1].kernel
    values = np.array(kernel)
    values.flat[0] = np.nextafter(values.flat[0], np.float32(np.inf))
    kernel.assign(values)
    assert tokenize(changed) != token
    assert tokenize(im.fit_regressor(copy.deepcopy(model))) != token
    assert tokenize(im.regressor(seed=1)) != tokenize(im.regressor(seed=2))


def nudge_first_weight(layer: keras.Layer) -> None:
    """Move one float of the layer's first weight to the next representable value."""
    variable = layer.weights[0]
    values = np.array(variable)
    values.flat[0] = np.nextafter(values.flat[0], np.float32(np.inf))
    variable.assign(values)


@pytest.mark.parametrize(
    "make_layer",
    [
        pytest.param(lambda: im.Shift(0.25), id="custom-layer"),
        pytest.param(lambda: keras.layers.Dense(3), id="keras-layer"),
    ],
)
def test_tokens_of_a_standalone_layer(make_layer):
    keras.utils.set_random_seed(0)
    layer = make_layer()
    layer.build((None, im.FEATURES))
    token = tokenize(layer, ensure_deterministic=True)
    assert tokenize(layer, ensure_deterministic=True) == token
    twin = copy.deepcopy(layer)
    assert twin is not layer and tokenize(twin, ensure_deterministic=True) == token

    nudge_first_weight(twin)
    changed = tokenize(twin, ensure_deterministic=True)
    assert changed != token
    assert tokenize(layer, ensure_deterministic=True) == token  # the original is untouched
    assert tokenize(pickle.loads(pickle.dumps(twin)), ensure_deterministic=True) == changed


def test_sizeof_counts_weights_and_optimizer_state():
    model = im.fit_regressor(im.regressor())
    expected = sum(keras.ops.convert_to_numpy(v).nbytes for v in model.variables + model.optimizer.variables)
    assert sizeof(model) == expected
    assert sizeof(model.layers[1]) == sum(keras.ops.convert_to_numpy(v).nbytes for v in model.layers[1].variables)


INSTALL_FIRST_SCRIPT = """
    import copy, os, pickle, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras_pickle
    import integration_models as im
    import helpers

    assert "distributed" not in sys.modules and "dask" not in sys.modules
    keras_pickle.install()
    assert "distributed" not in sys.modules, "install() must not import distributed"

    # Imported now: keras_pickle's post-import hook replaces Dask's Keras 2 serializer.
    from dask.base import tokenize
    from distributed.protocol import deserialize, serialize

    model = im.fit_regressor(im.regressor())
    header, frames = serialize(model, on_error="raise")
    assert header["serializer"] == "pickle", header
    assert len(frames) == 1 + len(model.variables) + len(model.optimizer.variables)
    assert all(isinstance(frame, memoryview) for frame in frames[1:])
    helpers.assert_same_state(model, deserialize(header, frames))

    token = tokenize(model, ensure_deterministic=True)
    assert tokenize(model, ensure_deterministic=True) == token
    assert tokenize(copy.deepcopy(model), ensure_deterministic=True) == token
    with open(sys.argv[1], "wb") as f:
        pickle.dump(model, f)
    print("token", token)
"""


def test_install_before_distributed_is_imported_still_replaces_its_serializer(tmp_path):
    """A fresh process: install() first, ``distributed`` imported afterwards (the post-import hook)."""
    env = {"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"}
    out = run_python(INSTALL_FIRST_SCRIPT, str(tmp_path / "model.pkl"), env=env, timeout=300, keras_imported=True)
    (line,) = [line for line in out.splitlines() if line.startswith("token ")]
    # Deterministic across processes: the model it tokenized has the same token here.
    # (Layer names are part of the config, so the model is loaded, not built again.)
    with open(tmp_path / "model.pkl", "rb") as f:
        loaded = pickle.load(f)
    assert tokenize(loaded, ensure_deterministic=True) == line.removeprefix("token ")


# --------------------------------------------------------------------------
# A real cluster
# --------------------------------------------------------------------------


@pytest.mark.timeout(TIMEOUT)
def test_map_fits_models_on_workers_and_returns_them_trained(client):
    models = [im.regressor(seed) for seed in (1, 2)]
    before = [variable_values(m) for m in models]
    futures = client.map(im.fit_regressor, models, epochs=2, pure=False)
    trained = client.gather(futures)
    for model, original, values in zip(trained, models, before):
        assert model is not original and variable_values(original) == values
        assert {type(layer) for layer in model.layers} >= {im.Shift, im.Gate}
        assert int(model.optimizer.iterations) == 4  # 2 epochs of 16 samples, batch 8
        expected = im.fit_regressor(copy.deepcopy(original), epochs=2)
        assert_same_state(expected, model)


@pytest.mark.backends
@pytest.mark.timeout(TIMEOUT)
def test_scatter_and_submit_round_trip_bit_exact(client):
    model = im.fit_regressor(im.regressor())
    [remote] = client.scatter([model], broadcast=True)
    back = client.submit(lambda m: m, remote, pure=False).result(timeout=TIMEOUT)
    assert back is not model
    assert_same_state(model, back)
    x = im.regression_data(8, seed=2)[0]
    assert np.array_equal(model.predict(x, verbose=0), back.predict(x, verbose=0))
    # The worker computes the token from the model it deserialized.
    assert client.submit(tokenize, remote, pure=False).result(timeout=TIMEOUT) == tokenize(model)


@pytest.mark.timeout(TIMEOUT)
def test_models_created_on_workers_come_back_with_the_plugin(client):
    client.register_plugin(InstallOnWorkers())
    assert all(client.run(keras_pickle.is_installed).values())
    trained, on_the_worker = client.submit(build_and_fit, 3, pure=False).result(timeout=TIMEOUT)
    assert int(trained.optimizer.iterations) == 2
    assert {type(layer) for layer in trained.layers} >= {im.Shift, im.Gate}
    # Paths aside (Keras names a rebuilt Sequential's variables without the model prefix).
    assert [v[1:] for v in variable_values(trained)] == [v[1:] for v in on_the_worker]


@pytest.mark.timeout(TIMEOUT)
def test_grid_search_over_scikeras_on_the_dask_joblib_backend(client):
    pytest.importorskip("scikeras", reason="scikeras is not installed (pip install -e '.[test]' installs it)")
    import joblib
    from scikeras.wrappers import KerasClassifier
    from sklearn.model_selection import GridSearchCV

    x, y = im.classification_data()
    estimator = KerasClassifier(model=im.binary_classifier(), batch_size=16, verbose=0, random_state=0)
    search = GridSearchCV(estimator, {"epochs": [1, 2]}, cv=2, error_score="raise")
    with joblib.parallel_backend("dask"):
        search.fit(x, y)
    best = search.best_estimator_
    assert {type(layer) for layer in best.model_.layers} >= {im.Shift, im.Gate}
    assert int(best.model_.optimizer.iterations) == 3 * best.epochs
    loaded = pickle.loads(pickle.dumps(best))
    assert_same_state(best.model_, loaded.model_)
    assert np.array_equal(best.predict_proba(x), loaded.predict_proba(x))


@pytest.mark.timeout(TIMEOUT)
def test_dask_ml_grid_search_on_the_cluster_scores_as_the_in_process_search(client):
    # dask-ml tokenizes the estimator (Dask's default raised TokenizationError) and ships it to the
    # workers; each fitted copy must score exactly as the same search run in this process.
    dask_ml_search = engine("dask_ml.model_selection")
    pytest.importorskip("scikeras", reason="scikeras is not installed (pip install -e '.[test]' installs it)")
    from scikeras.wrappers import KerasClassifier
    from sklearn.model_selection import GridSearchCV

    x, y = im.classification_data()
    grid = {"epochs": [1, 2], "batch_size": [8, 16]}

    def estimator():
        return KerasClassifier(model=im.binary_classifier(), verbose=0, random_state=0)

    on_cluster = dask_ml_search.GridSearchCV(estimator(), grid, cv=2, refit=False, scheduler=client).fit(x, y)
    in_process = GridSearchCV(estimator(), grid, cv=2, refit=False, error_score="raise").fit(x, y)
    for key in ("split0_test_score", "split1_test_score"):  # every fold's score, exactly
        assert np.array_equal(on_cluster.cv_results_[key], in_process.cv_results_[key]), key
    # dask-ml and scikit-learn average those same scores in another order (last bit).
    assert np.allclose(on_cluster.cv_results_["mean_test_score"], in_process.cv_results_["mean_test_score"], 0, 1e-12)
    assert list(on_cluster.cv_results_["params"]) == list(in_process.cv_results_["params"])
    assert len(on_cluster.cv_results_["params"]) == 4
