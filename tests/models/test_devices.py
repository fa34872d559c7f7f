"""Payloads are device-agnostic: nothing in one names the device its variables lived on, so a payload
written on an accelerator loads on a CPU-only worker (and the reverse), each variable created where
Keras creates a new variable in the loading process. CI has no accelerator; these tests prove the
logic that makes it hold there, on every backend."""

from __future__ import annotations

import pickle

import keras
import pytest
import zoo
from helpers import assert_same_state

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def device_of(variable) -> str:
    value = variable.value
    device = getattr(value, "device", None)
    if callable(device):
        device = device()
    if device is None and hasattr(value, "devices"):
        device = next(iter(value.devices()))
    return str(device)


def device_names(model) -> set[str]:
    """How the model's variables name their devices, in every spelling a backend gives."""
    names = set()
    for variable in model.variables:
        name = device_of(variable)
        names |= {name, name.lower(), name.rsplit("/", 1)[-1], name.rsplit("device:", 1)[-1]}
    return {name for name in names if name and name != "None"}


def test_a_payload_names_no_device_and_loads_where_keras_creates_variables():
    model = zoo.trained(zoo.functional)
    names = device_names(model)
    assert names, "the backend names no device"
    buffers: list = []
    data = keras_pickle.dumps(model, buffer_callback=buffers.append)
    for name in names:
        assert name.encode() not in data, f"the payload names the device {name!r}"
    where_new_variables_go = device_of(keras.Variable(1.0))
    restored = pickle.loads(data, buffers=buffers)
    assert {device_of(v) for v in restored.variables} == {where_new_variables_go}
    assert_same_state(model, restored)
