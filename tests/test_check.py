"""keras_pickle.check: names what cannot be pickled, and tells the truth about it."""

from __future__ import annotations

import copy
import pickle
import threading
from unittest import mock

import keras
import numpy as np
import pytest
import zoo

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


def test_refused_keras_objects_are_named_where_they_sit():
    params = {
        "model": zoo.sequential(),
        "metrics": [keras.metrics.AUC()],
        "callbacks": [keras.callbacks.EarlyStopping()],
    }
    report = keras_pickle.check(params, name="params")
    assert_truthful(params, report)
    paths = {p.path: p for p in report.problems}
    assert set(paths) == {'params["metrics"][0]', 'params["callbacks"][0]'}
    assert "refused by design" in paths['params["metrics"][0]'].reason
    assert "functools.partial" in paths['params["callbacks"][0]'].advice


def test_models_with_custom_layers_are_fine_and_weights_are_not_serialized():
    model = zoo.trained(zoo.functional)
    feeder = Feeder(np.zeros((2, 2)), transform=model)
    with (
        mock.patch("keras_pickle._payload.layer_payload", side_effect=AssertionError("serialized")),
        mock.patch("keras_pickle._backend.to_numpy", side_effect=AssertionError("read weights")),
    ):
        report = keras_pickle.check(feeder)
    assert report.ok, str(report)
    assert "is pickle-safe" in str(report)
    assert_truthful(feeder, report)


def test_subclassed_model_without_recoverable_config_is_reported():
    model = zoo.NoConfigModel(5)
    model(zoo.data()[0])
    report = keras_pickle.check({"model": model})
    assert_truthful({"model": model}, report)
    assert report.problems[0].path == 'dict["model"]' and "NoConfigModel" in report.problems[0].reason


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
