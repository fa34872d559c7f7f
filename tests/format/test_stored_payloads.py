"""Payloads written by earlier releases stay loadable; newer formats are refused clearly.

The files of tests/data were written by ``tests/data/make_payloads.py``, which stays beside them;
they are never regenerated for an earlier format version.
"""

from __future__ import annotations

import importlib.util
import pickle
import pickletools
import sys

import keras
import numpy as np
import pytest
import zoo  # noqa: F401  (the payloads' custom objects: safe mode needs their module imported)
from helpers import TESTS_DIR, ulps_apart

import keras_pickle
from keras_pickle._inspect import inspect_all, verdict

HERE = TESTS_DIR / "data"
"""The stored payloads, and the script that wrote them."""


def import_make_payloads():
    """tests/data/make_payloads.py, imported from its path (it stays beside the files it wrote)."""
    spec = importlib.util.spec_from_file_location("make_payloads", HERE / "make_payloads.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


make_payloads = import_make_payloads()
STORED = sorted(path.stem for path in HERE.glob("*.pkl"))
assert STORED, f"no stored payload in {HERE}"


def test_every_generated_payload_is_stored_and_small():
    assert STORED == sorted(make_payloads.PAYLOADS)
    for name in STORED:
        for suffix in (".pkl", ".npz"):
            assert (HERE / f"{name}{suffix}").stat().st_size < 100_000, name


def outputs(obj, x):
    if isinstance(obj, keras.Model):
        return obj.predict(x, verbose=0)
    return np.asarray(keras.ops.convert_to_numpy(obj(x)))


@pytest.mark.parametrize("name", STORED)
def test_stored_payload_loads_with_its_values_and_outputs(name):
    data = (HERE / f"{name}.pkl").read_bytes()
    expected = np.load(HERE / f"{name}.npz")
    n_variables = len([key for key in expected.files if key.startswith("var_")])

    info = keras_pickle.inspect(data, verify=True)
    # A model given to a recorded constructor is a payload of its own in the same pickle.
    every_payload = inspect_all(data, verify=True)
    assert sum(payload.n_variables for payload in every_payload) == n_variables
    assert info.format_version == int(name[1])
    assert all(w.startswith(verdict.UNDECIDED) for w in info.warnings), info.warnings  # custom objects only
    assert info.checksum_status == ("verified" if name.endswith("_checksum") else "absent")

    reference = make_payloads.reference_outputs(name, expected)
    with open(HERE / f"{name}.pkl", "rb") as f:
        loaded = [keras_pickle.loads(data), keras_pickle.load(f), pickle.loads(data)]
    for obj in loaded:
        values = make_payloads.variables_of(obj)
        assert len(values) == n_variables
        for i, value in enumerate(values):
            stored = expected[f"var_{i:03d}"]
            assert (value.dtype, value.shape) == (stored.dtype, stored.shape), (name, i)
            assert np.array_equal(value, stored), (name, i)
        # The same computation as the object the payload holds, on this machine: bit for bit.
        actual = outputs(obj, expected["x"])
        assert actual.dtype == reference.dtype and np.array_equal(actual, reference), name
    # Outputs recorded on another CPU may differ in their last bits (TensorFlow's kernels follow the
    # instruction set): the reference stays within RECORDED_ULPS (of the largest output) of them.
    assert ulps_apart(reference, expected["y"], at=np.abs(reference).max()).max() <= RECORDED_ULPS, name


RECORDED_ULPS = 8
"""How far, in units in the last place of the largest output, outputs computed here may lie from those recorded on
another CPU (2 measured between two CPUs)."""


@pytest.mark.parametrize("name", STORED)
def test_the_reference_of_a_stored_payload_is_built_from_code_with_the_stored_values(name):
    """The reference is no copy of the payload: built from the architecture's code, its values from the .npz."""
    expected = np.load(HERE / f"{name}.npz")
    reference = make_payloads.ARCHITECTURES[make_payloads.architecture_of(name)]()
    reference(expected["x"][:1])
    assert len(reference.variables) <= len([key for key in expected.files if key.startswith("var_")])
    changed = {key: expected[key] for key in expected.files}
    first = changed["var_000"]
    changed["var_000"] = first + np.ones_like(first)
    assert not np.array_equal(
        make_payloads.reference_outputs(name, changed), make_payloads.reference_outputs(name, expected)
    )


def with_format_version(data: bytes, version: int) -> bytes:
    """``data`` with the header's format_version (a BININT1 after its key) changed."""
    previous = None
    for opcode, arg, position in pickletools.genops(data):
        if opcode.name == "BININT1" and previous == "format_version":
            return data[: position + 1] + bytes([version]) + data[position + 2 :]
        if isinstance(arg, str):
            previous = arg
    raise AssertionError("no format_version in the payload")


NEWER = keras_pickle.FORMAT_VERSION + 1


@pytest.mark.parametrize("name", ["v1_sequential_checksum", "v1_sequential_protocol2", "v2_functional"])
def test_a_stored_payload_claiming_the_next_format_version_names_both_versions(name, tmp_path):
    # test_format.py forges version 7 through pickle; this edits stored bytes, as a
    # newer keras_pickle would write them, and reads them every way a user would.
    data = with_format_version((HERE / f"{name}.pkl").read_bytes(), NEWER)
    path = tmp_path / "newer.pkl"
    path.write_bytes(data)

    def from_file(load):
        with open(path, "rb") as f:
            return load(f)

    for load in (keras_pickle.loads, pickle.loads, lambda d: from_file(keras_pickle.load)):
        with pytest.raises(keras_pickle.FormatVersionError) as info:
            load(data)
        message = str(info.value)
        assert f"format version {NEWER}" in message and f"up to {keras_pickle.FORMAT_VERSION}" in message
        assert "git pull && python -m pip install -e ." in message
        assert (info.value.found_version, info.value.supported_version) == (NEWER, keras_pickle.FORMAT_VERSION)

    report = keras_pickle.inspect(path)
    assert report.format_version == NEWER
    (warning,) = [w for w in report.warnings if not w.startswith(verdict.UNDECIDED)]
    assert "newer than this keras_pickle reads" in warning and "git pull && python -m pip install -e ." in warning


ALLOWED = HERE / "allowed"
"""Objects pickled under ``install(allow=("metrics", "optimizers"))`` by format 1 as first released (commit
9efe361, before allowed objects had payload kinds of their own: the header says ``"loss"``), written with:

    keras_pickle.install(allow=("metrics", "optimizers"))
    metric = keras.metrics.Mean(name="running"); metric.update_state([1.0, 2.0, 6.0])
    pickle.dumps(metric, protocol=2); pickle.dumps(keras.optimizers.Adam(learning_rate=0.0125), protocol=2)
"""


@pytest.mark.parametrize("safe_mode", [True, False])
def test_an_allowed_metric_and_optimizer_of_format_1_load_with_their_state(safe_mode, monkeypatch):
    from keras_pickle._protocol import opt_in

    monkeypatch.setattr(opt_in, "_allowed", opt_in._allowed)  # loading one allows its kind: not beyond this test
    metric = keras_pickle.loads((ALLOWED / "v1_metric.pkl").read_bytes(), safe_mode=safe_mode)
    assert isinstance(metric, keras.metrics.Mean) and metric.name == "running"
    assert float(metric.result()) == 3.0
    optimizer = keras_pickle.loads((ALLOWED / "v1_optimizer.pkl").read_bytes(), safe_mode=safe_mode)
    assert isinstance(optimizer, keras.optimizers.Adam) and not optimizer.built
    assert float(optimizer.learning_rate) == np.float32(0.0125)
    assert keras_pickle.inspect(ALLOWED / "v1_metric.pkl").kind == "loss"
