"""Round trips across interpreters: nothing registered, nothing in-process helps."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import zoo
from helpers import TESTS_DIR, run_python, run_script, variable_values

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend

CHECK_IN_FRESH_PROCESS = """
    import pickle, sys
    import numpy as np
    import keras_pickle

    assert "zoo" not in sys.modules
    directory = sys.argv[1]

    for kind in sys.argv[2:]:
        with open(f"{directory}/{kind}.pkl", "rb") as f:
            data = f.read()
        expected = np.load(f"{directory}/{kind}.npz", allow_pickle=False)

        if "zoo" not in sys.modules:
            # Safe mode never imports: the custom objects' module must be imported first.
            try:
                keras_pickle.loads(data)
                raise SystemExit("safe mode imported a module")
            except keras_pickle.UnsafePayloadError as e:
                assert "module 'zoo' is not imported" in str(e), e
            assert not keras_pickle.is_installed()

        model = pickle.loads(data)  # plain pickle imports zoo by reference
        assert keras_pickle.is_installed(), "loading a payload installs keras_pickle"
        safe = keras_pickle.loads(data)  # zoo is imported now: safe mode resolves it
        import helpers

        for restored in (model, safe):
            values = helpers.variable_values(restored)
            assert len(values) == int(expected["n"]), (len(values), expected["n"])
            for i, (path, dtype, shape, raw) in enumerate(values):
                assert raw == expected[f"v{i}"].tobytes(), path
            assert np.array_equal(restored.predict(expected["x"], verbose=0), expected["predictions"])
        model.fit(expected["x"], expected["y"], epochs=1, batch_size=8, shuffle=False, verbose=0)
        for i, (path, dtype, shape, raw) in enumerate(helpers.variable_values(model)):
            assert raw == expected[f"t{i}"].tobytes(), "after training: " + path
        assert b"keras_pickle._format" in pickle.dumps(model, protocol=2)
        print("fresh-process round trip ok:", kind, type(model).__name__)
"""


def save_expected(model, path):
    """Values before and after one more epoch, and predictions, for the fresh process to match."""
    x, y = zoo.data()
    arrays = {"x": x, "y": y, "predictions": model.predict(x, verbose=0)}
    values = variable_values(model)
    arrays["n"] = np.array(len(values))
    for i, (_path, _dtype, _shape, raw) in enumerate(values):
        arrays[f"v{i}"] = np.frombuffer(raw, dtype=np.uint8)
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    for i, (_path, _dtype, _shape, raw) in enumerate(variable_values(model)):
        arrays[f"t{i}"] = np.frombuffer(raw, dtype=np.uint8)
    np.savez(path, **arrays)


def test_round_trip_in_a_fresh_interpreter(tmp_path):
    """Sequential, Functional and subclassed models with unregistered custom objects."""
    kinds = sorted(zoo.BUILDERS)
    for kind in kinds:
        model = zoo.trained(zoo.BUILDERS[kind], loss=zoo.CustomMSE())
        (tmp_path / f"{kind}.pkl").write_bytes(keras_pickle.dumps(model, checksum=True))
        save_expected(model, tmp_path / f"{kind}.npz")
    out = run_python(
        CHECK_IN_FRESH_PROCESS,
        str(tmp_path),
        *kinds,
        env={"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"},
        keras_imported=True,
    )
    for kind in kinds:
        assert f"fresh-process round trip ok: {kind}" in out


def test_safe_mode_loads_a_compiled_model_as_the_first_thing_a_fresh_process_does(tmp_path):
    """Nothing built before: the backend's own optimizer class (PyTorch names its Adam
    ``keras.src.backend.torch.optimizers.torch_adam.Adam``) resolves without importing its module."""
    model = zoo.trained(zoo.sequential)
    (tmp_path / "model.pkl").write_bytes(keras_pickle.dumps(model))
    save_expected(model, tmp_path / "model.npz")
    out = run_python(
        f"""
        import numpy as np, keras_pickle, zoo, helpers
        model = keras_pickle.loads(open({str(tmp_path / "model.pkl")!r}, "rb").read())
        expected = np.load({str(tmp_path / "model.npz")!r})
        values = helpers.variable_values(model)
        assert len(values) == int(expected["n"]) and all(
            raw == expected[f"v{{i}}"].tobytes() for i, (_p, _d, _s, raw) in enumerate(values)
        )
        print("optimizer", type(model.optimizer).__module__, type(model.optimizer).__name__)
        """,
        env={"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"},
        keras_imported=True,
    )
    assert f"optimizer {type(model.optimizer).__module__} {type(model.optimizer).__name__}" in out


MAIN_SCRIPT = """
    import os, pickle, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import cloudpickle, keras, numpy as np
    import keras_pickle

    keras_pickle.install()

    class MainScale(keras.layers.Layer):
        def __init__(self, factor=2.0, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor
        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1],), initializer="random_normal")
        def call(self, x):
            return x * self.w * self.factor
        def get_config(self):
            return {**super().get_config(), "factor": self.factor}

    def main_activation(x):
        return keras.ops.tanh(x) * 3.0

    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation=main_activation), MainScale(1.5)])
    model.compile("adam", "mse")
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    model.fit(x, x[:, :1] * np.ones((8, 4), "float32"), verbose=0)
    with open(sys.argv[1], "wb") as f:
        f.write(cloudpickle.dumps(model))
    np.save(sys.argv[2], model.predict(x, verbose=0))
    np.save(sys.argv[3], x)
"""


def test_main_defined_custom_objects_travel_by_value_with_cloudpickle(tmp_path):
    script = tmp_path / "make_model.py"
    script.write_text(textwrap.dedent(MAIN_SCRIPT))
    paths = [tmp_path / "model.pkl", tmp_path / "pred.npy", tmp_path / "x.npy"]
    run_script(script, *map(str, paths), cwd=tmp_path, keras_imported=True)
    out = run_python(
        f"""
        import pickle, numpy as np
        model = pickle.loads(open({str(paths[0])!r}, "rb").read())
        assert type(model.layers[-1]).__name__ == "MainScale"
        assert type(model.layers[-1]).__module__ == "__main__"
        expected = np.load({str(paths[1])!r})
        assert np.array_equal(model.predict(np.load({str(paths[2])!r}), verbose=0), expected)
        print("by value ok")
        """,
        keras_imported=True,
    )
    assert "by value ok" in out


SPAWN_SCRIPT = """
    import concurrent.futures, copy, multiprocessing, os, pickle, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras, numpy as np
    import keras_pickle

    class MainGate(keras.layers.Layer):
        def build(self, shape):
            self.gate = self.add_weight(shape=(shape[-1],), initializer="ones")
        def call(self, x):
            return x * keras.ops.sigmoid(self.gate)

    def train(model, x, y):
        model.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
        return model

    if __name__ == "__main__":
        keras_pickle.install()
        keras.utils.set_random_seed(3)
        layers = [keras.Input((5,)), keras.layers.Dense(6), keras.layers.Dropout(0.2, seed=1), MainGate()]
        model = keras.Sequential(layers)
        model.compile("adam", "mse")
        rng = np.random.default_rng(1)
        x, y = rng.normal(size=(16, 5)).astype("float32"), rng.normal(size=(16, 6)).astype("float32")
        model.fit(x, y, verbose=0)
        local = train(copy.deepcopy(model), x, y)
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
            remote = pool.submit(train, model, x, y).result(timeout=240)
        assert type(remote.layers[-1]).__name__ == "MainGate"
        assert int(remote.optimizer.iterations) == int(local.optimizer.iterations) == 9
        pairs = list(zip(local.variables + local.optimizer.variables, remote.variables + remote.optimizer.variables))
        assert len(pairs) == len(local.variables) + len(local.optimizer.variables)
        for a, b in pairs:
            assert keras.ops.convert_to_numpy(a).tobytes() == keras.ops.convert_to_numpy(b).tobytes(), a.path
        print("spawn pool ok")
"""


def test_spawn_pool_ships_a_main_defined_layer_and_returns_the_trained_model(tmp_path):
    script = tmp_path / "spawn_pool.py"
    script.write_text(textwrap.dedent(SPAWN_SCRIPT))
    assert "spawn pool ok" in run_script(script, cwd=tmp_path, timeout=400)
