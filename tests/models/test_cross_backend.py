"""Payloads written under one backend load under every other (TensorFlow, JAX, PyTorch).

One writer process per backend builds and trains every model of ``CASES`` and
pickles each to a file, with the value of every variable (as numpy), the
predictions and the data beside it. One reader process per backend then loads
every file of every writer, compares each variable's value with the writer's
(integers equal in value, floats equal exactly, after casting to the
reader's dtype), predicts, trains one more step, and prints a JSON report
that the tests below read: six processes in all. This file is not marked
``backends``: it runs once and starts the other backends itself.
"""

from __future__ import annotations

import concurrent.futures
import json

import numpy as np
import pytest
from helpers import run_python

from keras_pickle._keras3 import convert as _convert
from keras_pickle._rebuild import assign_state as _rebuild_state
from keras_pickle.errors import BackendConversionError, StateMismatchError

BACKENDS = ("tensorflow", "jax", "torch")
# Built by every writer (plus WRITER_ONLY).
CASES = ("dense", "custom", "adam", "dropout", "batchnorm", "lstm", "mixed_float16", "bfloat16")
# Cases only some backends can write: an int64 value no 32-bit integer holds, a seed
# state written as negative int32 (torch's reading of uint32 bits), float64 weights.
WRITER_ONLY = {"tensorflow": ("iteration_overflow", "seed_overflow", "float64"), "torch": ("seed_bits", "float64")}
# (case, reader) -> what the error names; every other combination must load.
EXPECTED_ERRORS = {
    ("iteration_overflow", "jax"): ("iteration", "int32"),
    ("iteration_overflow", "torch"): ("iteration", "int32"),
    ("seed_overflow", "jax"): ("seed_generator_state", "32 bits"),
    ("seed_overflow", "torch"): ("seed_generator_state", "32 bits"),
    ("float64", "jax"): ("kernel", "JAX_ENABLE_X64"),
}

CUSTOM_MODULE = '''
import keras


@keras.saving.register_keras_serializable(package="xb")
class Scale(keras.layers.Layer):
    """A weight and an integer counter whose dtype ("int") is int64 on TensorFlow, int32 elsewhere."""

    def __init__(self, start=1.5, **kwargs):
        super().__init__(**kwargs)
        self.start = start

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer=keras.initializers.Constant(self.start),
                                     name="scale")
        self.calls = self.add_weight(shape=(), initializer="zeros", dtype="int", trainable=False, name="calls")

    def call(self, x, training=False):
        if training:
            self.calls.assign_add(1)
        return x * self.scale

    def get_config(self):
        return {**super().get_config(), "start": self.start}
'''

WRITER = """
import json, pickle, sys
import numpy as np
import keras
import keras_pickle
import xb_custom

keras_pickle.install()
backend = keras.backend.backend()
directory, cases = sys.argv[1], sys.argv[2:]
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)


def data(shape, outputs=1):
    return rng.normal(size=shape).astype("float32"), rng.normal(size=(shape[0], outputs)).astype("float32")


def build(case):
    layers = keras.layers
    if case in ("mixed_float16", "bfloat16"):
        keras.config.set_dtype_policy(case)
    try:
        x, y = data((8, 4))
        optimizer, fit = "adam", True
        if case == "dense":
            stack, optimizer, fit = [layers.Dense(3)], "sgd", False
            y = rng.normal(size=(8, 3)).astype("float32")
        elif case == "custom":
            stack, optimizer = [xb_custom.Scale(), layers.Dense(1)], "rmsprop"
        elif case in ("adam", "iteration_overflow", "mixed_float16", "bfloat16"):
            stack = [layers.Dense(8, activation="relu"), layers.Dense(1)]
        elif case in ("dropout", "seed_overflow", "seed_bits"):
            stack = [layers.Dense(8), layers.Dropout(0.5, seed=1337), layers.Dense(1)]
        elif case == "batchnorm":
            stack, optimizer = [layers.Dense(8), layers.BatchNormalization(), layers.Dense(1)], "sgd"
        elif case == "lstm":
            x, y = data((8, 5, 3))
            stack = [layers.LSTM(4, dropout=0.25, recurrent_dropout=0.25, seed=7), layers.Dense(1)]
        elif case == "float64":
            stack, x, y = [layers.Dense(2, dtype="float64")], x.astype("float64"), y.astype("float64")
        else:
            raise ValueError(case)
        model = keras.Sequential([keras.Input(x.shape[1:], dtype=x.dtype), *stack])
        model.compile(optimizer=optimizer, loss="mse")
        if fit:
            model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    finally:
        keras.config.set_dtype_policy("float32")
    if case == "iteration_overflow":
        model.optimizer.iterations.assign(2**40)
    seeds = [v for v in model.variables if "seed_generator_state" in v.path]
    if case == "seed_overflow":
        seeds[0].assign(np.array([2**40, 3], "int64"))
    if case == "seed_bits":
        seeds[0].assign(np.array([-5, 3], "int32"))
    return model, x, y


for case in cases:
    model, x, y = build(case)
    # Predict first: an RNN with dropout draws its masks (advancing its seed state) in inference too.
    predictions = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
    arrays = {"x": x, "y": y, "predictions": predictions.astype("float64")}
    meta = {"dtypes": [], "paths": [], "prediction_dtype": str(predictions.dtype)}
    variables = list(model.variables) + list(model.optimizer.variables)
    for i, v in enumerate(variables):
        value = np.asarray(keras.ops.convert_to_numpy(v.value))
        # npz has no bfloat16: floats as float64, integers as int64 (every value survives both).
        floating = value.dtype.kind in "fV" or "float" in str(value.dtype)
        arrays[f"v{i}"] = value.astype("float64" if floating else "int64")
        meta["dtypes"].append(keras.backend.standardize_dtype(v.dtype))
        meta["paths"].append(v.path)
    with open(f"{directory}/{backend}-{case}.pkl", "wb") as f:
        pickle.dump(model, f)
    np.savez(f"{directory}/{backend}-{case}.npz", **arrays)
    with open(f"{directory}/{backend}-{case}.json", "w") as f:
        json.dump(meta, f)
print("written", backend, len(cases))
"""

READER = """
import json, pickle, sys, traceback
import numpy as np
import keras
import keras_pickle
import xb_custom

backend = keras.backend.backend()
directory, files = sys.argv[1], sys.argv[2:]
fresh = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
fresh.compile(optimizer="adam", loss="mse")
AUTO_JIT = fresh.jit_compile  # what this backend chooses for jit_compile="auto"


def compare(meta, expected, variables):
    if len(variables) != len(meta["dtypes"]):
        return f"{len(variables)} variables, the writer had {len(meta['dtypes'])}"
    for i, v in enumerate(variables):
        actual = np.asarray(keras.ops.convert_to_numpy(v.value))
        saved = expected[f"v{i}"]
        path, written = meta["paths"][i], meta["dtypes"][i]
        if actual.shape != saved.shape:
            return f"{path}: shape {actual.shape} vs {saved.shape}"
        if actual.dtype.kind in "iub":
            mine, theirs = actual.astype("int64"), saved.astype("int64")
            if "seed_generator_state" in path and written != str(actual.dtype):
                mine, theirs = mine % 2**32, theirs % 2**32  # a seed's value is its 32 bits
            if not np.array_equal(mine, theirs):
                return f"{path}: {mine.tolist()} vs {theirs.tolist()} (written as {written})"
        else:
            if not np.array_equal(saved.astype(actual.dtype), actual):
                return f"{path}: float values differ (written as {written}, read as {actual.dtype})"
    return None


def other_backend_module(optimizer):
    for candidate in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        module = type(candidate).__module__ if candidate is not None else ""
        for name in ("tensorflow", "jax", "torch"):
            if name != backend and f"backend.{name}." in module:
                return module
    return None


report = []
for name in files:
    writer, case = name.split("-", 1)
    entry = {"writer": writer, "reader": backend, "case": case, "stage": "load"}
    report.append(entry)
    try:
        meta = json.load(open(f"{directory}/{name}.json"))
        expected = np.load(f"{directory}/{name}.npz")
        with open(f"{directory}/{name}.pkl", "rb") as f:
            model = pickle.load(f)
        entry["stage"] = "values"
        problem = compare(meta, expected, list(model.variables) + list(model.optimizer.variables))
        if problem is None and other_backend_module(model.optimizer):
            problem = f"optimizer class from another backend: {other_backend_module(model.optimizer)}"
        if problem is None and writer != backend and model.jit_compile != AUTO_JIT:
            problem = f"jit_compile {model.jit_compile!r} from {writer}, not {backend}'s own choice {AUTO_JIT!r}"
        if problem is None:
            entry["stage"] = "predict"
            predictions = keras.ops.convert_to_numpy(model.predict(expected["x"], verbose=0)).astype("float64")
            tolerance = 1e-5 if "16" not in meta["prediction_dtype"] else 2e-2
            if not np.allclose(predictions, expected["predictions"], rtol=tolerance, atol=tolerance):
                problem = f"predictions differ: {predictions.ravel()[:4]} vs {expected['predictions'].ravel()[:4]}"
        if problem is None:
            entry["stage"] = "fit"
            model.fit(expected["x"], expected["y"], epochs=1, batch_size=8, verbose=0)
            entry["stage"] = "done"
        entry["problem"] = problem
    except Exception as e:
        entry["error"] = type(e).__name__
        entry["error_classes"] = [c.__name__ for c in type(e).__mro__]
        entry["message"] = str(e)[:2000]
        entry["traceback"] = traceback.format_exc()[-3000:]
print("REPORT " + json.dumps(report))
"""


def _cases(writer: str) -> tuple[str, ...]:
    return CASES + WRITER_ONLY.get(writer, ())


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("cross_backend")
    (directory / "xb_custom.py").write_text(CUSTOM_MODULE)
    # The three writers, then the three readers, each side in parallel: their time is mostly imports (the side of
    # this process's backend is forked from an interpreter that has imported Keras).
    with concurrent.futures.ThreadPoolExecutor(len(BACKENDS)) as pool:

        def side(code: str, backend: str, *args: str) -> concurrent.futures.Future:
            env = {"KERAS_BACKEND": backend}
            return pool.submit(
                run_python, code, str(directory), *args, cwd=directory, env=env, timeout=900, keras_imported=True
            )

        for future in [side(WRITER, w, *_cases(w)) for w in BACKENDS]:
            future.result()
        files = [f"{writer}-{case}" for writer in BACKENDS for case in _cases(writer)]
        outputs = [future.result() for future in [side(READER, r, *files) for r in BACKENDS]]
    found = {}
    for out in outputs:
        line = next(line for line in reversed(out.splitlines()) if line.startswith("REPORT "))
        for entry in json.loads(line[len("REPORT ") :]):
            found[entry["writer"], entry["reader"], entry["case"]] = entry
    return found


MATRIX = [(w, r, c) for w in BACKENDS for r in BACKENDS for c in _cases(w)]


@pytest.mark.parametrize("writer,reader,case", MATRIX, ids=[f"{w}-to-{r}-{c}" for w, r, c in MATRIX])
def test_a_payload_loads_under_every_backend(reports, writer, reader, case):
    entry = reports[writer, reader, case]
    expected_error = EXPECTED_ERRORS.get((case, reader))
    if expected_error is not None:
        assert "error" in entry, f"expected an error naming {expected_error}, got {entry}"
        # keras_pickle.BackendConversionError: a StateMismatchError, a KerasUnpicklingError.
        assert {"BackendConversionError", "StateMismatchError", "UnpicklingError"} <= set(entry["error_classes"]), entry
        for word in expected_error:
            assert word in entry["message"], entry["message"]
        return
    assert "error" not in entry, f"{entry['stage']}: {entry.get('error')}: {entry.get('message')}\n{entry['traceback']}"
    assert entry["problem"] is None, entry["problem"]
    assert entry["stage"] == "done"


# --------------------------------------------------------------------------
# The conversion rules, in this (TensorFlow) process
# --------------------------------------------------------------------------


def _variable(value, dtype, name="v"):
    import keras

    return keras.Variable(np.asarray(value), dtype=dtype, trainable=False, name=name)


def _values(variable):
    import keras

    return keras.ops.convert_to_numpy(variable).tolist()


def test_integers_from_another_backend_are_converted_by_value():
    iteration = _variable(0, "int64", name="iteration")
    saved = [("iteration", np.array(7, "int32"))]
    _rebuild_state.assign_in_order([iteration], saved, owner="test", written_backend="jax")
    assert _values(iteration) == 7


def test_an_integer_that_does_not_fit_is_refused_naming_the_variable():
    value = np.array(2**40, "int64")
    with pytest.raises(BackendConversionError, match="'iteration'.*1099511627776.*int32") as info:
        _convert.converted(_variable(0, "int32"), value, "int32", where="Variable #0 'iteration'", path="iteration")
    assert info.value.path == "iteration" and isinstance(info.value, StateMismatchError)


def test_a_seed_state_is_its_32_bits():
    seed = _variable([0, 0], "int32", name=_convert.SEED_STATE_NAME)

    def convert(values, source, target):
        return _convert.converted(seed, np.array(values, source), target, where="seed", path="seed").tolist()

    assert convert([-5, 3], "int32", "uint32") == [2**32 - 5, 3]
    assert convert([-5, 3], "int32", "int64") == [2**32 - 5, 3]
    assert convert([2**32 - 5, 3], "uint32", "int32") == [-5, 3]
    assert convert([2**32 - 5, 3], "int64", "int32") == [-5, 3]
    assert convert([-5, 3], "int64", "uint32") == [2**32 - 5, 3]
    with pytest.raises(BackendConversionError, match="32 bits"):
        convert([2**40, 3], "int64", "uint32")
    with pytest.raises(BackendConversionError, match="32 bits"):
        convert([-(2**31) - 1, 3], "int64", "int32")


def test_the_same_backend_converts_nothing():
    variable = _variable(0, "int64")
    with pytest.raises(StateMismatchError, match="dtype int32 in the payload but int64") as info:
        saved = [("v", np.array(1, "int32"))]
        _rebuild_state.assign_in_order([variable], saved, owner="test", written_backend="tensorflow")
    assert not isinstance(info.value, BackendConversionError)
    # Floats are never converted, whoever wrote them.
    weights = _variable([0.0, 0.0], "float32")
    with pytest.raises(StateMismatchError, match="dtype float64 in the payload but float32"):
        _rebuild_state.assign_in_order([weights], [("w", np.ones(2, "float64"))], owner="test", written_backend="jax")


def test_another_backends_optimizer_classes_are_named_by_their_public_class():
    torch_adam = {"module": "keras.src.backend.torch.optimizers.torch_adam", "class_name": "Adam",
                  "config": {"learning_rate": 0.5}, "registered_name": "Adam"}  # fmt: skip
    scaled = {"module": "keras.optimizers", "class_name": "LossScaleOptimizer",
              "config": {"inner_optimizer": torch_adam}, "registered_name": None}  # fmt: skip
    config = {"optimizer": scaled, "loss": "mse"}
    portable = _convert.portable_config(config)
    assert portable["optimizer"]["config"]["inner_optimizer"]["module"] == "keras.optimizers"
    assert torch_adam["module"].startswith("keras.src.backend.torch")  # the input is not changed
    # This process's backend too: Keras resolves the public class to its own (no module imported by name).
    mine = {**torch_adam, "module": "keras.src.backend.tensorflow.optimizer"}
    assert _convert.portable_config(mine) == {**mine, "module": "keras.optimizers"}
    custom = {**torch_adam, "registered_name": "mine>Adam"}
    assert _convert.portable_config(custom) == custom
    assert _convert.is_optimizer_config(torch_adam) and not _convert.is_optimizer_config({"module": "keras.layers"})
