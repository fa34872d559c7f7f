"""A body's layout is one table (keras_pickle._wire.layout): what dumps writes, what loads decodes, what the
schema refuses and what inspect reports all follow it."""

from __future__ import annotations

import io
import pickle

import keras
import numpy as np
import pytest

import keras_pickle
from keras_pickle._blueprint import CapturedState, HeldOptimizer, LayerState
from keras_pickle._rebuild.decode import decode_state
from keras_pickle._wire import arrays, layout, schema
from keras_pickle.errors import KerasUnpicklingError


def _state() -> CapturedState:
    def values(name: str, n: int) -> list:
        return [(f"{name}/{i}", np.arange(i + 2, dtype="float32") * (i + 1)) for i in range(n)]

    return CapturedState(
        variables=values("v", 3),
        optimizer_variables=values("o", 2),
        layer_states=[LayerState(place="lookup", own_variables=values("s", 1), assets=[("vocab.txt", b"a\nb")])],
        optimizer_built=True,
        metric_variables=values("m", 2),
        held_optimizers=[
            HeldOptimizer(path="d_optimizer", config_json="{}", built=True, targets=[0, 2], variables=values("h", 2))
        ],
    )


def _encoded(entries: list) -> list:
    return [arrays.encode_array(key, value, 4) for key, value in entries]


def test_a_captured_state_encoded_and_decoded_by_the_table_is_the_same_state():
    state = _state()
    body = {"optimizer_built": True, **layout.encode(state, _encoded)}
    decoded = decode_state(body)
    for section in layout.SECTIONS:
        assert len(getattr(decoded, section.key)) == len(getattr(state, section.key))
    pairs = [(state.variables, decoded.variables), (state.metric_variables, decoded.metric_variables)]
    pairs += [(state.layer_states[0].own_variables, decoded.layer_states[0].own_variables)]
    pairs += [(state.held_optimizers[0].variables, decoded.held_optimizers[0].variables)]
    for written, read in pairs:
        assert [k for k, _ in written] == [k for k, _ in read]
        for (_, a), (_, b) in zip(written, read):
            np.testing.assert_array_equal(a, b)
    assert decoded.layer_states[0].assets == [("vocab.txt", b"a\nb")]
    assert decoded.held_optimizers[0].targets == [0, 2] and decoded.held_optimizers[0].config_json == "{}"
    assert len(list(layout.entries(body))) == 10


def test_dumps_writes_a_layer_body_s_fields_in_the_table_s_order():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    header, body = pickle.loads(
        keras_pickle.dumps(model),
        fix_imports=False,
    ).__reduce_ex__(2)[1]
    assert tuple(body) == layout.LAYER_BODY_FIELDS
    assert header["n_variables"] == len(list(layout.entries(body)))


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (("lookup", [], [("vocab.txt", 3)]), "asset 'vocab.txt' holds a int, not bytes"),
        (("lookup", []), "a layer_states entry is not a (place, variables, assets) tuple"),
        ((7, [], []), "a layer_states entry is not a (place, variables, assets) tuple"),
    ],
)
def test_the_schema_refuses_what_the_table_finds_wrong_in_a_record(record, problem):
    section = next(s for s in layout.SECTIONS if s.key == "layer_states")
    assert layout.record_problem(section, record) == problem
    with pytest.raises(
        KerasUnpicklingError, match=f"^Corrupt keras_pickle payload: {problem.replace('(', '.').replace(')', '.')}"
    ):
        list(layout.checked_entries({"layer_states": [record]}))


def test_inspect_reports_the_problem_the_schema_raises_for_a_malformed_record():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    header, body = keras_pickle.loads(keras_pickle.dumps(model)).__reduce_ex__(4)[1]
    body = {**body, "held_optimizers": [("d_optimizer", "{}", "yes", [], [])]}
    data = pickle.dumps(_Payload(header, body), protocol=4)
    with pytest.raises(KerasUnpicklingError, match="held_optimizers entry is not"):
        schema.check_body(header, body, is_custom_object=lambda obj: True)
    info = keras_pickle.inspect(io.BytesIO(data))
    assert "a held_optimizers entry is not (path, config, built, targets, variables)" in info.warnings


class _Payload:
    """Pickles as the reconstructor call with a given header and body (a payload written by hand)."""

    def __init__(self, header: dict, body: dict):
        self.header, self.body = header, body

    def __reduce__(self):
        return keras_pickle._format.restore, (self.header, self.body)


@pytest.mark.parametrize("shape", [(True, 2), (2, -1), [2, 2]])
def test_loading_and_checking_refuse_the_same_array_entries(shape):
    entry = ("v", "<f4", shape, bytes(16))
    with pytest.raises(KerasUnpicklingError) as checked:
        arrays.check_entry(entry, "variables")
    with pytest.raises(KerasUnpicklingError) as decoded:
        arrays.decode_array(entry)
    assert str(checked.value) == str(decoded.value)
