"""Classes of the main script under plain pickle: carried by value, loaded where nothing defines them.

Each test runs a real main script (a file run as ``__main__``, or ``python -c``) in a fresh
interpreter, and loads its payload in another process that does not define the class, so no
import or registry of the test process can make it pass.
"""

from __future__ import annotations

import json
import pickle
import sys
import types

import keras
import pytest
from helpers import TESTS_DIR, run_python, run_script

import keras_pickle
from keras_pickle._rebuild.load_by_value import by_value

# A main script's opening: keras_pickle installed, a custom layer defined in __main__.
OPENING = """
import concurrent.futures, json, multiprocessing, pickle, sys
import keras, numpy as np
import keras_pickle

keras_pickle.install()


class Gate(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

    def call(self, x):
        return x * keras.ops.sigmoid(self.w)
"""

# The main script: that layer and an activation defined in __main__, a model trained one epoch.
WRITER = (
    OPENING
    + """

def doubled_relu(x):
    return keras.ops.relu(x) * 2.0


keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
layers = [keras.Input((4,)), Gate(), keras.layers.Dropout(0.2), keras.layers.Dense(1, activation=doubled_relu)]
model = keras.Sequential(layers)
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, epochs=1, batch_size=8, verbose=0)
data = pickle.dumps(model)
open(sys.argv[1], "wb").write(data)
# Every variable in order (weights, seed state, optimizer), then the predictions, as raw bytes.
expected = [keras.ops.convert_to_numpy(v.value).tobytes().hex() for v in model.variables + model.optimizer.variables]
expected.append(keras.ops.convert_to_numpy(model(x)).tobytes().hex())
# In this process the script's own Gate is found by name: safe mode needs no opt-in for a Keras class. A plain
# function is another matter: a worker's main script is not the user's, so the caller names it.
try:
    keras_pickle.loads(data)
    function_refused = False
except keras_pickle.UnsafePayloadError as e:
    function_refused = "doubled_relu" in str(e) and "custom_objects=" in str(e)
here = keras_pickle.loads(data, custom_objects={"doubled_relu": doubled_relu})
print(json.dumps({"expected": expected, "same_class_here": type(here.layers[0]) is Gate,
                  "function_refused": function_refused,
                  "same_here": keras.ops.convert_to_numpy(here(x)).tobytes().hex() == expected[-1]}))
"""
)

# Another script, defining nothing: the class can only come from the payload.
READER = """
import json, pickle, sys
import keras, numpy as np
import keras_pickle

data = open(sys.argv[1], "rb").read()
x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
try:
    keras_pickle.loads(data)
    refusal = None
except keras_pickle.UnsafePayloadError as e:
    refusal = {"what": e.what, "message": str(e)}


def state(model):
    found = [keras.ops.convert_to_numpy(v.value).tobytes().hex() for v in model.variables + model.optimizer.variables]
    return found + [keras.ops.convert_to_numpy(model(x)).tobytes().hex()]


plain = pickle.loads(data)
trusted = keras_pickle.loads(data, allow_by_value=True)
print(json.dumps({"refusal": refusal, "plain": state(plain), "trusted": state(trusted),
                  "gate": f"{type(plain.layers[0]).__module__}.{type(plain.layers[0]).__qualname__}",
                  "main_defines_gate": hasattr(sys.modules["__main__"], "Gate")}))
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("by_value")
    (folder / "writer.py").write_text(WRITER)
    (folder / "reader.py").write_text(READER)
    payload = folder / "model.pkl"
    report = json.loads(run_script(folder / "writer.py", str(payload), keras_imported=True).splitlines()[-1])
    return folder, payload, report


def test_the_writing_script_loads_its_own_class_in_safe_mode(written):
    _folder, payload, report = written
    assert report["same_class_here"] and report["same_here"] and report["function_refused"]
    assert b"keras_pickle._format" in payload.read_bytes() and b"by_value" in payload.read_bytes()


def test_a_script_that_defines_nothing_loads_every_value_bit_exact(written):
    folder, payload, report = written
    loaded = json.loads(run_script(folder / "reader.py", str(payload), keras_imported=True).splitlines()[-1])
    assert loaded["gate"] == "__main__.Gate" and not loaded["main_defines_gate"]
    expected = report["expected"]
    assert len(expected) == 13  # gate, kernel, bias, seed state; iterations, learning rate, 6 slots; predictions
    assert loaded["plain"] == expected
    assert loaded["trusted"] == expected
    refusal = loaded["refusal"]
    assert refusal["what"] == "__main__.Gate"
    assert "allow_by_value=True" in refusal["message"] and "carries by value" in refusal["message"]


def test_a_forkserver_pool_of_a_main_without_a_file_receives_the_class(tmp_path):
    # `python -c`: the children cannot re-import the main script, so __main__.Gate exists only in the
    # parent; ProcessPoolExecutor's arguments travel by plain pickle (multiprocessing's ForkingPickler).
    (tmp_path / "pool_worker.py").write_text(
        "import keras\n\ndef predict(model, x):\n    return keras.ops.convert_to_numpy(model(x)).tobytes()\n"
    )
    code = (
        OPENING
        + """
import pool_worker

keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((4,)), Gate(), keras.layers.Dense(2)])
x = np.random.default_rng(1).normal(size=(8, 4)).astype("float32")
context = multiprocessing.get_context("forkserver")
context.set_forkserver_preload([])
with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
    remote = pool.submit(pool_worker.predict, model, x).result(timeout=240)
print(remote == keras.ops.convert_to_numpy(model(x)).tobytes(), len(remote))
"""
    )
    output = run_python(code, cwd=tmp_path, env={"PYTHONPATH": f"{TESTS_DIR.parent}:{tmp_path}"})
    assert output.split()[-2:] == ["True", "64"]  # 8 x 2 float32 predictions, bit-exact


def test_a_class_cloudpickle_cannot_carry_is_refused_at_dump_time_naming_it(tmp_path):
    code = """
import pickle, threading
import keras, keras_pickle

keras_pickle.install()


class Locked(keras.layers.Layer):
    guard = threading.Lock()  # cloudpickle cannot pickle a lock: the class cannot be carried

    def call(self, x):
        return x


model = keras.Sequential([keras.Input((4,)), Locked()])
try:
    pickle.dumps(model)
except keras_pickle.KerasPicklingError as e:
    print(type(e).__name__, "|", e)
"""
    output = run_python(code, cwd=tmp_path, keras_imported=True)
    assert output.startswith("CustomObjectError |") and "__main__.Locked" in output
    assert "cloudpickle" in output and "define Locked in a module the loading process imports" in output


def test_classes_of_importable_modules_still_travel_by_reference():
    # Only the main script's classes are carried by value: a test module's travels as its import path.
    import zoo

    data = pickle.dumps(zoo.sequential())
    assert b"by_value" not in data and b"zoo" in data


def test_malformed_by_value_arguments_are_refused():
    with pytest.raises(keras_pickle.KerasUnpicklingError, match="Malformed payload: by_value takes"):
        by_value("__main__", "Gate", "not bytes")
    with pytest.raises(keras_pickle.KerasUnpicklingError, match="not a class or function"):
        by_value("__main__", "NoSuchName", pickle.dumps(3))


def test_carried_class_is_the_writers_where_the_main_script_defines_it(monkeypatch):
    # A spawn child, a rerun of the script: the main script's own class wins over the carried bytes.
    class Gate(keras.layers.Layer):
        pass

    Gate.__module__, Gate.__qualname__ = "__main__", "Gate"
    monkeypatch.setattr(sys.modules["__main__"], "Gate", Gate, raising=False)
    assert by_value("__main__", "Gate", b"never read") is Gate


def test_a_spawn_childs_main_script_class_is_written_as_the_parent_writes_it(monkeypatch):
    """A ``spawn`` child runs the main script as ``__mp_main__``: its payload of the same model is the parent's
    (``"module": null``, as Keras writes ``__main__``), so the same model has the same Dask token on both."""
    script = types.ModuleType("__mp_main__")  # as in a spawn child: the script runs under that name
    monkeypatch.setitem(sys.modules, "__main__", script)
    monkeypatch.setitem(sys.modules, "__mp_main__", script)
    written = {}
    for module in ("__main__", "__mp_main__"):
        gate = type("Gate", (keras.layers.Layer,), {"__module__": module, "call": lambda self, x: x * 2.0})
        model = keras.Sequential([keras.Input((3,)), gate(name="gate")], name="spawned")
        config = json.loads(model.__reduce_ex__(5)[1][1]["config"])
        written[module] = [layer["module"] for layer in config["config"]["layers"] if layer["class_name"] == "Gate"]
    assert written == {"__main__": [None], "__mp_main__": [None]}
