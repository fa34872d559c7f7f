"""multiprocessing: fork and spawn, Pool and ProcessPoolExecutor, models in and out.

``multiprocessing.Pool`` hangs forever when a task fails to unpickle in a
worker, so every result is fetched with a timeout. (The spawn
``ProcessPoolExecutor`` round trip of a ``__main__``-defined layer is in
tests/models/test_fresh_process.py.)

TensorFlow's runtime does not survive ``fork``: in a forked child of a
process that has used TensorFlow, ``fit`` and ``predict`` hang whether or not
keras_pickle is involved (measured with Keras 3.15.1 / TF 2.21). Eager
operations do work, so the fork tests train with an eager gradient step.
"""

from __future__ import annotations

import json
import textwrap

from helpers import TESTS_DIR, run_script

SCRIPT = """
    import concurrent.futures, copy, json, multiprocessing, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras, numpy as np, tensorflow as tf
    import integration_models
    import keras_pickle

    TIMEOUT = 180

    class MainGate(keras.layers.Layer):
        def build(self, shape):
            self.gate = self.add_weight(shape=(shape[-1],), initializer="ones", name="gate")
        def call(self, x):
            return x * keras.ops.sigmoid(self.gate)

    def make(seed):
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([
            keras.Input((4,)), integration_models.Shift(0.5), keras.layers.Dense(5),
            keras.layers.Dropout(0.25, seed=seed), MainGate(), keras.layers.Dense(1),
        ])
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        return model

    def fit(model, x, y):
        model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
        return model

    def eager_step(model, x, y):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y))
        model.optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return model

    def state(model):
        variables = list(model.variables) + list(model.optimizer.variables)
        return [np.asarray(keras.ops.convert_to_numpy(v.value)).tobytes().hex() for v in variables]

    def compare(local, remote):
        return {
            "class": type(remote.layers[-2]).__module__ + "." + type(remote.layers[-2]).__name__,
            "iterations": [int(local.optimizer.iterations), int(remote.optimizer.iterations)],
            "n_variables": [len(state(local)), len(state(remote))],
            "same_state": state(local) == state(remote),
        }

    if __name__ == "__main__":
        keras_pickle.install()
        rng = np.random.default_rng(2)
        x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 1)).astype("float32")
        models = [make(1), make(2)]
        for model in models:
            fit(model, x, y)  # a trained model with optimizer state goes out
        report = {}

        spawn = multiprocessing.get_context("spawn")
        # A worker installs keras_pickle when it loads its first payload; one that builds
        # a model before it has loaded any (the `make` task may reach a worker that took
        # no `fit` task) needs install() itself: the guide's initializer.
        with spawn.Pool(2, initializer=keras_pickle.install) as pool:
            trained = pool.starmap_async(fit, [(m, x, y) for m in models]).get(timeout=TIMEOUT)
            made = pool.apply_async(make, (3,)).get(timeout=TIMEOUT)
        report["spawn Pool fit"] = [compare(fit(copy.deepcopy(m), x, y), r) for m, r in zip(models, trained)]
        # Never trained: compare after one fit each (Keras builds a compiled model's
        # optimizer on load, with the zero slots the first step would create).
        report["spawn Pool made in worker"] = compare(fit(make(3), x, y), fit(made, x, y))

        fork = multiprocessing.get_context("fork")
        local = [eager_step(copy.deepcopy(m), x, y) for m in models]
        with fork.Pool(2) as pool:
            stepped = pool.starmap_async(eager_step, [(m, x, y) for m in models]).get(timeout=TIMEOUT)
            made = pool.apply_async(make, (4,)).get(timeout=TIMEOUT)
        report["fork Pool step"] = [compare(l, r) for l, r in zip(local, stepped)]
        report["fork Pool made in worker"] = compare(eager_step(make(4), x, y), eager_step(made, x, y))
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=fork) as executor:
            futures = [executor.submit(eager_step, m, x, y) for m in models]
            stepped = [f.result(timeout=TIMEOUT) for f in futures]
        report["fork ProcessPoolExecutor step"] = [compare(l, r) for l, r in zip(local, stepped)]
        print("REPORT " + json.dumps(report))
"""


def test_fork_and_spawn_pools_take_and_return_models(tmp_path):
    script = tmp_path / "pools.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = run_script(script, cwd=tmp_path, timeout=420, env={"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"})
    report = json.loads(out.split("REPORT ", 1)[1])
    assert sorted(report) == sorted(
        [
            "spawn Pool fit",
            "spawn Pool made in worker",
            "fork Pool step",
            "fork Pool made in worker",
            "fork ProcessPoolExecutor step",
        ]
    )
    for key, results in report.items():
        for result in results if isinstance(results, list) else [results]:
            assert result["class"] == "__main__.MainGate", (key, result)
            assert result["n_variables"][0] == result["n_variables"][1] > 10, (key, result)
            assert result["same_state"], f"{key}: the worker's model differs from the local one"
    # Trained before sending (4 steps); the worker adds 4 (fit) or 1 (eager step).
    assert all(r["iterations"] == [8, 8] for r in report["spawn Pool fit"])
    assert all(r["iterations"] == [5, 5] for r in report["fork Pool step"])
    assert all(r["iterations"] == [5, 5] for r in report["fork ProcessPoolExecutor step"])
    assert report["spawn Pool made in worker"]["iterations"] == [4, 4]
    assert report["fork Pool made in worker"]["iterations"] == [1, 1]
