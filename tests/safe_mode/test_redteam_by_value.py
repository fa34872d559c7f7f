"""Safe mode against classes carried by value (``keras_pickle._format.by_value``): code is refused unread.

A class of the writer's main script travels as ``by_value(module, qualname, data)``, ``data``
being its cloudpickle bytes: code. These payloads are crafted as an attacker would
(tests/redteam.py): the carried bytes run a command when unpickled. Safe mode must refuse
before unpickling them, unless the caller opted in with ``allow_by_value=True``, and nothing may
run: no marker file, no import, no audited event, no Keras global changed.
"""

from __future__ import annotations

import os
import pickle
import sys

import cloudpickle
import keras
import numpy as np
import pytest
import redteam
from redteam import Call, Effects, GlobalRef

import keras_pickle
import keras_pickle._allow  # noqa: F401  (imported on first load: imported here, so that imports show effects)
import keras_pickle._api  # noqa: F401

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend

BY_VALUE = GlobalRef("keras_pickle._format", "by_value")


class Gate(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

    def call(self, x):
        return x * keras.ops.sigmoid(self.w)


class RunsCommand:
    """Unpickling it runs ``touch marker``: what an attacker's carried "class" does."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "pwned"


@pytest.fixture(scope="module")
def gate_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), Gate(name="gate"), keras.layers.Dense(1)])


def carrying(model, data: bytes, qualname: str = "Gate") -> bytes:
    """``model``'s payload, its custom object ``Gate`` carried by value as ``data``."""
    header, body = redteam.payload_parts(model)
    carried = Call(BY_VALUE, "__main__", qualname, data)
    carried.__module__, carried.__qualname__ = "__main__", qualname  # the name the checksum covers
    return redteam.craft(header, {**body, "custom_objects": {"Gate": carried}})


def test_safe_mode_refuses_carried_code_and_nothing_runs(gate_model, marker):
    data = carrying(gate_model, pickle.dumps(RunsCommand(marker)))
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError) as info:
        keras_pickle.loads(data)
    effects.assert_none()
    assert info.value.what == "__main__.Gate"
    assert "carries by value" in str(info.value) and "allow_by_value=True" in str(info.value)
    # The same bytes under plain pickle run the command: the refusal is what stopped it.
    with pytest.raises(keras_pickle.KerasUnpicklingError, match="not a class or function"):
        pickle.loads(data)
    assert marker.exists()


def test_a_real_carried_class_is_refused_too_and_loads_once_allowed(gate_model, marker):
    # A genuine class (cloudpickle's bytes of a class of no importable module) is code all the same.
    local = type("Gate", (Gate,), {"__module__": "__main__"})
    data = carrying(gate_model, cloudpickle.dumps(local))
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError, match="carries by value"):
        keras_pickle.loads(data)
    effects.assert_none()
    restored = keras_pickle.loads(data, allow_by_value=True)
    x = np.ones((2, 3), "float32")
    assert type(restored.layers[0]).__qualname__ == "Gate" and type(restored.layers[0]) is not Gate
    assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(gate_model(x)))


def test_a_name_the_main_script_holds_but_does_not_define_falls_back_to_the_refusal(gate_model, marker, monkeypatch):
    # __main__.system is os.system: an alias, not something the main script defines, so it never resolves.
    monkeypatch.setattr(sys.modules["__main__"], "system", os.system, raising=False)
    data = carrying(gate_model, pickle.dumps(RunsCommand(marker)), qualname="system")
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError, match="carries by value"):
        keras_pickle.loads(data)
    effects.assert_none()


def test_a_main_script_class_that_is_not_a_keras_class_is_refused_by_name(gate_model, marker, monkeypatch):
    class Payload:
        pass

    Payload.__module__, Payload.__qualname__ = "__main__", "Payload"
    monkeypatch.setattr(sys.modules["__main__"], "Payload", Payload, raising=False)
    data = carrying(gate_model, pickle.dumps(RunsCommand(marker)), qualname="Payload")
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError, match="not a Keras class"):
        keras_pickle.loads(data, allow_by_value=True)
    effects.assert_none()


def test_the_inspector_names_carried_classes_without_running_them(gate_model, marker):
    data = carrying(gate_model, pickle.dumps(RunsCommand(marker)))
    with Effects(marker) as effects:
        report = str(keras_pickle.inspect(data))
    effects.assert_none()
    assert "'__main__.Gate', carried by value" in report and "allow_by_value=True" in report
