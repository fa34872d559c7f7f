"""Payloads across Keras versions: a newer Keras's payload loads on an older one or says why in
one line, an older one's loads bit-exact, and every load error names both sides' versions.

The cross-version tests run ``tests/models/skew_side.py`` in fresh interpreters on the JAX backend:
the current Keras writes, each older Keras 3 found (``tests/run_all.py`` installs 3.10.0 and 3.8.0, the
oldest ``pyproject.toml`` admits, under ``.ci/keras/``; or name directories holding a ``keras``
package in ``KERAS_PICKLE_OLD_KERAS``, separated by ``os.pathsep``) reads those payloads and
writes its own (in parallel), and the current Keras reads them. Four interpreters in all,
however many models. Without an older Keras these tests skip, unless
``KERAS_PICKLE_REQUIRE_OLD_KERAS=1`` (``tests/run_all.py`` sets it, after installing
them): then they fail.

This file is not marked ``backends``: ``tests/run_all.py`` runs it once, in the TensorFlow run
(the subprocesses choose JAX themselves), so the cross-version check runs exactly once per CI run.
The in-process tests forge headers from another Keras on the current one.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import cloudpickle
import keras
import numpy as np
import pytest
import skew_models
import zoo
from helpers import REPO_DIR, TESTS_DIR

import keras_pickle
from keras_pickle import _format
from keras_pickle._rebuild import skew as _skew

OLD_KERAS_ROOT = REPO_DIR / ".ci" / "keras"
NEWER_ONLY_FEATURES = {"int4_dense": "quantization_config", "gated_attention": "use_gate"}
"""Models a newer Keras writes with a value an older one cannot honour, and the key it must name."""
NEWER_ONLY_CLASSES = {"main_newer_base"}
"""Models with a class of ``__main__`` whose Keras base class an older Keras lacks."""
ALL_MODELS = [*skew_models.MODELS, "main_by_value", *NEWER_ONLY_CLASSES]


def old_keras_dirs() -> dict[str, Path]:
    """Each older Keras found: its version -> the directory holding its ``keras`` package."""
    listed = os.environ.get("KERAS_PICKLE_OLD_KERAS")
    candidates = [Path(p) for p in listed.split(os.pathsep) if p] if listed else sorted(OLD_KERAS_ROOT.glob("*"))
    found = {}
    for directory in candidates:
        infos = sorted(directory.glob("keras-*.dist-info"))
        if (directory / "keras").is_dir() and infos:
            found[infos[0].name[len("keras-") : -len(".dist-info")]] = directory
    return found


OLD = old_keras_dirs()
NOT_FOUND = (
    f"no older Keras 3 found (tests/run_all.py installs them under {OLD_KERAS_ROOT}: "
    "pip install --no-deps --target .ci/keras/3.10.0 keras==3.10.0)"
)


# --------------------------------------------------------------------------
# Across real Keras versions (subprocesses, JAX)
# --------------------------------------------------------------------------


def _side(old: Path | None, *args: str | Path) -> subprocess.Popen:
    path = [str(REPO_DIR), str(TESTS_DIR)] if old is None else [str(old), str(REPO_DIR), str(TESTS_DIR)]
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join(path)}
    argv = [sys.executable, str(Path(__file__).resolve().with_name("skew_side.py")), *map(str, args)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, what: str) -> dict:
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, f"{what} failed ({process.returncode}):\n{stdout[-3000:]}\n{stderr[-6000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """``(old version, "newer_to_older" | "older_to_newer")`` -> the reading side's report."""
    if not OLD:
        if os.environ.get("KERAS_PICKLE_REQUIRE_OLD_KERAS") == "1":
            pytest.fail(NOT_FOUND + ", and KERAS_PICKLE_REQUIRE_OLD_KERAS=1")
        pytest.skip(NOT_FOUND)
    root = tmp_path_factory.mktemp("skew")
    _finish(_side(None, "--write", root / "new"), f"Keras {keras.__version__} writing")
    olds = {version: _side(path, "--read", root / "new", "--write", root / version) for version, path in OLD.items()}
    found = {}
    for version, process in olds.items():
        found[(version, "newer_to_older")] = _finish(process, f"Keras {version}")[str(root / "new")]
    reads = [arg for version in OLD for arg in ("--read", root / version)]
    for directory, report in _finish(_side(None, *reads), f"Keras {keras.__version__} reading").items():
        found[(Path(directory).name, "older_to_newer")] = report
    return found


CASES = [(version, model) for version in OLD for model in ALL_MODELS] or [pytest.param("none", "none", id="none")]


@pytest.mark.parametrize(("version", "model"), CASES)
def test_newer_to_older(reports, version, model):
    """A payload of today's Keras loads on an older one, bit-exact, or is refused naming the key."""
    report = reports[(version, "newer_to_older")]
    result = report["models"][model]
    writer, reader = report["writer"]["keras"], report["reader"]["keras"]
    if model in NEWER_ONLY_FEATURES:
        assert result["outcome"] == "VersionSkewError", result
        message = result["message"]
        assert f"written by Keras {writer}" in message and f"on Keras {reader}" in message, message
        assert f"{NEWER_ONLY_FEATURES[model]}=" in message and "pip install 'keras>=" in message, message
        if model == "int4_dense":  # the other remedy: a mode the reader has
            assert f"quantized with a mode Keras {reader} has (int8, float8)" in message, message
        return
    if model in NEWER_ONLY_CLASSES:
        # Written by cloudpickle and by keras_pickle, read by pickle and by keras_pickle: one family error.
        assert set(result) == {f"{w}_{r}" for w in ("cloudpickle", "plain") for r in ("pickle", "keras_pickle")}
        for way, outcome in result.items():
            assert outcome["outcome"] == "CustomObjectLoadError", (way, outcome)
            message = outcome["message"]
            assert f"written by Keras {writer}" in message and f"on Keras {reader}" in message, (way, message)
            assert "__main__.MainPool" in message and "adaptive_average_pooling1d" in message, (way, message)
            assert f"Load it with Keras {writer} or newer (pip install 'keras>={writer}')" in message, (way, message)
        return
    _assert_faithful(model, result, report)


@pytest.mark.parametrize(("version", "model"), CASES)
def test_older_to_newer(reports, version, model):
    """A payload of an older Keras loads on today's bit-exact and, where both can train, trains on identically."""
    report = reports[(version, "older_to_newer")]
    result = report["models"][model]
    if result["outcome"] == "not written":
        assert model in {*NEWER_ONLY_FEATURES, *NEWER_ONLY_CLASSES}, result  # a feature that Keras lacks
        return
    # main_by_value from Keras 3.8 names keras.api (3.8's public modules) in its carried code, which
    # today's Keras lacks; it loads because the reading script defines MainScale itself, and a class
    # carried by value is the loading main script's own where it defines one.
    _assert_faithful(model, result, report)


def _assert_faithful(model: str, result: dict, report: dict) -> None:
    """Loaded; every variable bit-exact, the same outputs; trained on as the writer did, where both can train."""
    assert result["outcome"] == "loaded", result
    assert result["variables"] and result["outputs"], result
    assert result.get("vocabulary", True) and result.get("unread_slots_zero", True), result
    if (
        model in {*skew_models.TRAINED, "main_by_value"}
        and report["writer"]["train"] == report["reader"]["train"] == "yes"
    ):
        assert result["trains_identically"], result


# --------------------------------------------------------------------------
# In process: headers forged as another Keras wrote them
# --------------------------------------------------------------------------


class Forged:
    """Pickles as restore(header, body) with the header and body given."""

    def __init__(self, header, body):
        self.header, self.body = header, body

    def __reduce__(self):
        return _format.restore, (self.header, self.body)


def forged(model, keras_version: str, **dense_keys) -> bytes:
    """``model``'s payload as Keras ``keras_version`` would have written it, its Dense configs with ``dense_keys``."""
    _function, (header, body) = model.__reduce_ex__(5)
    config = json.loads(body["config"])
    for layer in config["config"]["layers"]:
        if layer["class_name"] == "Dense":
            layer["config"].update(dense_keys)
    return pickle.dumps(Forged({**header, "keras_version": keras_version}, {**body, "config": json.dumps(config)}), 5)


def small_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="small")
    model.compile(optimizer="adam", loss="mse")
    return model


def test_version_tuple():
    assert _skew.version_tuple("3.15.1") == (3, 15, 1)
    assert _skew.version_tuple("3.16.0.dev2026010100") == (3, 16, 0)
    assert _skew.version_tuple("3.16.0rc1") == (3, 16, 0)
    assert _skew.version_tuple("3.10.0") > _skew.version_tuple("3.8.0")


@pytest.mark.parametrize("safe_mode", [True, False])
def test_a_newer_kerass_default_valued_keys_are_dropped(safe_mode):
    model = small_model()
    # future_option: None is "not set"; quantization_config's default is listed (None), lora_alpha's too.
    data = forged(model, "99.0.0", future_option=None, lora_alpha=None)
    restored = keras_pickle.loads(data, safe_mode=safe_mode)
    x = np.ones((2, 3), "float32")
    assert np.array_equal(restored(x), model(x))


@pytest.mark.parametrize("safe_mode", [True, False])
def test_a_value_this_keras_cannot_honour_is_refused_naming_both_sides(safe_mode):
    data = forged(small_model(), "99.0.0", future_option="on")
    with pytest.raises(keras_pickle.VersionSkewError) as info:
        keras_pickle.loads(data, safe_mode=safe_mode)
    error = info.value
    message = str(error)
    assert "written by Keras 99.0.0" in message and f"cannot load on Keras {keras.__version__}" in message
    assert "Dense 'dense' sets future_option='on'" in message
    assert "pip install 'keras>=99.0.0'" in message and "at its default" in message
    assert (error.written_by, error.loading_on, error.where, error.key) == (
        "99.0.0",
        keras.__version__,
        "Dense 'dense'",
        "future_option",
    )
    assert isinstance(error, keras_pickle.KerasUnpicklingError) and isinstance(error, pickle.UnpicklingError)


def test_a_listed_key_is_dropped_at_its_listed_default_only(monkeypatch):
    # As a Keras 99 would write a key it added with default 0.99 (the table lists it).
    monkeypatch.setitem(_skew.WRITER_DEFAULTS, "BatchNormalization", {"future_momentum": 0.99})
    keras_pickle.loads(forged_batch_norm(future_momentum=0.99))
    with pytest.raises(keras_pickle.VersionSkewError, match="BatchNormalization 'bn' sets future_momentum=0.5") as info:
        keras_pickle.loads(forged_batch_norm(future_momentum=0.5))
    assert "at its default (0.99)" in str(info.value)
    with pytest.raises(keras_pickle.VersionSkewError, match="future_momentum=None"):
        keras_pickle.loads(forged_batch_norm(future_momentum=None))  # None is not this key's default


def forged_batch_norm(**keys) -> bytes:
    model = keras.Sequential([keras.Input((3,)), keras.layers.BatchNormalization(name="bn")])
    _function, (header, body) = model.__reduce_ex__(5)
    config = json.loads(body["config"])
    (layer,) = [layer for layer in config["config"]["layers"] if layer["class_name"] == "BatchNormalization"]
    layer["config"].update(keys)
    return pickle.dumps(Forged({**header, "keras_version": "99.0.0"}, {**body, "config": json.dumps(config)}), 5)


def test_an_unnamed_object_is_named_by_its_owner():
    model = small_model()
    _function, (header, body) = model.__reduce_ex__(5)
    config = json.loads(body["config"])
    (dense,) = [layer for layer in config["config"]["layers"] if layer["class_name"] == "Dense"]
    dense["config"]["kernel_initializer"]["config"]["future_axes"] = [0]
    data = pickle.dumps(Forged({**header, "keras_version": "99.0.0"}, {**body, "config": json.dumps(config)}), 5)
    with pytest.raises(keras_pickle.VersionSkewError) as info:
        keras_pickle.loads(data)
    assert info.value.where == "GlorotUniform (kernel_initializer of Dense 'dense')"


def test_an_older_writer_is_left_to_keras_and_its_error_names_both_sides():
    # Keras reads older configs itself; nothing is dropped, and what it rejects names both sides.
    data = forged(small_model(), "3.8.0", future_option=None)
    with pytest.raises(keras_pickle.KerasUnpicklingError) as info:
        keras_pickle.loads(data)
    message = str(info.value)
    assert "future_option" in message and not isinstance(info.value, keras_pickle.VersionSkewError)
    assert f"written by Keras 3.8.0 (tensorflow, format {keras_pickle.FORMAT_VERSION})" in message
    assert f"loading on Keras {keras.__version__} (tensorflow, keras_pickle {keras_pickle.__version__}" in message


def mismatched(header_changes: dict) -> bytes:
    """A payload whose config asks for a wider Dense than its saved kernel."""
    _function, (header, body) = small_model().__reduce_ex__(5)
    config = json.loads(body["config"])
    (dense,) = [layer for layer in config["config"]["layers"] if layer["class_name"] == "Dense"]
    dense["config"]["units"] = 3
    return pickle.dumps(Forged({**header, **header_changes}, {**body, "config": json.dumps(config)}), 5)


def test_a_state_error_from_another_backend_names_both_sides_and_keeps_its_class():
    data = mismatched({"backend": "torch"})
    for load in (pickle.loads, keras_pickle.loads):
        with pytest.raises(keras_pickle.StateMismatchError) as info:
            load(data)
        message = str(info.value)
        assert "(Payload written by Keras" in message and f"(torch, format {keras_pickle.FORMAT_VERSION})" in message
        assert str(info.value).count("(Payload written by") == 1


def test_errors_on_this_sides_payloads_do_not_mention_versions():
    with pytest.raises(keras_pickle.StateMismatchError) as info:
        keras_pickle.loads(mismatched({}))
    assert "Payload written by" not in str(info.value)


BY_VALUE_MODULE = """
import keras
import kp_vanishing_helper


class Shifted(keras.layers.Layer):
    def call(self, x):
        return x + kp_vanishing_helper.SHIFT
"""


def test_a_class_shipped_by_value_that_cannot_be_unpickled_is_named_not_called_not_a_payload(tmp_path, monkeypatch):
    (tmp_path / "kp_byvalue_layers.py").write_text(BY_VALUE_MODULE)
    (tmp_path / "kp_vanishing_helper.py").write_text("SHIFT = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import kp_byvalue_layers

    cloudpickle.register_pickle_by_value(kp_byvalue_layers)
    try:
        model = keras.Sequential([keras.Input((3,)), kp_byvalue_layers.Shifted(), keras.layers.Dense(1)])
        data = cloudpickle.dumps(model)
    finally:
        cloudpickle.unregister_pickle_by_value(kp_byvalue_layers)
    # The loading process has neither module: the class comes by value, its helper module is missing.
    monkeypatch.delitem(sys.modules, "kp_byvalue_layers")
    monkeypatch.delitem(sys.modules, "kp_vanishing_helper")
    (tmp_path / "kp_vanishing_helper.py").unlink()
    with pytest.raises(keras_pickle.CustomObjectLoadError) as info:
        keras_pickle.loads(data, safe_mode=False)
    error = info.value
    assert not isinstance(error, keras_pickle.NotAPayloadError)
    assert (error.name, error.missing_module) == ("kp_byvalue_layers.Shifted", "kp_vanishing_helper")
    message = str(error)
    assert "the keras_pickle payload of keras.src.models.sequential.Sequential" in message
    assert f"written and loading on Keras {keras.__version__} (tensorflow)" in message
    assert "No module named 'kp_vanishing_helper'" in message
    assert "Make the module 'kp_vanishing_helper' importable where the payload loads" in message
    with pytest.raises(keras_pickle.UnsafePayloadError):  # safe mode refuses code shipped by value, as before
        keras_pickle.loads(data)


def test_a_missing_module_after_the_header_names_the_payload():
    _function, (header, body) = small_model().__reduce_ex__(5)
    body = {**body, "custom_objects": {"thing": Missing()}}
    with pytest.raises(keras_pickle.KerasUnpicklingError) as info:
        keras_pickle.loads(pickle.dumps(Forged({**header, "keras_version": "3.10.0"}, body), 5), safe_mode=False)
    message = str(info.value)
    assert not isinstance(info.value, keras_pickle.NotAPayloadError)
    assert "Could not load the keras_pickle payload of keras.src.models.sequential.Sequential" in message
    assert "written by Keras 3.10.0" in message and "No module named 'kp_not_installed'" in message


class Missing:
    """Unpickles by importing a module the loading process does not have."""

    def __reduce__(self):
        return __import__, ("kp_not_installed",)


def test_no_numpy_module_path_in_a_payload():
    # numpy 2 renamed numpy.core to numpy._core: a payload naming either would not load on the other.
    model = zoo.trained(zoo.sequential)
    for protocol in (2, 5):
        for data in (keras_pickle.dumps(model, protocol), pickle.dumps(model, protocol)):
            modules = {module for module, _name in keras_pickle.inspect(data).imports}
            assert not any(module.split(".")[0] == "numpy" for module in modules), modules
