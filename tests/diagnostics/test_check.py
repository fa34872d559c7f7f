"""keras_pickle.check: names what cannot be pickled, and tells the truth about it."""

from __future__ import annotations

import contextlib
import copy
import io
import pickle
import socket
import threading
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf
import zoo
from helpers import constructed_before_install

import keras_pickle


class Feeder:
    def __init__(self, arrays, transform=None):
        self.arr = arrays
        self.transform = transform
        self.batch_size = 4


def module_level_transform(x):
    return x * 2


def assert_truthful(obj, report):
    """check() says ok exactly when pickle.dumps succeeds."""
    try:
        pickle.dumps(obj)
        pickles = True
    except Exception:
        pickles = False
    assert report.ok == pickles, str(report)


def test_lazy_npz_file_is_named_by_its_attribute_path(tmp_path):
    np.savez(tmp_path / "data.npz", x=np.ones(3))
    with np.load(tmp_path / "data.npz") as lazy:
        feeder = Feeder(lazy)
        report = keras_pickle.check(feeder)
        assert_truthful(feeder, report)
    assert not report.ok
    (problem,) = report.problems
    assert problem.path == "feeder.arr"
    assert "NpzFile" in problem.reason and "load the arrays inside the worker" in problem.advice
    assert "feeder.arr" in str(report)


def test_lambdas_and_local_functions_in_containers():
    def local_transform(x):
        return x

    config = {"train": lambda x: x, "eval": local_transform, "ok": module_level_transform}
    report = keras_pickle.check(config, name="config")
    assert_truthful(config, report)
    paths = {p.path: p for p in report.problems}
    assert set(paths) == {'config["train"]', 'config["eval"]'}
    assert "lambda" in paths['config["train"]'].reason
    assert "defined inside a function" in paths['config["eval"]'].reason


@pytest.mark.parametrize(
    "member, expected",
    [
        (threading.RLock(), "lock"),
        (threading.Lock(), "lock"),
        ((i for i in range(3)), "generator"),
    ],
)
def test_locks_and_generators(member, expected):
    feeder = Feeder(np.zeros(2), transform=member)
    report = keras_pickle.check(feeder)
    assert_truthful(feeder, report)
    (problem,) = report.problems
    assert problem.path == "feeder.transform" and expected in problem.reason


def test_open_file(tmp_path):
    with open(tmp_path / "f.txt", "w") as handle:
        feeder = Feeder(handle)
        report = keras_pickle.check(feeder)
        assert_truthful(feeder, report)
    assert report.problems[0].path == "feeder.arr" and "open file" in report.problems[0].reason


def accumulated(metric):
    """``metric`` after one update: state its config does not hold (a fresh one travels by its config)."""
    metric.update_state([0.0, 1.0], [0.3, 0.8])
    return metric


def built(optimizer):
    """``optimizer`` with its slots built: state its config does not hold (an unbuilt one travels by config)."""
    optimizer.build([keras.Variable(np.zeros(3, "float32"))])
    return optimizer


def test_refused_keras_objects_are_named_where_they_sit():
    params = {
        "model": zoo.sequential(),
        "metrics": [accumulated(keras.metrics.AUC()), keras.metrics.AUC(name="fresh")],
        "callbacks": [keras.callbacks.EarlyStopping()],
    }
    report = keras_pickle.check(params, name="params")
    assert_truthful(params, report)
    paths = {p.path: p for p in report.problems}
    assert set(paths) == {'params["metrics"][0]', 'params["callbacks"][0]'}
    assert "refused by design" in paths['params["metrics"][0]'].reason
    assert "functools.partial" in paths['params["callbacks"][0]'].advice


@pytest.mark.backends
def test_models_with_custom_layers_are_fine_and_weights_are_not_serialized():
    model = zoo.trained(zoo.functional)
    feeder = Feeder(np.zeros((2, 2)), transform=model)
    with (
        mock.patch("keras_pickle._capture.encode.layer_payload", side_effect=AssertionError("serialized")),
        mock.patch("keras_pickle._keras3.backend.to_numpy", side_effect=AssertionError("read weights")),
    ):
        report = keras_pickle.check(feeder)
    assert report.ok, str(report)
    assert "is pickle-safe" in str(report)
    assert_truthful(feeder, report)


def test_subclassed_model_without_recoverable_config_is_reported():
    model = constructed_before_install(lambda: zoo.NoConfigModel(5))
    model(zoo.data()[0])
    report = keras_pickle.check({"model": model})
    assert_truthful({"model": model}, report)
    (problem,) = report.problems
    assert problem.path == 'dict["model"]' and problem.type_name == "zoo.NoConfigModel"
    assert "get_config()" in problem.reason and "def get_config(self)" in problem.advice
    # The example keeps its lines, as it would be typed (it was once squashed onto one line).
    assert "\n    def get_config(self):\n        return {" in problem.advice, problem.advice
    assert "\n    def get_config(self):\n" in str(report)


def test_check_does_not_modify_its_argument():
    feeder = Feeder({"x": np.arange(3)}, transform=[module_level_transform])
    before = copy.deepcopy(feeder.__dict__)
    keras_pickle.check(feeder)
    assert feeder.__dict__.keys() == before.keys()
    assert np.array_equal(feeder.arr["x"], before["arr"]["x"]) and feeder.transform == before["transform"]


def test_cli_check(tmp_path):
    from helpers import run_python

    (tmp_path / "training_setup.py").write_text(
        "import threading\n"
        "class Feeder:\n"
        "    def __init__(self):\n"
        "        self.lock = threading.Lock()\n"
        "feeder = Feeder()\n"
        "numbers = [1, 2, 3]\n"
    )
    code = "import sys; from keras_pickle.cli import main; sys.exit(main(sys.argv[1:]))"
    out = run_python(code, "check", "training_setup:numbers", cwd=tmp_path)
    assert "numbers is pickle-safe" in out
    with pytest.raises(AssertionError, match=r"feeder.lock .*lock"):
        run_python(code, "check", "training_setup:feeder", cwd=tmp_path)


# --------------------------------------------------------------------------
# Reasons the issue lists: a socket, TensorFlow runtime objects, an optimizer
# --------------------------------------------------------------------------


def test_socket():
    with socket.socket() as connection:
        feeder = Feeder(np.zeros(2), transform=connection)
        report = keras_pickle.check(feeder)
        assert_truthful(feeder, report)
    (problem,) = report.problems
    assert (problem.path, problem.type_name) == ("feeder.transform", "socket.socket")
    assert "socket" in problem.reason and "open the connection in the worker" in problem.advice


@pytest.mark.parametrize(
    "make, type_name",
    [
        (lambda tmp_path: tf.data.Dataset.from_tensor_slices(np.arange(6)).batch(2), "Dataset"),
        (lambda tmp_path: tf.summary.create_file_writer(str(tmp_path)), "SummaryWriter"),
    ],
    ids=["tf.data.Dataset", "tf.summary writer"],
)
def test_tensorflow_runtime_objects(tmp_path, make, type_name):
    feeder = Feeder(make(tmp_path))
    report = keras_pickle.check(feeder)
    assert_truthful(feeder, report)
    (problem,) = report.problems
    assert problem.path == "feeder.arr" and problem.type_name.startswith("tensorflow.")
    assert type_name in problem.type_name and "a TensorFlow object" in problem.reason
    assert "create it in the worker" in problem.advice


def test_optimizer_instance_is_refused_by_design_with_what_to_do():
    params = {"optimizer": built(keras.optimizers.Adam(1e-3)), "unbuilt": keras.optimizers.Adam(1e-3), "lr": 1e-3}
    report = keras_pickle.check(params, name="params")
    assert_truthful(params, report)
    (problem,) = report.problems
    assert problem.path == 'params["optimizer"]' and problem.type_name.endswith(".Adam")
    assert problem.reason.startswith("refused by design: an optimizer's state")
    assert "Pickle the compiled model" in problem.advice and "optimizer.get_config()" in problem.advice


def test_report_text_of_a_small_object():
    config = {"lock": threading.Lock(), "transform": lambda x: x, "batch_size": 4}
    report = keras_pickle.check(config, name="config")
    assert_truthful(config, report)
    assert str(report) == (
        "config is not pickle-safe: 2 problems.\n"
        "config[\"lock\"] (_thread.lock): a lock (cannot pickle '_thread.lock' / '_thread.RLock' object)\n"
        "    -> create the lock in the worker\n"
        'config["transform"] (function): a lambda, which pickle cannot store by reference\n'
        "    -> use a function defined at module level (def), or functools.partial of one"
    )


# --------------------------------------------------------------------------
# install(allow=("callbacks",)): a callback is pickled attribute by attribute
# --------------------------------------------------------------------------


class Hook(keras.callbacks.Callback):
    """A callback holding whatever it is given."""

    def __init__(self, fn=None, metric=None):
        super().__init__()
        self.fn = fn
        self.metric = metric


@pytest.fixture
def allow_callbacks():
    keras_pickle.install(allow=("callbacks",))
    yield
    keras_pickle.install(allow=())


def test_allowed_tensorboard_names_its_writer_not_a_refusal(tmp_path, allow_callbacks):
    tensorboard = keras.callbacks.TensorBoard(log_dir=str(tmp_path))
    tensorboard.set_model(zoo.sequential())
    assert tensorboard._train_writer is not None  # opens the writer, as fit() does
    report = keras_pickle.check(tensorboard)
    assert_truthful(tensorboard, report)
    paths = {p.path: p for p in report.problems}
    assert 'tensorboard._writers["train"]' in paths, str(report)
    writer = paths['tensorboard._writers["train"]']
    assert "SummaryWriter" in writer.type_name and "a TensorFlow object" in writer.reason
    assert all(p.path.startswith("tensorboard.") for p in report.problems)
    assert "refused by design" not in str(report) and "builtins.dict" not in str(report)


@pytest.mark.parametrize(
    "make, path",
    [
        (lambda: keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: None), "lambdacallback.on_epoch_end"),
        (lambda: Hook(fn=lambda x: x), "hook.fn"),
    ],
    ids=["LambdaCallback", "custom callback"],
)
def test_allowed_callback_holding_a_lambda_is_not_pickle_safe(allow_callbacks, make, path):
    callback = make()
    report = keras_pickle.check(callback)
    assert_truthful(callback, report)
    (problem,) = report.problems
    assert problem.path == path and "lambda" in problem.reason


def test_allowed_callback_with_plain_attributes_is_pickle_safe(allow_callbacks):
    callback = Hook(fn=module_level_transform)
    report = keras_pickle.check(callback)
    assert report.ok, str(report)
    assert_truthful(callback, report)


def test_allowed_callback_holding_a_refused_metric_names_it(allow_callbacks):
    callback = Hook(metric=accumulated(keras.metrics.Mean()))
    report = keras_pickle.check(callback)
    assert_truthful(callback, report)
    (problem,) = report.problems
    assert problem.path == "hook.metric" and problem.reason.startswith("refused by design: a metric's")


def test_callback_with_a_lambda_without_keras_pickle_installed():
    keras_pickle.uninstall()
    callback = Hook(fn=lambda x: x)
    report = keras_pickle.check(callback)
    assert_truthful(callback, report)
    assert [p.path for p in report.problems] == ["hook.fn"]


# --------------------------------------------------------------------------
# A model is reported at the layer to blame, from configs only
# --------------------------------------------------------------------------


class Apply(keras.layers.Layer):
    """A custom layer whose constructor takes a function, and no get_config()."""

    def __init__(self, fn, **kwargs):
        super().__init__(**kwargs)
        self.fn = fn

    def call(self, x):
        return self.fn(x)


class NoConfig(keras.layers.Layer):
    """A custom layer whose get_config() fails."""

    def call(self, x):
        return x

    def get_config(self):
        raise NotImplementedError("NoConfig has no config")


def apply_model(inner):
    inputs = keras.Input((zoo.FEATURES,))
    h = keras.layers.Dense(zoo.FEATURES)(inputs)
    h = inner(h)
    return keras.Model(inputs, keras.layers.Dense(1)(h))


@contextlib.contextmanager
def no_weights_read():
    with (
        mock.patch("keras_pickle._capture.encode.layer_payload", side_effect=AssertionError("serialized")),
        mock.patch("keras_pickle._keras3.backend.to_numpy", side_effect=AssertionError("read weights")),
    ):
        yield


def test_custom_layer_with_a_lambda_argument_is_named_in_the_model():
    model = apply_model(constructed_before_install(lambda: Apply(lambda x: x * 2, name="doubler")))
    with no_weights_read():
        report = keras_pickle.check(model, name="model")
    assert_truthful(model, report)
    (problem,) = report.problems
    assert problem.path == "model.layers[2]" and model.layers[2].name == "doubler"
    assert problem.type_name == "test_check.Apply"
    assert "'doubler'" in problem.reason and "no get_config()" in problem.reason
    assert "Its argument fn is a lambda." in problem.reason and "\n" not in problem.reason
    assert "module-level function" in problem.advice and "from_config()" in problem.advice
    assert "model.layers[2] (test_check.Apply): layer 'doubler'" in str(report)


def test_a_recorded_lambda_argument_is_named_where_it_sits():
    model = apply_model(Apply(lambda x: x * 2, name="doubler"))
    with no_weights_read():
        report = keras_pickle.check(model, name="model")
    assert_truthful(model, report)
    (problem,) = report.problems
    assert problem.path == "model.get_layer('doubler').fn"
    assert "lambda" in problem.reason and "module level" in problem.advice


def test_failing_layer_nested_in_a_sequential_inside_a_functional():
    inner = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(3), NoConfig(name="broken")])
    model = apply_model(inner)
    with no_weights_read():
        report = keras_pickle.check({"model": model}, name="params")
    assert_truthful({"model": model}, report)
    (problem,) = report.problems
    assert problem.path == 'params["model"].layers[2].layers[1]'
    assert problem.reason == "layer 'broken': Keras cannot produce its config (NoConfig has no config)."
    assert "get_config()" in problem.advice


@pytest.mark.backends
@pytest.mark.parametrize("kind", ["functional", "sequential"])
def test_every_failing_layer_is_named(kind):
    first, second = Apply(lambda x: x, name="first"), NoConfig(name="second")
    if kind == "functional":
        inputs = keras.Input((zoo.FEATURES,))
        model = keras.Model(inputs, second(keras.layers.Dense(2)(first(inputs))))
        expected = {"model.get_layer('first').fn": "a lambda, which pickle cannot store by reference",
                    "model.layers[3]": "layer 'second'"}  # fmt: skip
    else:
        model = keras.Sequential([keras.Input((zoo.FEATURES,)), first, second])
        expected = {"model.get_layer('first').fn": "a lambda, which pickle cannot store by reference",
                    "model.layers[1]": "layer 'second'"}  # fmt: skip
    report = keras_pickle.check(model, name="model")
    assert_truthful(model, report)
    assert {p.path: p.reason.split(":")[0] for p in report.problems} == expected


# --------------------------------------------------------------------------
# The report agrees with pickle.dumps
# --------------------------------------------------------------------------


def test_instance_of_a_local_class_is_not_pickle_safe():
    class Local:
        pass

    feeder = Feeder(Local())
    report = keras_pickle.check(feeder)
    assert_truthful(feeder, report)
    (problem,) = report.problems
    assert problem.path == "feeder.arr" and "defined inside a function" in problem.reason


AGREES_WITH_PICKLE = {
    "io.BytesIO": lambda: io.BytesIO(b"abc"),
    "io.StringIO": lambda: io.StringIO("abc"),
    "numpy Generator": lambda: np.random.default_rng(0),
    "bound builtin method": lambda: [].append,
    "builtin classmethod": lambda: dict.fromkeys,
    "NoneType": lambda: type(None),
    "tf.TensorShape": lambda: tf.TensorShape([2, 3]),
    "tf.Module": lambda: tf.Module(),
    "tf.data.Options": lambda: tf.data.Options(),
    "tf.Graph": lambda: tf.Graph(),
    "tf.data iterator": lambda: iter(tf.data.Dataset.range(3)),
}


@pytest.mark.backends
@pytest.mark.parametrize("name", sorted(AGREES_WITH_PICKLE))
def test_report_agrees_with_pickle_dumps(name):
    feeder = Feeder(AGREES_WITH_PICKLE[name]())
    report = keras_pickle.check(feeder)
    assert_truthful(feeder, report)
    assert [p.path for p in report.problems] == ([] if report.ok else ["feeder.arr"])


@pytest.mark.parametrize("compiled", ["after install()", "before install()"])
def test_check_says_a_model_and_its_optimizer_pickle_together_as_pickle_does(compiled):
    """check() recommends pickle.dumps((model, optimizer)) and must then agree that it pickles, whenever
    the model was compiled; the optimizer before its model stays refused, by check() and by pickle."""

    def trained():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss="mse")
        model.fit(np.ones((8, 4)), np.ones((8, 2)), verbose=0)
        return model

    model = constructed_before_install(trained) if compiled == "before install()" else trained()
    for obj, ok in [
        ((model, model.optimizer), True),
        ({"model": model, "optimizer": model.optimizer}, True),
        ((model.optimizer, model), False),
    ]:
        report = keras_pickle.check(obj)
        assert report.ok is ok, str(report)
        assert_truthful(obj, report)


def test_a_compile_metric_travels_with_its_fitted_models_totals_and_check_agrees():
    """A fitted model's payload carries its compile metrics' running totals: the metric after its model
    pickles, by pickle and check() alike, and comes back as the restored model's own, totals included."""
    keras.utils.set_random_seed(0)
    auc = keras.metrics.AUC(name="auc")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=[auc])
    model.fit(np.linspace(0, 1, 32).reshape(16, 2), np.tile([[0.0], [1.0]], (8, 1)), verbose=0)
    assert float(auc.result()) != 0.0
    report = keras_pickle.check((model, auc))
    assert report.ok, str(report)
    assert_truthful((model, auc), report)
    restored, restored_auc = pickle.loads(pickle.dumps((model, auc)))
    assert float(restored_auc.result()) == float(auc.result())
    assert restored_auc is restored._compile_metrics.metrics[0]


def test_a_compile_metric_with_totals_its_unfitted_model_cannot_carry_is_refused_and_the_advice_works():
    """A model that never built its compile metrics (never fitted) carries no totals: a compile metric that
    holds some is refused even after its model, by pickle and check() alike, and the refusal's advice
    (reset_state(), then the model first) pickles it as the restored model's own metric."""
    auc = keras.metrics.AUC(name="auc")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=[auc])
    auc.update_state([0.0, 1.0], [0.2, 0.9])
    with pytest.raises(keras_pickle.PickleRefusedError, match="never fitted or evaluated") as info:
        pickle.dumps((model, auc))
    assert "metric.reset_state()" in str(info.value)
    report = keras_pickle.check((model, auc))
    assert not report.ok and "never fitted or evaluated" in str(report), str(report)
    assert_truthful((model, auc), report)

    auc.reset_state()
    report = keras_pickle.check((model, auc))
    assert report.ok, str(report)
    restored, restored_auc = pickle.loads(pickle.dumps((model, auc)))
    assert restored_auc is restored._compile_metrics._user_metrics[0]
