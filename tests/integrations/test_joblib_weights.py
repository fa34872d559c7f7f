"""A model through joblib costs what its weights cost as numpy arrays: each weight reaches joblib as a numpy
array (memory-mapped by its loky backend and by joblib.load(mmap_mode=...)), as a snapshot of the state at
dispatch; a loaded model owns its memory; every other pickler sees the same payload as before."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import joblib
import joblib_tasks
import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_predictions, assert_same_state

import keras_pickle
from keras_pickle import _options, _pickling_context
from keras_pickle._keras3.backend import to_numpy
from keras_pickle._wire import arrays

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


class StoreProbe:
    """Pickles as None, recording whether the pickler that met it stores numpy arrays its own way."""

    seen: list = []

    def __reduce__(self):
        StoreProbe.seen.append(_pickling_context.array_store() is not None)
        return (type(None), ())


def test_only_joblib_picklers_store_arrays_their_own_way(tmp_path):
    from joblib.externals.loky.backend.reduction import dumps as loky_dumps

    StoreProbe.seen = []
    pickle.dumps(StoreProbe(), protocol=5)
    cloudpickle.dumps(StoreProbe())
    loky_dumps(StoreProbe())  # loky without joblib's memory-mapping reducers: nothing special
    assert StoreProbe.seen == [False, False, False]
    for max_nbytes in (None, "1M"):  # joblib's pool reduces arrays its own way, memory-mapping them or not
        with joblib.Parallel(n_jobs=2, max_nbytes=max_nbytes) as parallel:
            parallel(joblib.delayed(type)(StoreProbe()) for _ in range(1))
    joblib.dump(StoreProbe(), tmp_path / "probe.joblib")
    assert StoreProbe.seen == [False, False, False, True, True, True]


def big_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(256), zoo.Scale(1.5), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 256)).astype("float32")
    model.fit(x, x[:, :1], epochs=1, batch_size=8, verbose=0)
    return model


@pytest.mark.parametrize("compress", [0, 3])
@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_joblib_dump_and_load_keep_every_value_and_map_the_weights(tmp_path, monkeypatch, compress, mmap_mode):
    model = big_model()
    path = tmp_path / "model.joblib"
    joblib.dump(model, path, compress=compress)
    kinds = []
    decode = arrays.decode_array
    monkeypatch.setattr(arrays, "decode_array", lambda entry: (kinds.append(type(entry[3])), decode(entry))[1])
    loaded = joblib.load(path, mmap_mode=mmap_mode)
    assert_same_state(model, loaded)  # weights, optimizer slots and iterations, seeds; none shared
    assert_same_predictions(model, loaded, np.ones((4, 256), "float32"))
    expected = np.memmap if mmap_mode and not compress else np.ndarray  # joblib maps only uncompressed arrays
    assert kinds and all(issubclass(kind, np.ndarray) for kind in kinds)
    assert any(issubclass(kind, expected) for kind in kinds), kinds
    # The loaded model owns its memory: writing to it works and leaves the file as it was.
    loaded.layers[0].kernel.assign(np.zeros((256, 256), "float32"))
    assert_same_state(model, joblib.load(path, mmap_mode=mmap_mode))


def test_a_parallel_task_sees_the_state_at_dispatch_and_never_another_tasks_change():
    model = big_model()
    before = joblib_tasks.kernel_sum(model)
    bumped_once = joblib_tasks.bump_then_sum(copy.deepcopy(model))  # what one task's change gives
    with joblib.Parallel(n_jobs=2, max_nbytes="64K") as parallel:
        first = parallel(joblib.delayed(joblib_tasks.kernel_sum)(model) for _ in range(4))
        bumped = parallel(joblib.delayed(joblib_tasks.bump_then_sum)(model) for _ in range(6))
        kernel = model.layers[0].kernel
        kernel.assign(kernel * 2.0)  # the parent trains on between two calls to the same pool
        second = parallel(joblib.delayed(joblib_tasks.kernel_sum)(model) for _ in range(4))
    assert first == [before] * 4
    assert bumped == [bumped_once] * 6  # each from the dispatched state, none from another task's change
    assert second == [joblib_tasks.kernel_sum(model)] * 4 and second[0] != before


def test_fit_in_the_parent_between_two_calls_reaches_the_next_tasks_and_only_that():
    model = big_model()
    x = np.random.default_rng(1).normal(size=(16, 256)).astype("float32")
    with joblib.Parallel(n_jobs=2, max_nbytes="64K") as parallel:
        first = parallel(joblib.delayed(joblib_tasks.kernel_sum)(model) for _ in range(2))
        model.fit(x, x[:, :1], epochs=1, batch_size=8, verbose=0)  # the optimizer's own updates, jit-compiled
        second = parallel(joblib.delayed(joblib_tasks.state_sum)(model) for _ in range(2))
    assert first[0] != joblib_tasks.kernel_sum(model)
    assert second == [joblib_tasks.state_sum(model)] * 2


def test_an_unchanged_weight_is_handed_over_as_the_same_array(monkeypatch):
    """joblib writes an array once per object: an unchanged weight must be the same array in the next
    task's pickle, a changed one a new array holding the new value."""
    from keras_pickle._capture import array_store

    model, store = big_model(), joblib_tasks.Store()
    kernel = model.layers[0].kernel
    first = array_store.wire_data(store, model, kernel.path, to_numpy(kernel))
    if keras.backend.backend() in ("tensorflow", "jax"):  # a view of the variable's own buffer: no byte is read
        monkeypatch.setattr(array_store.np, "array_equal", None)
    again = array_store.wire_data(store, model, kernel.path, to_numpy(kernel))
    assert again is first and not first.flags.writeable
    monkeypatch.undo()
    kernel.assign(kernel * 2.0)
    changed = array_store.wire_data(store, model, kernel.path, to_numpy(kernel))
    assert changed is not first
    assert np.array_equal(changed.view("float32").reshape(kernel.shape), keras.ops.convert_to_numpy(kernel))
    assert np.array_equal(
        first.view("float32").reshape(kernel.shape) * 2.0, changed.view("float32").reshape(kernel.shape)
    )


def test_every_other_pickler_writes_the_payload_it_wrote_before():
    model = big_model()
    with keras_pickle.checksums(False):
        plain = pickle.dumps(model, protocol=4)
    assert b"_reconstruct" not in plain and b"numpy" not in plain.split(b"keras_pickle")[0]
    buffers = []
    pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    assert buffers and all(isinstance(b, pickle.PickleBuffer) for b in buffers)


def test_gridsearch_over_a_prebuilt_model_scores_the_same_with_two_workers():
    scikeras = pytest.importorskip("scikeras.wrappers")
    from sklearn.model_selection import GridSearchCV

    keras.utils.set_random_seed(0)
    prebuilt = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(64), keras.layers.Dense(1)])
    x, y = zoo.data(48)
    scores = []
    for n_jobs in (1, 2):
        estimator = scikeras.KerasRegressor(model=prebuilt, loss="mse", optimizer="sgd", epochs=2, batch_size=8,
                                            shuffle=False, verbose=0, random_state=0)  # fmt: skip
        search = GridSearchCV(estimator, {"optimizer__learning_rate": [0.01, 0.05]}, cv=2, n_jobs=n_jobs)
        scores.append(search.fit(x, y.ravel()).cv_results_["mean_test_score"].tolist())
    assert scores[0] == scores[1], scores


def test_a_model_rebuilt_from_mapped_weights_frees_the_previous_one_first(tmp_path, monkeypatch):
    """A joblib worker's previous model, garbage held by reference cycles, is collected before the next is
    rebuilt, so the worker does not grow by one model per task (which loky restarts as a leak); a model the
    program still holds is kept, and a program that keeps every model it loads stops paying full collections."""
    import gc
    import weakref

    from keras_pickle._rebuild import reclaim

    monkeypatch.setattr(reclaim, "_rebuilt_from_mapped", weakref.WeakSet())
    monkeypatch.setattr(reclaim, "_full_collection_frees", True)
    path = tmp_path / "model.joblib"
    joblib.dump(big_model(), path)
    gc.collect()
    gc.disable()  # only keras_pickle collects here
    try:
        first = joblib.load(path, mmap_mode="r")
        held_by_cycles = weakref.ref(first)
        del first
        assert held_by_cycles() is not None, "the model had no reference cycle: nothing to show"
        second = joblib.load(path, mmap_mode="r")
        assert held_by_cycles() is None, "the previous model was still in memory when the next was rebuilt"
        kept = weakref.ref(second)
        third = joblib.load(path, mmap_mode="r")
        assert kept() is second and third is not second  # what the program holds stays
        assert_same_state(second, third)
        generations = []
        collect = gc.collect
        monkeypatch.setattr(gc, "collect", lambda *args: (generations.append(args), collect(*args))[1])
        fourth = joblib.load(path, mmap_mode="r")  # the program holds every model: young generations only
        assert generations == [(1,)] and kept() is second and fourth is not third
        in_memory = joblib.load(tmp_path.joinpath("model.joblib"))  # not mapped: nothing collected for it
        assert in_memory is not None and generations == [(1,)]
    finally:
        gc.enable()


def test_repeated_loads_of_mapped_weights_copy_one_rebuild_and_stay_independent(tmp_path, monkeypatch):
    """A worker's repeated tasks with the same payload: rebuilt once, each given its own copy, equal to a
    rebuild, and independent of the kept model and of each other; another payload is rebuilt. On TensorFlow,
    whose copies share values until written; on JAX and PyTorch every load is a rebuild (no hit), with the
    same guarantees."""
    from keras_pickle._protocol import worker_cache

    cached = keras.backend.backend() == "tensorflow"

    monkeypatch.setattr(worker_cache, "hits", 0)
    worker_cache.clear()
    model = big_model()
    path = tmp_path / "model.joblib"  # a user's file, which a later dump may rewrite in place: never cached
    joblib.dump(model, path)
    for _ in range(2):
        assert_same_state(model, joblib.load(path, mmap_mode="r"))
    assert worker_cache.hits == 0
    path = tmp_path / f"123-456-{'ab' * 16}.pkl"  # named as a joblib pool names its files, which it never rewrites
    joblib.dump(model, path)
    first = joblib.load(path, mmap_mode="r")
    assert worker_cache.hits == 0
    joblib_tasks.bump_then_sum(first)  # a task changes its model
    second = joblib.load(path, mmap_mode="r")
    third = joblib.load(path, mmap_mode="r")
    assert worker_cache.hits == (2 if cached else 0)
    assert second is not third and second.layers[0].kernel is not third.layers[0].kernel
    for loaded in (second, third):
        assert_same_state(model, loaded)  # weights, optimizer slots and iterations, seeds
        assert_same_predictions(model, loaded, np.ones((4, 256), "float32"))
    x = np.random.default_rng(2).normal(size=(16, 256)).astype("float32")
    second.fit(x, x[:, :1], epochs=1, batch_size=8, verbose=0)
    assert_same_state(model, third)  # training one copy reaches no other
    kernel = model.layers[0].kernel
    kernel.assign(kernel * 2.0)
    joblib.dump(model, tmp_path / f"123-456-{'cd' * 16}.pkl")
    changed = joblib.load(tmp_path / f"123-456-{'cd' * 16}.pkl", mmap_mode="r")
    assert worker_cache.hits == (2 if cached else 0)  # another payload: rebuilt
    assert_same_state(model, changed)
    with _options.loading(_options.LoadOptions(allow_by_value=True)):  # other load options: another key
        joblib.load(tmp_path / f"123-456-{'cd' * 16}.pkl", mmap_mode="r")
    assert worker_cache.hits == (2 if cached else 0)


def test_joblib_multiprocessing_backend_maps_the_weights_and_keeps_tasks_independent():
    """joblib's other process backend (multiprocessing) memory-maps the weights as loky does: each task sees
    the state at dispatch, never another task's change. On TensorFlow only: the backend forks, and a process
    forked after JAX or PyTorch started their thread pools deadlocks in its first op (both hung here; JAX
    warns so); loky, joblib's default, starts fresh workers and is tested on every backend above."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("joblib's multiprocessing backend forks, which JAX and PyTorch do not survive: use loky")
    model = big_model()
    bumped_once = joblib_tasks.bump_then_sum(copy.deepcopy(model))
    with joblib.Parallel(n_jobs=2, backend="multiprocessing", max_nbytes="64K", batch_size=1) as parallel:
        sums = parallel(joblib.delayed(joblib_tasks.state_sum)(model) for _ in range(2))
        bumped = parallel(joblib.delayed(joblib_tasks.bump_then_sum)(model) for _ in range(4))
    assert sums == [joblib_tasks.state_sum(model)] * 2
    assert bumped == [bumped_once] * 4
