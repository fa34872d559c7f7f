"""One definition of "the state": copy.deepcopy rebuilds from exactly what a pickle carries.

For every kind of model the suite round-trips, the blueprint a deepcopy
rebuilds from and the one a pickle decodes to are compared field by field:
config, custom objects, every variable's key and bytes, optimizer, metric and
layer state, held optimizers, recorded constructor and compile() calls.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import keras
import numpy as np
import pytest
import test_real_models
import test_recorded_arguments
import zoo

from keras_pickle._protocol import dialects

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def lookup_model() -> keras.Model:
    lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"])
    return keras.Sequential([keras.Input((1,), dtype="string"), lookup])


MODELS = {
    **{name: (lambda builder=builder: zoo.trained(builder)) for name, builder in zoo.BUILDERS.items()},
    "int8": lambda: test_real_models.quantized_model("int8"),
    "stateful": lambda: keras.Sequential([keras.Input((3, 2), batch_size=4), keras.layers.LSTM(5, stateful=True)]),
    "recorded": test_recorded_arguments.tracked,
    "custom_compile": lambda: compiled_with_tracker(),
    "string_lookup": lookup_model,
}


def compiled_with_tracker() -> keras.Model:
    net = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(1)])
    model = test_recorded_arguments.CompiledWithTracker(net)
    model.compile(keras.optimizers.SGD(0.1), optimizer="adam", loss="mse")
    model.fit(*zoo.data(), epochs=1, batch_size=8, verbose=0)
    return model


def arrays(pairs) -> list[tuple[str, str, tuple, bytes]]:
    return [(key, np.asarray(a).dtype.str, np.asarray(a).shape, np.ascontiguousarray(a).tobytes()) for key, a in pairs]


def comparable(blueprint) -> dict:
    state = blueprint.state
    return {
        "config": blueprint.config_json,
        "custom_objects": {key: getattr(obj, "__qualname__", obj) for key, obj in blueprint.custom_objects.items()},
        "dtype_policy": blueprint.dtype_policy,
        "variables": arrays(state.variables),
        "optimizer_variables": arrays(state.optimizer_variables),
        "optimizer_built": state.optimizer_built,
        "metric_variables": arrays(state.metric_variables),
        "layer_states": [(s.place, arrays(s.own_variables), s.assets) for s in state.layer_states],
        "held_optimizers": [
            (h.path, h.config_json, h.built, h.targets, arrays(h.variables)) for h in state.held_optimizers
        ],
        "constructed": [(c.cls, len(c.args), sorted(c.kwargs)) for c in blueprint.constructed],
        "compile_call": None if blueprint.compile_call is None else repr(blueprint.compile_call[1].keys()),
        "compile_objects": blueprint.compile_objects,
    }


@pytest.mark.parametrize("name", sorted(MODELS))
def test_deepcopy_rebuilds_from_what_a_pickle_carries(name, monkeypatch):
    model = MODELS[name]()
    seen = []
    original = dialects.KERAS3.rebuild
    spy = dataclasses.replace(dialects.KERAS3, rebuild=lambda b, **k: seen.append(comparable(b)) or original(b, **k))
    monkeypatch.setitem(dialects.BY_NAME, spy.name, spy)  # what loads and deepcopy both rebuild with
    pickle.loads(pickle.dumps(model))
    pickled = seen[-1]  # the model's own: arguments, if any, are rebuilt before it
    copy.deepcopy(model)
    copied = seen[-1]
    assert pickled["variables"] or pickled["optimizer_variables"] or pickled["layer_states"], "nothing to compare"
    for field in pickled:
        assert pickled[field] == copied[field], field
