"""copy.deepcopy / copy.copy of models and layers: in-process, independent, memo-aware."""

from __future__ import annotations

import copy
import pickle
from unittest import mock

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_predictions, assert_same_state, assert_trains_identically

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


@pytest.mark.parametrize("kind", sorted(zoo.BUILDERS))
def test_deepcopy_is_faithful_and_independent(kind):
    model = zoo.trained(zoo.BUILDERS[kind])
    twin = copy.deepcopy(model)
    assert type(twin) is type(model)
    assert_same_state(model, twin)
    x, y = zoo.data()
    assert_same_predictions(model, twin, x)
    assert_trains_identically(model, twin, x, y)

    twin.layers[-1].kernel.assign(np.zeros(twin.layers[-1].kernel.shape))
    assert not np.array_equal(
        keras.ops.convert_to_numpy(model.layers[-1].kernel), keras.ops.convert_to_numpy(twin.layers[-1].kernel)
    )


def test_deepcopy_does_not_serialize():
    model = zoo.trained(zoo.sequential)
    with mock.patch.object(pickle, "dumps", side_effect=AssertionError("pickled")):
        with mock.patch("keras_pickle._capture.payload.layer_payload", side_effect=AssertionError("payload")):
            twin = copy.deepcopy(model)
    assert_same_state(model, twin)


@pytest.mark.parametrize("kind", ["sequential", "functional"])
def test_deepcopy_copies_each_variable_where_it_lives_without_a_host_round_trip(kind):
    """No value goes to numpy: each is the backend's tensor on its device, copied there by the twin's
    variable (what keeps a copy on an accelerator at device speed)."""
    from keras_pickle._keras3 import backend

    model = zoo.trained(zoo.BUILDERS[kind])
    moved = []
    to_numpy = backend.to_numpy

    def watched(value, **kwargs):
        if isinstance(value, keras.Variable) or not isinstance(value, np.ndarray):
            moved.append(getattr(value, "path", type(value).__name__))
        return to_numpy(value, **kwargs)

    with mock.patch.object(backend, "to_numpy", watched):
        with mock.patch.object(keras.ops, "convert_to_numpy", side_effect=AssertionError("to the host")):
            twin = copy.deepcopy(model)
    assert moved == [], f"moved to the host: {moved[:5]}"
    assert_same_state(model, twin)


def test_deepcopy_respects_the_memo():
    model = zoo.trained(zoo.functional)
    first_layer = model.layers[1]
    copies = copy.deepcopy({"a": model, "b": model, "layer": first_layer, "var": first_layer.kernel})
    assert copies["a"] is copies["b"]
    assert copies["layer"] is copies["a"].layers[1]
    assert copies["var"] is copies["a"].layers[1].kernel
    assert copies["layer"] is not first_layer


def test_copy_copy_is_an_independent_copy():
    model = zoo.trained(zoo.sequential)
    twin = copy.copy(model)
    assert_same_state(model, twin)
    assert twin.optimizer is not model.optimizer


def test_deepcopy_of_standalone_layer():
    layer = zoo.Scale(2.5)
    layer(zoo.data()[0])
    twin = copy.deepcopy(layer)
    assert twin.factor == 2.5
    assert_same_state(layer, twin)
