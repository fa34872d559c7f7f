"""keras_pickle._wire.upgrade: a payload of an older format version, brought to the current shape once.

Every stored payload (tests/data, versions 1 to 4), upgraded, is a payload of the current format
version by docs/format.schema.json and by the reader's own checks; version 1 and 2 shapes the stored
payloads do not hold (layer state keyed by index) are written here from a current payload and
load; and no module past the upgrade reads the format version.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
from test_format import Forged, reduced
from test_format_spec import RESTORE, RESTORE_WITH_STATE, STORED, Call, assert_valid, read, to_json

import keras_pickle
from keras_pickle._keras3 import survey as _survey
from keras_pickle._wire import checksum, schema, upgrade
from keras_pickle._wire.layout import place_position, positional_place

PACKAGE = Path(keras_pickle.__file__).resolve().parent
_V3_FIELDS = ("metric_variables", "held_optimizers", "constructed", "compile_call", "compile_objects")


def restore_calls(value: Any) -> list[tuple[dict, dict]]:
    """``(header, body)`` of every ``restore`` (or ``restore_with_state``) call in a stream read without running it."""
    found = []
    if isinstance(value, Call):
        if value.name in (RESTORE, RESTORE_WITH_STATE):
            found.append(value.args[:2])
        found += restore_calls(value.args) + restore_calls(value.state)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found += restore_calls(item)
    elif isinstance(value, dict):
        for item in value.values():
            found += restore_calls(item)
    return found


# --------------------------------------------------------------------------
# Every stored payload, upgraded, is of the current format version
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path", STORED, ids=lambda path: path.stem)
def test_a_stored_payload_upgraded_is_a_payload_of_the_current_format_version(path):
    payloads = restore_calls(read(path.read_bytes()))
    assert payloads
    for header, body in payloads:
        written = to_json((header, body))
        current_header, current_body = upgrade.to_current(header, body)
        assert to_json((header, body)) == written, "the payload as written was changed"
        assert current_header["format_version"] == schema.FORMAT_VERSION
        # docs/format.schema.json applies the current version's rules to it...
        assert_valid({"header": to_json(current_header), "body": to_json(current_body)})
        assert current_header.keys() == schema.HEADER_FIELDS
        assert current_body.keys() == schema.body_fields(current_header)
        # ... and so do the reader's own checks (its checksum was verified over the payload as written).
        schema.check_header(current_header)
        schema.check_body({**current_header, "checksum": None}, current_body, is_custom_object=lambda value: True)
        if header["format_version"] == schema.FORMAT_VERSION:
            assert (current_header, current_body) == (header, body)
        else:
            unchanged = {
                key: value for key, value in current_header.items() if key not in ("format_version", "dialect")
            }
            assert unchanged == {key: value for key, value in header.items() if key != "format_version"}
            assert current_header.get("dialect") == header.get("dialect", "keras3")


def test_there_is_one_step_from_each_older_version():
    assert len(upgrade._STEPS) == schema.FORMAT_VERSION - 1


# --------------------------------------------------------------------------
# Older shapes the stored payloads do not hold: layer state keyed by index
# --------------------------------------------------------------------------


def lookup_model() -> keras.Model:
    """A model whose vocabulary only its layer state holds (adapted: the config records none)."""
    words = keras.layers.StringLookup(name="words")
    words.adapt(["c", "a", "c", "b", "c", "a"])
    inputs = keras.Input((1,), dtype="string")
    return keras.Model(inputs, keras.layers.Dense(2, name="head")(keras.ops.cast(words(inputs), "float32")))


def written_as(version: int, model: keras.Model, place_of=None) -> tuple[dict, dict]:
    """A payload of ``model`` in format ``version`` (1 or 2), as that keras_pickle wrote it: layer state keyed
    by the layer's index in ``_flatten_layers()``, no version 3 sections, checksummed as that version was."""
    header, body = reduced(model, protocol=4)
    survey = _survey.survey(model)
    index = {survey.places[id(layer)]: position for position, layer in enumerate(survey.layers)}
    header = {key: value for key, value in header.items() if key != "dialect"}
    header["format_version"] = version
    body = {key: value for key, value in body.items() if key not in _V3_FIELDS}
    body["layer_states"] = [
        ((place_of or index.get)(place), own, assets) for place, own, assets in body["layer_states"]
    ]
    if version == 1:
        del body["dtype_policy"]
    algorithm = checksum.BODY_ONLY_CHECKSUM if version == 1 else checksum.CHECKSUM_ALGORITHM
    header["checksum"] = checksum.content_checksum(header, body, algorithm)
    return header, body


@pytest.mark.parametrize("version", [1, 2])
def test_layer_state_keyed_by_index_loads_into_the_layer_at_that_position(version):
    model = lookup_model()
    header, body = written_as(version, model)
    (state,) = body["layer_states"]
    assert isinstance(state[0], int) and state[0] > 0
    _header, current = upgrade.to_current(header, body)
    assert current["layer_states"][0][0] == positional_place(state[0]) == f"#{state[0]}/"

    restored = keras_pickle.loads(pickle.dumps(Forged(header, body), protocol=4))
    assert restored.get_layer("words").get_vocabulary() == ["[UNK]", "c", "a", "b"]
    for original, value in zip(model.variables, restored.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(value), keras.ops.convert_to_numpy(original))


def test_layer_state_keyed_by_an_index_past_the_rebuilt_layers_names_both():
    header, body = written_as(2, lookup_model(), place_of=lambda place: 99)
    with pytest.raises(keras_pickle.StateMismatchError, match=r"holds state for layer #99, .* has only \d+ layers"):
        keras_pickle.loads(pickle.dumps(Forged(header, body), protocol=4))


def test_a_version_1_payload_records_no_dtype_policy_and_is_rebuilt_under_the_loading_process_s():
    model = lookup_model()
    header, body = written_as(1, model)
    assert upgrade.to_current(header, body)[1]["dtype_policy"] == ""
    # Version 2 on record the policy: float32, whatever the loading process's.
    policies = {}
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        for version in (1, 2):
            restored = keras_pickle.loads(pickle.dumps(Forged(*written_as(version, model)), protocol=4))
            policies[version] = restored.dtype_policy.name
    finally:
        keras.config.set_dtype_policy(previous)
    assert policies == {1: "mixed_float16", 2: "float32"}


def test_a_positional_place_is_no_layer_s_own_place():
    assert [place_position(positional_place(n)) for n in (0, 7, 12345)] == [0, 7, 12345]
    for place in ("", "dense", "#3", "3/", "#03/", "#-1/", "block/#3/", "dense#2", "#3/x"):
        assert place_position(place) is None, place
    nested = keras.Sequential([keras.Input((2,)), keras.Sequential([keras.layers.Dense(2, name="")], name="")])
    places = _survey.survey(nested).places.values()
    assert all(not place.endswith("/") and place_position(place) is None for place in places), places


# --------------------------------------------------------------------------
# Nothing past the upgrade reads the format version
# --------------------------------------------------------------------------

READS_THE_VERSION = {
    "_wire/upgrade.py": "brings older versions to the current shape",
    "_wire/schema.py": "checks a header and body as written, in their version's shape; writes the current one",
    "_wire/checksum.py": "verifies the checksum over the payload as written (the version is a field it covers)",
    "_diagnosis/written_globals.py": "names the fields of the current format version, as a damaged stream holds them",
    "_inspect/describe.py": "describes the payload as stored: its format version as written",
    "_diagnosis/sides.py": "error messages name the format version the payload was written in",
}
"""The modules that may read a header's ``format_version``, and why."""

READS_AN_ABSENT_DIALECT = {
    "_diagnosis/sides.py": "error messages describe the header as written",
    "_inspect/describe.py": "describes the payload as stored",
}
"""The modules that may read a header without a ``dialect`` (one written before version 4)."""


def modules_matching(pattern: str) -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if re.search(pattern, path.read_text()):
            found.add(path.relative_to(PACKAGE).as_posix())
    return found


def test_only_the_upgrade_checks_verification_and_descriptions_of_the_written_header_read_the_format_version():
    assert modules_matching(r"""["']format_version["']""") <= set(READS_THE_VERSION)
    assert modules_matching(r"""dialect_of\(|get\(["']dialect["'],""") <= set(READS_AN_ABSENT_DIALECT)
