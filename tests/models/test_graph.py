"""Graphs rebuilt from recorded output specs: the same model as tracing every layer would give."""

from __future__ import annotations

import copy
import json
import pickle

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state
from keras.src.models.functional import Functional
from keras.src.saving import object_registration

from keras_pickle._keras3 import graph as _graph

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def masked_model() -> keras.Model:
    inputs = keras.Input((6,), dtype="int32")
    embedded = keras.layers.Embedding(20, 4, mask_zero=True)(inputs)
    recurrent = keras.layers.LSTM(3)(embedded)
    shared = keras.layers.Dense(3, name="shared")
    outputs = keras.layers.Add()([shared(recurrent), shared(keras.layers.Dense(3)(recurrent))])
    return keras.Model(inputs, keras.layers.Dense(1)(outputs))


def node_specs(model: keras.Model) -> list:
    return [
        [(tuple(t.shape), t.dtype) for t in node.outputs] for layer in model.layers for node in layer._inbound_nodes
    ]


def registered_as_scikeras_does(monkeypatch, registered: bool) -> None:
    """What ``pickle.dumps(model)`` does to a process that imported scikeras (which packs models by
    registering their class): Keras's own model classes get registered names, that configs then carry.
    ``registered=False``: as in a process where that never happened (whatever the tests before did)."""
    for cls in (Functional, keras.Sequential):
        if registered:
            monkeypatch.setitem(object_registration.GLOBAL_CUSTOM_NAMES, cls, f">{cls.__name__}")
            monkeypatch.setitem(object_registration.GLOBAL_CUSTOM_OBJECTS, f">{cls.__name__}", cls)
        else:
            monkeypatch.delitem(object_registration.GLOBAL_CUSTOM_NAMES, cls, raising=False)


@pytest.mark.parametrize("after_scikeras", [False, True], ids=["", "after-scikeras"])
@pytest.mark.parametrize("build", [masked_model, zoo.sequential], ids=["functional", "sequential"])
def test_nodes_come_from_recorded_specs_and_match_a_traced_rebuild(build, after_scikeras, monkeypatch):
    registered_as_scikeras_does(monkeypatch, after_scikeras)
    model = build()
    if build is masked_model:  # a Sequential's config names its public module, and no registered name
        registered = json.loads(model.__reduce_ex__(5)[1][1]["config"]).get("registered_name")
        assert (registered or "").startswith(">") == after_scikeras, registered
    x = np.array([[3, 4, 0, 0, 0, 0], [5, 6, 7, 8, 0, 0]], "int32") if build is masked_model else zoo.data()[0]
    wired = []
    original = _graph._node
    monkeypatch.setattr(_graph, "_node", lambda layer, *a: wired.append(_graph._wirable(layer)) or original(layer, *a))
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert node_specs(restored) == node_specs(model)
        assert_same_state(model, restored)
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))
        # Equal as JSON: a layer built from its build config records its input shape as a list.
        assert json.dumps(restored.get_config()) == json.dumps(model.get_config())
    # Every node but a weightless layer with a build() of its own came from its recorded specs.
    assert wired and sum(wired) >= len(wired) - 2, wired


def test_specs_that_do_not_fit_the_payload_fall_back_to_tracing(monkeypatch):
    """A graph whose wired variables disagree with the payload is rebuilt by tracing, and loads right."""
    from keras_pickle._rebuild import assign_state as _rebuild_state

    model = masked_model()
    data = pickle.dumps(model)
    verdicts = []
    original = _rebuild_state.fits
    monkeypatch.setattr(_rebuild_state, "fits", lambda *a, **k: verdicts.append(False) or False)
    restored = pickle.loads(data)
    assert verdicts == [False]  # asked once, of the wired graph; the traced one is taken as it is
    assert_same_state(model, restored)
    assert node_specs(restored) == node_specs(model)
    monkeypatch.setattr(_rebuild_state, "fits", original)
