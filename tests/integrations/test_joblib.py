"""joblib / loky and cloudpickle: models with __main__-defined custom objects train in workers.

The calling script is a real ``__main__``: its custom layer, activation and
loss function exist nowhere else, so loky (cloudpickle) must ship them by
value, and keras_pickle must carry them inside the model's payload.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import TESTS_DIR, run_script

LOKY_SCRIPT = """
    import copy, json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras, numpy as np
    from joblib import Parallel, delayed
    import integration_models
    import keras_pickle

    class MainGate(keras.layers.Layer):
        def build(self, shape):
            self.gate = self.add_weight(shape=(shape[-1],), initializer="ones", name="gate")
        def call(self, x):
            return x * keras.ops.sigmoid(self.gate)

    def main_activation(x):
        return keras.ops.tanh(x) * 2.0

    def main_loss(y_true, y_pred):
        return keras.ops.mean(keras.ops.abs(y_true - y_pred), axis=-1)

    def fit(model, x, y):
        model.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
        return model

    def sequential():
        return keras.Sequential([
            keras.Input((4,)), integration_models.Shift(0.5), keras.layers.Dense(6, activation=main_activation),
            keras.layers.Dropout(0.2, seed=1), MainGate(), keras.layers.Dense(1),
        ])

    def functional():
        inputs = keras.Input((4,))
        h = MainGate()(keras.layers.Dense(5, activation="relu")(inputs))
        h = keras.layers.Dropout(0.3, seed=2)(integration_models.Gate()(h))
        return keras.Model(inputs, keras.layers.Dense(1, activation=main_activation)(h))

    def models():
        keras.utils.set_random_seed(7)
        made = [sequential(), functional()]
        for model in made:
            model.compile(optimizer=keras.optimizers.Adam(0.02), loss=main_loss)
        return made

    def state(model):
        variables = list(model.variables) + list(model.optimizer.variables)
        return [np.asarray(keras.ops.convert_to_numpy(v.value)).tobytes().hex() for v in variables]

    if __name__ == "__main__":
        rng = np.random.default_rng(0)
        x = rng.normal(size=(16, 4)).astype("float32")
        y = rng.normal(size=(16, 1)).astype("float32")
        report = {}

        # 1. keras_pickle.
        keras_pickle.install()
        originals = models()
        local = [fit(copy.deepcopy(m), x, y) for m in originals]
        remote = Parallel(n_jobs=2, backend="loky", timeout=240)(delayed(fit)(m, x, y) for m in originals)
        report["with"] = [
            {
                "class": [f"{type(l).__module__}.{type(l).__name__}" for l in r.layers],
                "iterations": [int(l.optimizer.iterations), int(r.optimizer.iterations)],
                "n_variables": [len(state(l)), len(state(r))],
                "same_state": state(l) == state(r),
                "same_predictions": bool(np.array_equal(l.predict(x, verbose=0), r.predict(x, verbose=0))),
                "loss": r.loss.__module__ + "." + r.loss.__name__,
            }
            for l, r in zip(local, remote)
        ]

        # 2. The same with Keras's own pickling: uninstall() restores Keras's hooks
        # exactly (the same loky workers are reused; what they load is Keras's format).
        keras_pickle.uninstall()
        try:
            Parallel(n_jobs=2, backend="loky", timeout=240)(delayed(fit)(m, x, y) for m in models())
            report["without"] = "no error"
        except Exception as e:
            report["without"] = f"{type(e).__name__}: {e}"
        print("REPORT " + json.dumps(report))
"""


@pytest.mark.backends
def test_loky_trains_models_with_main_and_module_custom_objects(tmp_path):
    script = tmp_path / "loky_fit.py"
    script.write_text(textwrap.dedent(LOKY_SCRIPT))
    out = run_script(
        script, cwd=tmp_path, timeout=420, env={"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"}, keras_imported=True
    )
    report = json.loads(out.split("REPORT ", 1)[1])

    # Without keras_pickle, Keras 3's own pickling cannot bring __main__ classes to a worker.
    assert report["without"].startswith("BrokenProcessPool: A task has failed to un-serialize"), report["without"]

    assert len(report["with"]) == 2
    sequential, functional = report["with"]
    assert "__main__.MainGate" in sequential["class"] and "integration_models.Shift" in sequential["class"]
    assert "__main__.MainGate" in functional["class"] and "integration_models.Gate" in functional["class"]
    for result in report["with"]:
        # 16 samples, batch 8, 2 epochs: 4 steps, counted the same in the worker as locally.
        assert result["iterations"] == [4, 4], result
        assert result["n_variables"][0] == result["n_variables"][1] > 10, result
        assert result["same_state"], "the worker's training differs from local training"
        assert result["same_predictions"]
        assert result["loss"] == "__main__.main_loss"
