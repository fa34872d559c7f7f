"""The public API's errors name a fix that works, and nothing is refused that would lose nothing
(issue: "every error names a fix that works"). Each test follows the advice it checks.

Keras's own pickles are converted once (``keras_pickle.convert``); ``load`` takes a path and says what
it takes; an optimizer pickled after its model comes back as the model's whatever the order of
``compile()`` and ``install()``; an optimizer never built and a metric that accumulated nothing travel
by their config.
"""

from __future__ import annotations

import importlib.util
import io
import json
import pickle

import keras
import numpy as np
import pytest
import zoo
from helpers import REPO_DIR, assert_same_predictions, assert_same_state, constructed_before_install, run_python
from keras.src.saving.keras_saveable import KerasSaveable

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


class _AsKerasPicklesIt:
    """Pickles as Keras's own ``KerasSaveable.__reduce__`` pickles ``model``, whatever else patched
    ``Model.__reduce__`` (scikeras does on import, so a pytest process that collected its tests has it)."""

    def __init__(self, model):
        self.model = model

    def __reduce__(self):
        return vars(KerasSaveable)["__reduce__"](self.model)


def keras_native(model) -> bytes:
    """What ``pickle.dumps(model)`` writes without keras_pickle: Keras's own ``__reduce__``."""
    keras_pickle.uninstall()
    try:
        return pickle.dumps(_AsKerasPicklesIt(model))
    finally:
        keras_pickle.install()


def compiled_subclassed():
    model = zoo.subclassed()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    x, y = zoo.data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    return model


@pytest.mark.parametrize(
    "build, custom_objects",
    [
        (zoo.sequential, {"Scale": zoo.Scale}),
        (zoo.functional, {"Block": zoo.Block}),
        (compiled_subclassed, {"Tower": zoo.Tower, "Block": zoo.Block}),
    ],
    ids=["sequential", "functional with a custom layer", "compiled subclassed"],
)
def test_a_keras_pickle_is_converted_as_the_error_says(build, custom_objects):
    model = build()
    data = keras_native(model)
    for attempt in (lambda: keras_pickle.loads(data), lambda: keras_pickle.loads(data, safe_mode=False)):
        with pytest.raises(keras_pickle.KerasUnpicklingError) as info:
            attempt()
        assert "keras_pickle.convert(data, custom_objects=" in str(info.value)
        assert len(str(info.value)) < 1500, "the advice is buried"
    converted = keras_pickle.convert(data, custom_objects=custom_objects)
    loaded = keras_pickle.loads(converted)  # safe mode, the caller's usual path from now on
    assert type(loaded) is type(model)
    # Everything Keras's pickle held, kept (Keras's own format does not hold seed-generator states).
    with keras.saving.custom_object_scope(custom_objects):
        held = pickle.loads(data)
    assert_same_state(held, loaded)
    assert_same_predictions(model, loaded, zoo.data()[0])


FRESH_CONVERT = """
import pathlib, sys

import numpy as np

import keras_pickle

here = pathlib.Path(sys.argv[1])
data = (here / "native.pkl").read_bytes()
try:
    keras_pickle.convert(data)
except keras_pickle.KerasUnpicklingError as e:
    first, *code = str(e).splitlines()
else:
    raise SystemExit("convert did not refuse")
assert first.startswith("Keras could not rebuild the model in this pickle ("), first
code = [line.strip() for line in code[1:]]  # after "Give it what it needs, then convert again:"
assert code[0].startswith("from zoo import "), code
assert code[-1].startswith("converted = keras_pickle.convert(data, custom_objects={"), code
namespace = {"keras_pickle": keras_pickle, "data": data}
exec("\\n".join(code), namespace)
loaded = keras_pickle.loads(namespace["converted"])
np.save(here / "y.npy", loaded.predict(np.load(here / "x.npy"), verbose=0))
"""


class _PickledBy:
    """Pickles ``model`` as ``reducer(model)`` says, whatever reducer the process has installed."""

    def __init__(self, model, reducer):
        self.model, self.reducer = model, reducer

    def __reduce__(self):
        return self.reducer(self.model)


def _scikeras_reducer(model):
    saving_utils = pytest.importorskip("scikeras._saving_utils")
    return saving_utils.pack_keras_model(model)  # registers the model's class as ">Name", as scikeras does


@pytest.mark.parametrize(
    "reducer", [KerasSaveable.__reduce__, _scikeras_reducer], ids=["Keras's pickle", "scikeras's pickle"]
)
@pytest.mark.parametrize("build", [zoo.functional, compiled_subclassed], ids=["functional", "compiled subclassed"])
def test_convert_names_the_custom_objects_it_needs_and_following_it_converts(build, reducer, tmp_path):
    """In a fresh interpreter, where Keras knows none of the model's classes: convert's error names the classes
    outside Keras that the pickle's config names, under the names Keras looks them up by, as code to copy, and
    that code, run as written, converts."""
    model = build()
    x = zoo.data()[0]
    (tmp_path / "native.pkl").write_bytes(pickle.dumps(_PickledBy(model, reducer)))
    np.save(tmp_path / "x.npy", x)
    run_python(FRESH_CONVERT, str(tmp_path), cwd=REPO_DIR / "tests", keras_imported=True)
    assert np.array_equal(np.load(tmp_path / "y.npy"), model.predict(x, verbose=0))


WRITE_NATIVE = """
import pickle, sys
import keras, numpy as np

class Doubler(keras.layers.Layer):
    def call(self, x):
        return 2 * x

def build():
    return keras.Sequential([keras.Input((4,)), Doubler(), keras.layers.Dense(1, activation="sigmoid")])

x = np.linspace(0, 1, 160, dtype="float32").reshape(40, 4)
with open(sys.argv[1] + "/keras.pkl", "wb") as f:
    pickle.dump(build(), f)
if sys.argv[2] == "scikeras":
    from scikeras.wrappers import KerasClassifier
    estimator = KerasClassifier(build, loss="binary_crossentropy", epochs=1, verbose=0)
    with open(sys.argv[1] + "/scikeras.pkl", "wb") as f:
        pickle.dump(estimator.fit(x, (x.sum(1) > 2).astype(int)), f)
"""

FOLLOW_THE_ADVICE = """
import json, pathlib, sys
import keras, numpy as np
import keras_pickle

class Doubler(keras.layers.Layer):  # what the writing script defined, defined here as the advice says
    def call(self, x):
        return 2 * x

def build():
    return keras.Sequential([keras.Input((4,)), Doubler(), keras.layers.Dense(1, activation="sigmoid")])

said = {}
for name in sys.argv[2:]:
    data = (pathlib.Path(sys.argv[1]) / name).read_bytes()
    try:
        keras_pickle.loads(data)
    except keras_pickle.UnsafePayloadError as e:
        said[name] = str(e)
    lines = said[name].splitlines()
    code = [line.strip() for line in lines[2:]]  # the first remedy: the conversion, as code
    namespace = {"keras_pickle": keras_pickle, "data": data, "Doubler": Doubler}
    exec("\\n".join(code), namespace)
    converted = keras_pickle.loads(namespace["converted"], safe_mode=name == "keras.pkl")  # an estimator: not Keras
    model = getattr(converted, "model_", converted)
    said[name + " layers"] = [type(layer).__name__ for layer in model.layers]
print(json.dumps(said))
"""


def test_advice_for_keras_pickles_of_script_classes_names_them_and_the_first_remedy_works(tmp_path):
    """Keras's own pickle of a model with a class the script defined, and scikeras's pickle of an estimator
    whose build function the script defined: loads names what the script defined, and its first remedy,
    followed as written in a process that defines them again, converts."""
    writers = ["keras.pkl"]
    if importlib.util.find_spec("scikeras") is not None:
        writers.append("scikeras.pkl")
    run_python(WRITE_NATIVE, str(tmp_path), "scikeras" if len(writers) == 2 else "keras", keras_imported=True)
    said = json.loads(
        run_python(FOLLOW_THE_ADVICE, str(tmp_path), *writers, keras_imported=True).strip().splitlines()[-1]
    )
    keras_message = said["keras.pkl"]
    assert "Keras's own pickle format" in keras_message.splitlines()[0]
    assert keras_message.splitlines()[1].startswith("If you trust its source, convert it once")
    assert "# Doubler: the script or notebook that pickled it defined it" in keras_message
    assert "custom_objects={'Doubler': Doubler}" in keras_message and "'Name': Name" not in keras_message
    assert said["keras.pkl layers"] == ["Doubler", "Dense"]
    if "scikeras.pkl" in said:
        assert "# build: the script or notebook that pickled it defined it" in said["scikeras.pkl"]
        assert said["scikeras.pkl"].splitlines()[1].startswith("If you trust its source, convert it once")
        assert said["scikeras.pkl layers"] == ["Doubler", "Dense"]


def test_messages_are_cut_in_quoted_detail_never_before_the_class_or_the_remedy():
    """Keras's 'Could not locate class' error, as the demo and convert quote it: its first sentence, the class
    named; a keras_pickle error inside a deepcopy message: whole, its remedy included."""
    from keras_pickle import demo
    from keras_pickle._keras3.native_pickle import keras_cause
    from keras_pickle._protocol.copy import _gist

    keras_error = TypeError(
        "<class 'keras.src.models.sequential.Sequential'> could not be deserialized properly. config="
        + "{'module': 'keras', 'class_name': 'Sequential', 'config': {...}} " * 20
        + "\n\nException encountered: Could not locate class 'Doubler'. Make sure custom classes and functions "
        "are decorated with `@keras.saving.register_keras_serializable()`. If they are already decorated, make "
        "sure they are all imported."
    )
    assert demo._summary(keras_error) == "TypeError: Could not locate class 'Doubler'"
    assert keras_cause(keras_error) == "TypeError: Could not locate class 'Doubler'"
    remedy = "call keras_pickle.install() before constructing it."
    ours = keras_pickle.KerasPicklingError("Cannot pickle Tower: " + "its constructor took a model; " * 20 + remedy)
    assert _gist(ours).endswith(remedy)
    foreign = ValueError("Keras said: " + "word " * 400)
    assert "[...]" in _gist(foreign) and len(_gist(foreign)) < 500


def test_convert_refuses_what_is_not_a_keras_pickle():
    with pytest.raises(keras_pickle.NotAPayloadError, match="keras_pickle.loads"):
        keras_pickle.convert(keras_pickle.dumps(zoo.sequential()))


def test_load_takes_a_path_and_loads_says_what_it_takes(tmp_path):
    model = zoo.sequential()
    path = tmp_path / "model.pkl"
    path.write_bytes(keras_pickle.dumps(model))
    for where in (path, str(path)):
        assert_same_state(model, keras_pickle.load(where))
    with open(path, "rb") as file, pytest.raises(TypeError, match=r"a BufferedReader.*keras_pickle.load\("):
        keras_pickle.loads(file)
    with pytest.raises(TypeError, match=r"a str\..*keras_pickle.load\(file_or_path\)"):
        keras_pickle.loads(str(path))
    with pytest.raises(TypeError, match=r"Received: a bytes\. For bytes, use keras_pickle.loads"):
        keras_pickle.load(path.read_bytes())
    assert_same_state(model, keras_pickle.load(io.BytesIO(path.read_bytes())))


def test_dump_takes_a_path_as_load_does_and_blames_a_wrong_file_not_the_model(tmp_path):
    model = zoo.sequential()
    for where in (tmp_path / "as_path.pkl", str(tmp_path / "as_str.pkl")):
        keras_pickle.dump(model, where)
        assert_same_state(model, keras_pickle.load(where))
    for wrong, named in [(42, "file=42 of type int"), (b"", "file=b'' of type bytes")]:
        with pytest.raises(TypeError, match="keras_pickle.dump takes a binary file object") as info:
            keras_pickle.dump(model, wrong)
        assert named in str(info.value) and "Sequential" not in str(info.value)
    with open(tmp_path / "text.pkl", "w") as text, pytest.raises(TypeError, match="text-mode file: open it with 'wb'"):
        keras_pickle.dump(model, text)


def refusals_of(path) -> list[str]:
    """What load(path), loads(bytes) in both modes, and inspect say of the file at ``path``."""
    said = []
    for read in (
        lambda: keras_pickle.load(path),
        lambda: keras_pickle.load(path, safe_mode=False),
        lambda: keras_pickle.loads(path.read_bytes()) if path.stat().st_size else keras_pickle.load(path),
        lambda: keras_pickle.inspect(path),
    ):
        with pytest.raises(keras_pickle.NotAPayloadError) as info:
            read()
        said.append(str(info.value))
    return said


def test_bad_files_say_what_they_are(tmp_path):
    """An empty file is empty, a cut one is truncated, a weights file gets model.load_weights advice."""
    model = zoo.sequential()
    (tmp_path / "empty.pkl").write_bytes(b"")
    (tmp_path / "ten.pkl").write_bytes(keras_pickle.dumps(model)[:10])
    model.save_weights(tmp_path / "model.weights.h5")
    for message in refusals_of(tmp_path / "empty.pkl"):
        assert "is empty" in message and "EOFError" not in message, message
    for message in refusals_of(tmp_path / "ten.pkl"):
        assert "is truncated" in message and "unpack requires" not in message, message
    for message in refusals_of(tmp_path / "model.weights.h5"):
        assert "model.load_weights(path)" in message and "load_model" not in message, message
    # Following the advice loads the weights.
    rebuilt = zoo.sequential()
    rebuilt.load_weights(tmp_path / "model.weights.h5")
    assert_same_state(model, rebuilt)


WRITE_BY_VALUE = """
import sys
import keras
import keras_pickle

class Twice(keras.layers.Layer):
    def call(self, x):
        return 2 * x

keras_pickle.dump(keras.Sequential([keras.Input((2,)), Twice()]), sys.argv[1])
"""


def test_a_refusals_advice_names_the_function_the_caller_called(tmp_path):
    """A class the writing script defined travels by value; safe mode refuses it, and the advice is spelt
    for loads(data, ...), load(file, ...) or load(path, ...), whichever was called."""
    path = tmp_path / "by_value.pkl"
    run_python(WRITE_BY_VALUE, str(path), keras_imported=True)
    with open(path, "rb") as file:
        calls = {
            "keras_pickle.loads(data, allow_by_value=True)": lambda: keras_pickle.loads(path.read_bytes()),
            "keras_pickle.load(file, allow_by_value=True)": lambda: keras_pickle.load(file),
            "keras_pickle.load(path, allow_by_value=True)": lambda: keras_pickle.load(path),
        }
        for advice, call in calls.items():
            with pytest.raises(keras_pickle.UnsafePayloadError, match="carries by value") as info:
                call()
            assert advice in str(info.value), str(info.value)
            assert info.value.what == "__main__.Twice"
    # The advice works as spelt.
    restored = keras_pickle.load(path, allow_by_value=True)
    assert type(restored.layers[0]).__name__ == "Twice"


def test_an_optimizer_pickled_after_its_model_is_the_models_whether_compiled_before_or_after_install():
    x, y = zoo.data()

    def compiled():
        model = zoo.sequential()
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        model.fit(x, y, epochs=1, batch_size=8, verbose=0)
        return model

    for model in (constructed_before_install(compiled), compiled()):
        restored, optimizer = pickle.loads(pickle.dumps((model, model.optimizer)))
        assert optimizer is restored.optimizer
        assert int(optimizer.iterations) == int(model.optimizer.iterations) == 2
    with pytest.raises(keras_pickle.PickleRefusedError, match=r"pickle.dumps\(\(model, optimizer\)\)"):
        pickle.dumps(model.optimizer)  # alone, a built optimizer loses its slots: the order that works is named


def test_an_optimizer_never_built_travels_by_its_config_with_its_schedule():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.9)
    for optimizer in (keras.optimizers.Adam(0.01), keras.optimizers.SGD(schedule, momentum=0.5)):
        for restored in (pickle.loads(pickle.dumps(optimizer)), keras_pickle.loads(keras_pickle.dumps(optimizer))):
            assert type(restored) is type(optimizer) and not restored.built
            assert restored.get_config() == optimizer.get_config()
    restored = pickle.loads(pickle.dumps(keras.optimizers.SGD(schedule)))
    assert isinstance(restored._learning_rate, keras.optimizers.schedules.ExponentialDecay)
    assert restored._learning_rate.get_config() == schedule.get_config()


def test_a_metric_travels_until_it_accumulates_state():
    metric = keras.metrics.Mean(name="m")
    restored = pickle.loads(pickle.dumps(metric))
    assert type(restored) is keras.metrics.Mean and restored.name == "m"
    restored.update_state([1.0, 3.0])
    assert float(restored.result()) == 2.0
    with pytest.raises(keras_pickle.PickleRefusedError, match="accumulated state"):
        pickle.dumps(restored)
    # Loading a stateless one opts the loading process in to nothing: accumulated state stays refused.
    keras_pickle.loads(keras_pickle.dumps(keras.metrics.AUC(num_thresholds=5)))
    with pytest.raises(keras_pickle.PickleRefusedError):
        pickle.dumps(restored)


def test_scikeras_documented_optimizer_instance_crosses_a_process_pool():
    """scikeras's documented style: an optimizer instance as the estimator's argument, GridSearchCV(n_jobs=2)."""
    scikeras = pytest.importorskip("scikeras.wrappers")
    from sklearn.model_selection import GridSearchCV

    def build(units=4):
        return keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(units), keras.layers.Dense(1)])

    x, y = zoo.data(32)
    estimator = scikeras.KerasRegressor(model=build, optimizer=keras.optimizers.Adam(0.01), loss="mse",
                                        epochs=1, verbose=0, random_state=0)  # fmt: skip
    search = GridSearchCV(estimator, {"model__units": [2, 4]}, cv=2, n_jobs=2).fit(x, y.ravel())
    assert set(search.cv_results_["params"][0]) == {"model__units"}
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
