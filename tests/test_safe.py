"""Safe loading: keras_pickle.loads refuses code-execution gadgets before they run."""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state

import keras_pickle
from keras_pickle import _format


class Gadget:
    """Pickles as a call of ``function(*args)``."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def gadgets(marker):
    command = f"touch {marker}"
    return {
        "os.system": Gadget(os.system, command),
        "builtins.eval": Gadget(eval, f"open({str(marker)!r}, 'w').close()"),
        "builtins.exec": Gadget(exec, f"open({str(marker)!r}, 'w').close()"),
        "subprocess.call": Gadget(subprocess.call, ["touch", str(marker)]),
        "subprocess.Popen": Gadget(subprocess.Popen, ["touch", str(marker)]),
        "importlib.import_module": Gadget(importlib.import_module, "antigravity"),
        # getattr(importlib.import_module("os"), "system")(command), written by hand
        "builtins.getattr": (
            b"cbuiltins\ngetattr\n(cimportlib\nimport_module\n(Vos\ntRVsystem\ntR(V" + command.encode() + b"\ntR."
        ),
        "builtins.open": Gadget(open, str(marker), "w"),
        "numpy.load": Gadget(np.load, str(marker)),
    }


@pytest.mark.parametrize("name", sorted(gadgets("x")))
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_gadgets_are_refused_before_they_run(tmp_path, name, protocol):
    marker = tmp_path / "marker"
    gadget = gadgets(marker)[name]
    data = gadget if isinstance(gadget, bytes) else pickle.dumps(gadget, protocol=protocol)
    with pytest.raises(keras_pickle.UnsafePayloadError) as info:
        keras_pickle.loads(data)
    assert not marker.exists(), "the gadget ran"
    assert "Safe mode refused" in str(info.value)
    assert isinstance(info.value, pickle.UnpicklingError)


def test_gadget_next_to_a_valid_model_is_refused(tmp_path):
    marker = tmp_path / "marker"
    data = pickle.dumps({"model": zoo.sequential(), "extra": gadgets(marker)["os.system"]}, protocol=5)
    with pytest.raises(keras_pickle.UnsafePayloadError, match="os.system|posix.system"):
        keras_pickle.loads(data)
    assert not marker.exists()


def test_gadget_inside_the_payload_body_is_refused(tmp_path):
    marker = tmp_path / "marker"
    _function, (header, body) = zoo.sequential().__reduce_ex__(5)
    body["custom_objects"]["Scale"] = gadgets(marker)["os.system"]

    class Forged:
        def __reduce__(self):
            return _format.restore, (header, body)

    data = pickle.dumps(Forged(), protocol=5)
    with pytest.raises(keras_pickle.UnsafePayloadError):
        keras_pickle.loads(data)
    assert not marker.exists()


def test_keras_classes_resolve_but_cannot_be_called():
    data = pickle.dumps(Gadget(keras.layers.Dense, 3), protocol=5)
    with pytest.raises(keras_pickle.UnsafePayloadError, match="refused to call keras.src.layers.core.dense.Dense"):
        keras_pickle.loads(data)
    assert isinstance(pickle.loads(data), keras.layers.Dense)


def test_modules_are_never_imported():
    module = "keras_pickle_test_never_imported"
    data = b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c" + bytes([len(module)]) + module.encode()
    data += b"\x8c\x03Foo\x93)R."
    with pytest.raises(keras_pickle.UnsafePayloadError, match="is not imported"):
        keras_pickle.loads(data)
    assert module not in sys.modules


def test_keras_native_pickles_are_refused_with_a_hint():
    model = zoo.sequential()
    keras_pickle.uninstall()
    try:
        data = pickle.dumps(model)
    finally:
        keras_pickle.install()
    with pytest.raises(keras_pickle.UnsafePayloadError, match="Keras's own pickle format"):
        keras_pickle.loads(data)


def lambda_model():
    inputs = keras.Input((zoo.FEATURES,))
    outputs = keras.layers.Lambda(lambda t: t * 2.0, name="doubler")(keras.layers.Dense(2)(inputs))
    return keras.Model(inputs, outputs)


def test_lambda_layers_are_refused_in_safe_mode_only():
    model = lambda_model()
    data = keras_pickle.dumps(model)
    with pytest.raises(keras_pickle.LambdaLayerError) as info:
        keras_pickle.loads(data)
    assert "'doubler'" in str(info.value) and "safe_mode=False" in str(info.value)

    x = zoo.data()[0]
    for restored in (keras_pickle.loads(data, safe_mode=False), pickle.loads(data)):
        assert_same_state(model, restored)
        assert np.array_equal(model.predict(x, verbose=0), restored.predict(x, verbose=0))


def test_safe_mode_loads_custom_objects_of_imported_modules():
    model = zoo.trained(zoo.functional)
    restored = keras_pickle.loads(keras_pickle.dumps(model))
    assert_same_state(model, restored)


def test_safe_mode_imports_nothing_even_for_allowed_globals():
    array = np.arange(6.0).reshape(2, 3)
    data = keras_pickle.dumps({"model": zoo.sequential(), "array": array}, protocol=2)
    before = set(sys.modules)
    loaded = keras_pickle.loads(data)
    assert set(sys.modules) == before
    assert np.array_equal(loaded["array"], array)
