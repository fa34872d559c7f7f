"""The payload header, version checks, not-a-payload errors, checksums, the error family."""

from __future__ import annotations

import copy
import io
import json
import pickle

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state, constructed_before_install

import keras_pickle
from keras_pickle import _format


class Forged:
    """Pickles as restore(header, body) with whatever header and body we choose."""

    def __init__(self, header, body):
        self.header, self.body = header, body

    def __reduce__(self):
        return _format.restore, (self.header, self.body)


def reduced(obj, protocol=5):
    function, (header, body) = obj.__reduce_ex__(protocol)
    assert function is _format.restore
    return header, body


def test_header_describes_the_payload():
    model = zoo.trained(zoo.sequential)
    header, body = reduced(model)
    assert header["format"] == "keras_pickle" and header["format_version"] == keras_pickle.FORMAT_VERSION == 4
    assert header["dialect"] == "keras3" and header["keras_version"] == keras.__version__
    assert header["backend"] == keras.backend.backend() == "tensorflow"
    assert header["class"] == "keras.src.models.sequential.Sequential"
    assert header["kind"] == "layer"
    assert header["n_variables"] == len(model.variables) + len(model.optimizer.variables)
    assert header["weight_bytes"] == sum(
        keras.ops.convert_to_numpy(v).nbytes for v in model.variables + model.optimizer.variables
    )
    assert header["checksum"] is None
    assert set(body) == {
        "config",
        "variables",
        "optimizer_variables",
        "optimizer_built",
        "layer_states",
        "custom_objects",
        "dtype_policy",
        "metric_variables",
        "held_optimizers",
        "constructed",
        "compile_call",
        "compile_objects",
    }
    assert body["constructed"] == [] and body["compile_call"] is None and body["held_optimizers"] == []
    assert json.loads(body["dtype_policy"])["config"] == {"name": "float32"}
    assert body["custom_objects"]["Scale"] is zoo.Scale
    assert body["custom_objects"]["zoo>scaled_relu"] is zoo.scaled_relu  # registered (tests/zoo.py)


def test_newer_format_version_names_both_versions():
    header, body = reduced(zoo.sequential())
    data = pickle.dumps(Forged({**header, "format_version": 7}, body), protocol=5)
    for load in (pickle.loads, keras_pickle.loads):
        with pytest.raises(keras_pickle.FormatVersionError) as info:
            load(data)
        message = str(info.value)
        assert "format version 7" in message and f"up to {keras_pickle.FORMAT_VERSION}" in message
        assert f"(Keras {keras.__version__})" in message
        assert "git pull && python -m pip install -e ." in message
        assert info.value.found_version == 7 and info.value.supported_version == keras_pickle.FORMAT_VERSION
        assert isinstance(info.value, pickle.UnpicklingError)


@pytest.mark.parametrize(
    "data, found",
    [
        (pickle.dumps([1, 2, 3]), "a pickled builtins.list"),
        (b"PK\x03\x04rest-of-a-zip", "a zip archive"),
        (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
        (b"not a pickle at all", "bytes starting with"),
        (b"", "empty"),
    ],
)
def test_not_a_payload_says_what_was_found(data, found):
    with pytest.raises(keras_pickle.NotAPayloadError) as info:
        keras_pickle.loads(data)
    assert found in str(info.value)
    assert isinstance(info.value, pickle.UnpicklingError)


def test_forged_headers_are_not_payloads():
    _header, body = reduced(zoo.sequential())
    for header in (None, "keras_pickle", {"format": "other"}, {"format": "keras_pickle", "format_version": "1"}):
        with pytest.raises(keras_pickle.NotAPayloadError):
            pickle.loads(pickle.dumps(Forged(header, body), protocol=5))


def test_checksum_detects_a_changed_byte():
    model = zoo.trained(zoo.sequential)
    buffers = []
    data = keras_pickle.dumps(model, checksum=True, buffer_callback=buffers.append)
    header, _ = reduced(model)
    assert keras_pickle.loads(data, buffers=buffers) is not None
    damaged = [bytearray(b.raw()) for b in buffers]
    damaged[0][3] ^= 0x01
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="does not match its checksum"):
        keras_pickle.loads(data, buffers=damaged)


def test_checksums_block_covers_writers_that_take_no_arguments(tmp_path):
    """joblib.dump cannot pass checksum=True; keras_pickle.checksums() turns it on around the call (whatever
    the protocol: joblib.dump writes pickle.DEFAULT_PROTOCOL, 5 from Python 3.14), checksums(False) off."""
    import joblib

    model = zoo.trained(zoo.sequential)
    path = tmp_path / "model.joblib"
    with keras_pickle.checksums():
        joblib.dump(model, path)
        assert keras_pickle.inspect(keras_pickle.dumps(model, checksum=False)).checksum is None
    assert keras_pickle.inspect(path).checksum.startswith("xxh3_64+header:")
    with keras_pickle.checksums(False):
        joblib.dump(model, tmp_path / "plain.joblib")
    assert keras_pickle.inspect(tmp_path / "plain.joblib").checksum is None

    data = bytearray(path.read_bytes())
    weight = keras.ops.convert_to_numpy(model.variables[0]).tobytes()
    start = data.index(weight)
    data[start + 5] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(keras_pickle.ChecksumMismatchError):
        joblib.load(path)


def _carries_checksum(data) -> bool:
    checksum = keras_pickle.inspect(data).checksum
    assert checksum is None or checksum.startswith("xxh3_64+header:")
    return checksum is not None


def test_checksum_by_default_wherever_the_weights_are_written_in_band():
    """The default (docs/guide.md, "Checksums and versions"): a checksum wherever the weights surely go
    into the stream, none where a protocol-5 pickle may hand them to a buffer_callback (a live transport,
    where hashing costs more than the dump: python -m benchmarks checksum)."""
    model, loss = zoo.trained(zoo.sequential), keras.losses.MeanSquaredError()
    file = io.BytesIO()
    keras_pickle.dump(model, file)
    keras_native = constructed_before_install(lambda: pickle.dumps(model))  # Keras's own pickling
    found = {
        "keras_pickle.dumps": keras_pickle.dumps(model),
        "keras_pickle.dumps protocol 4": keras_pickle.dumps(model, protocol=4),
        "keras_pickle.dump": file.getvalue(),
        "keras_pickle.convert": keras_pickle.convert(keras_native, custom_objects={"Scale": zoo.Scale}),
        "pickle.dumps protocol 2": pickle.dumps(model, protocol=2),
        "pickle.dumps protocol 4": pickle.dumps(model, protocol=4),
        "keras_pickle.dumps of a loss": keras_pickle.dumps(loss),
        "pickle.dumps protocol 4 of a loss": pickle.dumps(loss, protocol=4),
        "keras_pickle.dumps buffer_callback": keras_pickle.dumps(model, buffer_callback=[].append),
        "pickle.dumps protocol 5": pickle.dumps(model, protocol=5),
        "pickle.dumps protocol 5 buffer_callback": pickle.dumps(model, protocol=5, buffer_callback=[].append),
        "pickle.dumps protocol 5 of a loss": pickle.dumps(loss, protocol=5),
    }
    in_band = {name for name in found if "protocol 5" not in name and "buffer_callback" not in name}
    assert {name for name, data in found.items() if _carries_checksum(data)} == in_band


def test_checksum_false_and_checksums_false_turn_the_default_off_and_true_turns_it_on():
    model = zoo.trained(zoo.sequential)
    assert not _carries_checksum(keras_pickle.dumps(model, checksum=False))
    assert not _carries_checksum(keras_pickle.dumps(model, protocol=2, checksum=False))
    with keras_pickle.checksums(False):
        assert not _carries_checksum(keras_pickle.dumps(model))
        assert not _carries_checksum(pickle.dumps(model, protocol=4))
        assert _carries_checksum(keras_pickle.dumps(model, checksum=True))  # the call's own word wins
    assert _carries_checksum(keras_pickle.dumps(model, checksum=True, buffer_callback=[].append))
    with keras_pickle.checksums():
        assert _carries_checksum(keras_pickle.dumps(model, buffer_callback=[].append))
        assert _carries_checksum(pickle.dumps(model, protocol=5, buffer_callback=[].append))
        assert not _carries_checksum(keras_pickle.dumps(model, checksum=False))


def _flip_a_weight_byte(data: bytes, model) -> bytes:
    weight = keras.ops.convert_to_numpy(model.variables[0]).tobytes()
    damaged = bytearray(data)
    damaged[damaged.index(weight) + 5] ^= 0x01
    return bytes(damaged)


def test_a_flipped_weight_byte_in_a_default_in_band_payload_is_damage(tmp_path):
    model = zoo.trained(zoo.sequential)
    path = tmp_path / "model.pkl"
    with open(path, "wb") as f:
        keras_pickle.dump(model, f)
    for data in (keras_pickle.dumps(model), pickle.dumps(model, protocol=4), path.read_bytes()):
        damaged = _flip_a_weight_byte(data, model)
        for load in (keras_pickle.loads, pickle.loads):
            with pytest.raises(keras_pickle.ChecksumMismatchError, match="does not match its checksum"):
                load(damaged)
    path.write_bytes(_flip_a_weight_byte(path.read_bytes(), model))
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="does not match its checksum"):
        keras_pickle.load(path)


def test_with_checksum_false_a_flipped_weight_byte_loads_unnoticed():
    """What checksum=False gives up: nothing else reads a weight's bytes."""
    model = zoo.trained(zoo.sequential)
    damaged = _flip_a_weight_byte(keras_pickle.dumps(model, checksum=False), model)
    restored = keras_pickle.loads(damaged)
    first, copy_of_first = (keras.ops.convert_to_numpy(m.variables[0]) for m in (model, restored))
    assert first.shape == copy_of_first.shape and not np.array_equal(first, copy_of_first)


def test_without_checksum_damage_to_sizes_is_still_caught():
    model = zoo.trained(zoo.sequential)
    buffers = []
    data = keras_pickle.dumps(model, buffer_callback=buffers.append)
    short = [bytes(b.raw()) for b in buffers]
    short[0] = short[0][:-4]
    with pytest.raises(keras_pickle.StateMismatchError, match="truncated or corrupt"):
        keras_pickle.loads(data, buffers=short)


def test_error_family():
    for error in (
        keras_pickle.PickleRefusedError,
        keras_pickle.UnrecoverableConfigError,
        keras_pickle.CustomObjectError,
    ):
        assert issubclass(error, keras_pickle.KerasPicklingError)
        assert issubclass(error, pickle.PicklingError)
    for error in (
        keras_pickle.NotAPayloadError,
        keras_pickle.FormatVersionError,
        keras_pickle.UnsafePayloadError,
        keras_pickle.LambdaLayerError,
        keras_pickle.StateMismatchError,
        keras_pickle.ChecksumMismatchError,
    ):
        assert issubclass(error, keras_pickle.KerasUnpicklingError)
        assert issubclass(error, pickle.UnpicklingError)
    assert issubclass(keras_pickle.KerasPicklingError, keras_pickle.KerasPickleError)
    assert issubclass(keras_pickle.KerasUnpicklingError, keras_pickle.KerasPickleError)


def test_subclassed_model_constructed_before_install_fails_at_dump_time_naming_both_remedies():
    model = constructed_before_install(lambda: zoo.NoConfigModel(5))
    model(zoo.data()[0])
    with pytest.raises(keras_pickle.UnrecoverableConfigError) as info:
        pickle.dumps(model)
    message = str(info.value)
    assert "get_config" in message and info.value.class_name == "NoConfigModel"
    assert "keras_pickle.install() before constructing" in message


def test_a_model_taking_a_model_constructed_before_install_names_its_arguments_with_their_types():
    def build():
        encoder = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(2)])
        return zoo.Wrapper(encoder, scale=np.ones(2, "float32"))

    model = constructed_before_install(build)
    model(zoo.data()[0])
    with pytest.raises(keras_pickle.UnrecoverableConfigError) as info:
        pickle.dumps(model)
    message = str(info.value)
    assert "(encoder: Sequential, scale: ndarray)" in message, message
    assert "keras_pickle.install() before constructing" in message and "from_config()" in message
    report = keras_pickle.check(model)
    assert not report.ok and "encoder: Sequential" in str(report)
    # In one process the original is at hand: deepcopy copies it as deepcopy copies an object without hooks.
    twin = copy.deepcopy(model)
    assert type(twin) is zoo.Wrapper and twin.encoder is not model.encoder
    assert_same_state(model, twin)


def test_subclassed_model_constructed_after_install_travels_with_its_arguments():
    model = zoo.NoConfigModel(5)
    x = zoo.data()[0]
    model(x)
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert restored.units == 5 and len(restored.variables) == 2
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))


class DefaultsOnly(keras.Model):
    """No get_config, constructor takes **kwargs: recoverable when arguments are defaults."""

    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)


def test_subclassed_model_without_get_config_but_default_arguments_round_trips():
    model = constructed_before_install(DefaultsOnly)
    model(zoo.data()[0])
    restored = pickle.loads(pickle.dumps(model))
    assert restored.units == 3 and len(restored.variables) == 2

    changed = constructed_before_install(lambda: DefaultsOnly(units=6))
    changed(zoo.data()[0])
    with pytest.raises(keras_pickle.UnrecoverableConfigError, match=r"units=6"):
        pickle.dumps(changed)
    recorded = DefaultsOnly(units=6)
    recorded(zoo.data()[0])
    assert pickle.loads(pickle.dumps(recorded)).units == 6


class Ghostly(keras.layers.Layer):
    def get_config(self):
        ghost = {"module": "nowhere.at.all", "class_name": "Ghost", "config": {}, "registered_name": None}
        return {**super().get_config(), "ghost": ghost}

    @classmethod
    def from_config(cls, config):
        config.pop("ghost")
        return cls(**config)


def test_custom_object_that_cannot_be_found_fails_at_dump_time():
    with pytest.raises(keras_pickle.CustomObjectError) as info:
        pickle.dumps(Ghostly())
    assert "Ghost" in str(info.value) and info.value.module == "nowhere.at.all"


def test_dtype_mismatch_is_reported_not_cast():
    from keras_pickle._rebuild import assign_state as _rebuild_state

    variable = keras.Variable(np.zeros((2,), "float32"))
    with pytest.raises(keras_pickle.StateMismatchError, match="dtype float64 in the payload but float32"):
        _rebuild_state.assign_in_order([variable], [("v", np.ones((2,), "float64"))], owner="test")
    assert np.array_equal(keras.ops.convert_to_numpy(variable), np.zeros(2))
