"""docs/format.md and docs/format.schema.json, held to the payloads and to the code.

Every stored payload in tests/data, and payloads written now, are read without running any
reconstructor (:class:`PayloadReader` records each call instead) and validated against the JSON
schema; the doc's tables are parsed and compared with the constants of
``keras_pickle._wire.schema``, ``keras_pickle.limits`` and ``keras_pickle._wire.arrays``.
"""

from __future__ import annotations

import copy
import importlib
import io
import json
import pickle
import re
from typing import Any

import jsonschema
import keras
import numpy as np
import pytest
from helpers import REPO_DIR

import keras_pickle
from keras_pickle import limits
from keras_pickle._wire import checksum, schema
from keras_pickle._wire.arrays import EXTENSION_ITEMSIZES

ROOT = REPO_DIR
DOC = (ROOT / "docs" / "format.md").read_text()
SCHEMA = json.loads((ROOT / "docs" / "format.schema.json").read_text())
STORED = sorted((ROOT / "tests" / "data").rglob("*.pkl"))
VERSIONS = range(1, schema.FORMAT_VERSION + 1)
RESTORE = ".".join(schema.RESTORE)
RESTORE_WITH_STATE = ".".join(schema.RESTORE_WITH_STATE)


# --------------------------------------------------------------------------
# Reading a stream without running it
# --------------------------------------------------------------------------


class Global:
    """A class or function the stream names; calling it records the call."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args: Any) -> Call:
        return Call(self.name, args)


class Call:
    """What a call in the stream returned: the callable's name, its arguments, any state set on it."""

    def __init__(self, name: str, args: tuple):
        self.name, self.args, self.state = name, args, None

    def __setstate__(self, state: Any) -> None:
        self.state = state


# Data a stream may build for real: numpy arrays and dtypes, and how protocols 0-2 spell bytes.
REAL_GLOBALS = {
    ("_codecs", "encode"),
    ("builtins", "bytearray"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
}


class PayloadReader(pickle.Unpickler):
    """Every global but plain data becomes a :class:`Global`: no reconstructor and no custom object runs."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in REAL_GLOBALS:
            return super().find_class(module, name)
        return Global(f"{module}.{name}")


def read(data: bytes, buffers: list | None = None) -> Any:
    return PayloadReader(io.BytesIO(data), buffers=buffers).load()


def to_json(value: Any) -> Any:
    """The JSON mapping of docs/format.md."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {key: to_json(item) for key, item in value.items()}
        return {"$dict": [[to_json(key), to_json(item)] for key, item in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"$set": [to_json(item) for item in value]}
    if isinstance(value, (bytes, bytearray, memoryview, pickle.PickleBuffer)):
        return {"$bytes": memoryview(value).nbytes}
    if isinstance(value, (np.ndarray, np.generic)):
        return {"$ndarray": {"dtype": value.dtype.str, "shape": list(value.shape)}}
    if isinstance(value, Global):
        return {"$global": value.name}
    if isinstance(value, Call):
        mapped = {"$call": value.name, "args": to_json(value.args)}
        if value.state is not None:
            mapped["state"] = to_json(value.state)
        return mapped
    raise TypeError(f"no JSON mapping for a {type(value).__name__}")


def calls_of(value: Any, name: str) -> list[dict]:
    """Every ``{"$call": name}`` in a mapped value, nested ones included."""
    found = []
    if isinstance(value, dict):
        if value.get("$call") == name:
            found.append(value)
        for item in value.values():
            found += calls_of(item, name)
    elif isinstance(value, list):
        for item in value:
            found += calls_of(item, name)
    return found


def payloads_of(data: bytes, buffers: list | None = None) -> list[dict]:
    """``{"header": ..., "body": ...}`` of every payload the stream holds (restore_with_state's too)."""
    mapped = to_json(read(data, buffers))
    calls = calls_of(mapped, RESTORE) + calls_of(mapped, RESTORE_WITH_STATE)
    return [{"header": call["args"][0], "body": call["args"][1]} for call in calls]


VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def assert_valid(payload: dict) -> None:
    errors = sorted(VALIDATOR.iter_errors(payload), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors)


# --------------------------------------------------------------------------
# (a) Payloads against the schema
# --------------------------------------------------------------------------


def test_the_schema_is_a_valid_draft_2020_12_schema():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_stored_payload_version_is_stored():
    versions = {payload["header"]["format_version"] for path in STORED for payload in payloads_of(path.read_bytes())}
    assert versions == set(VERSIONS)


@pytest.mark.parametrize("path", STORED, ids=lambda path: path.stem)
def test_a_stored_payload_matches_the_schema(path):
    payloads = payloads_of(path.read_bytes())
    assert payloads, "no keras_pickle payload in the stream"
    for payload in payloads:
        assert_valid(payload)
    # The file's name says its format version (v1_..., v4_tf_keras_...).
    assert payloads[0]["header"]["format_version"] == int(path.stem[1])


def small_model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dropout(0.1)])
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    model.train_on_batch(np.ones((4, 3), "float32"), np.zeros((4, 2), "float32"))
    return model


def test_a_payload_written_now_matches_the_schema_in_band_out_of_band_and_at_protocol_2():
    model = small_model()
    in_band = keras_pickle.dumps(model)
    buffers: list = []
    out_of_band = keras_pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    protocol_2 = keras_pickle.dumps(model, protocol=2)
    assert buffers, "no buffer was handed out of band"
    for data, given in ((in_band, None), (out_of_band, buffers), (protocol_2, None)):
        (payload,) = payloads_of(data, given)
        assert_valid(payload)
        header = payload["header"]
        assert header["format_version"] == schema.FORMAT_VERSION and header["kind"] == schema.KIND_LAYER
        assert header["n_variables"] == len(model.variables) + len(model.optimizer.variables) + len(
            payload["body"]["metric_variables"]
        )
    assert payloads_of(in_band)[0]["header"]["checksum"].startswith("xxh3_64+header:")
    assert payloads_of(out_of_band, buffers)[0]["header"]["checksum"] is None


def test_config_only_payloads_written_now_match_the_schema():
    # A metric that holds no state pickles as restore_with_state: a config-only payload, then its state.
    for obj, kind in ((keras.losses.MeanSquaredError(), "loss"), (keras.metrics.Mean(), "metric")):
        data = keras_pickle.dumps(obj)
        (payload,) = payloads_of(data)
        assert_valid(payload)
        assert payload["header"]["kind"] == kind and set(payload["body"]) == {"config", "custom_objects"}
    mapped = to_json(read(data))
    assert mapped["$call"] == RESTORE_WITH_STATE
    state_schema = dict(SCHEMA["$defs"]["allowed_state"], **{"$defs": SCHEMA["$defs"]})
    jsonschema.validate(mapped["args"][2], state_schema, cls=jsonschema.Draft202012Validator)


def stored(name: str) -> dict:
    (payload, *_) = payloads_of((ROOT / "tests" / "data" / f"{name}.pkl").read_bytes())
    return payload


def edited(payload: dict, edit) -> dict:
    payload = copy.deepcopy(payload)
    edit(payload)
    return payload


@pytest.mark.parametrize(
    "name, edit",
    [
        ("v4_sequential_checksum", lambda p: p["header"].pop("dialect")),
        ("v3_layer_checksum", lambda p: p["header"].update(dialect="keras3")),
        ("v4_sequential_checksum", lambda p: p["header"].update(format_version=schema.FORMAT_VERSION + 1)),
        ("v4_sequential_checksum", lambda p: p["header"].update(kind="callback")),
        ("v4_sequential_checksum", lambda p: p["header"].update(n_variables=limits.MAX_VARIABLES + 1)),
        ("v4_sequential_checksum", lambda p: p["header"].update(checksum="crc32:00000000")),
        ("v2_sequential_checksum", lambda p: p["body"].pop("dtype_policy")),
        ("v1_layer", lambda p: p["body"].update(dtype_policy="")),
        ("v3_layer_checksum", lambda p: p["body"].pop("compile_objects")),
        ("v4_sequential_checksum", lambda p: p["body"]["variables"][0].__setitem__(1, "|O")),
        ("v4_sequential_checksum", lambda p: p["body"]["variables"][0].__setitem__(2, [1] * 65)),
        ("v4_sequential_checksum", lambda p: p["body"]["variables"][0].__setitem__(3, "data")),
        ("v4_sequential_checksum", lambda p: p["body"].update(layer_states=[[0, [], []]])),
        ("v2_sequential_checksum", lambda p: p["body"].update(layer_states=[["dense", [], []]])),
        ("v4_sequential_checksum", lambda p: p["body"]["custom_objects"].update(x="zoo.Scale")),
    ],
)
def test_the_schema_refuses_what_the_reader_refuses(name, edit):
    payload = stored(name)
    assert_valid(payload)
    assert list(VALIDATOR.iter_errors(edited(payload, edit)))


# --------------------------------------------------------------------------
# (b) docs/format.md and the schema against the code
# --------------------------------------------------------------------------


def sections(text: str, level: int) -> dict[str, str]:
    """Heading -> text under it, for the headings of ``level`` (``##``: 2)."""
    marker = "#" * level + " "
    parts = re.split(rf"^{re.escape(marker)}(.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def table(text: str) -> list[list[str]]:
    """The rows of the first Markdown table in ``text``, as cells (header and rule rows dropped)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    start = text.splitlines().index(lines[0]) if lines else 0
    block = []
    for line in text.splitlines()[start:]:
        if not line.startswith("|"):
            break
        block.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    assert len(block) > 2, "no table"
    return block[2:]


def names(rows: list[list[str]]) -> list[str]:
    """The first column's names, without their backticks."""
    out = []
    for row in rows:
        match = re.fullmatch(r"`([^`]+)`", row[0])
        assert match, f"not a `name`: {row[0]!r}"
        out.append(match.group(1))
    return out


def version_sections() -> dict[int, str]:
    found = {}
    for heading, text in sections(DOC, 2).items():
        match = re.fullmatch(r"Format version (\d+)( \(current\))?", heading)
        if match:
            found[int(match.group(1))] = text
            assert bool(match.group(2)) == (int(match.group(1)) == schema.FORMAT_VERSION), heading
    return found


def field_tables() -> dict[int, tuple[list[list[str]], list[list[str]]]]:
    out = {}
    for version, text in version_sections().items():
        parts = sections(text, 3)
        out[version] = (table(parts["Header"]), table(parts["Body of a layer payload"]))
    return out


def test_the_doc_states_the_current_format_version_and_has_a_section_for_every_version():
    assert f"The current format version is **{schema.FORMAT_VERSION}**" in DOC
    assert sorted(version_sections()) == list(VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_doc_lists_exactly_the_header_and_body_fields_of_each_version(version):
    header_rows, body_rows = field_tables()[version]
    expected_header = schema.HEADER_FIELDS if version >= 4 else schema.HEADER_FIELDS_V3
    assert sorted(names(header_rows)) == sorted(expected_header)
    assert sorted(names(body_rows)) == sorted(
        schema.body_fields({"kind": schema.KIND_LAYER, "format_version": version})
    )
    assert all(len(row) == 5 for row in header_rows + body_rows)


def test_the_doc_says_since_which_version_each_field_is_there():
    tables = field_tables()
    for part in (0, 1):
        first: dict[str, int] = {}
        for version in VERSIONS:
            for name in names(tables[version][part]):
                first.setdefault(name, version)
        for version in VERSIONS:
            rows = tables[version][part]
            for name, row in zip(names(rows), rows):
                assert int(row[4]) == first[name], (version, name, row[4])


def test_the_config_only_body_table_is_the_code_s_for_every_version():
    rows = table(sections(DOC, 3)["Body of a config-only payload (every version)"])
    for version in VERSIONS:
        for kind in schema.KINDS:
            if kind != schema.KIND_LAYER:
                assert set(names(rows)) == schema.body_fields({"kind": kind, "format_version": version})


def test_the_doc_lists_the_kinds():
    assert names(table(sections(DOC, 3)["Kinds"])) == list(schema.KINDS)


def test_the_doc_lists_every_reconstructor_and_each_is_published_at_its_path():
    documented = names(table(sections(DOC, 2)["Reconstructors"]))
    assert sorted(documented) == sorted(".".join(path) for path in schema.RECONSTRUCTORS)
    for dotted in documented:
        module, _, name = dotted.rpartition(".")
        function = getattr(importlib.import_module(module), name)
        assert (function.__module__, function.__name__) == (module, name), dotted


def test_the_doc_lists_every_limit_with_its_value():
    rows = table(sections(DOC, 2)["Limits"])
    documented = {}
    for name, row in zip(names(rows), rows):
        documented[name] = int(re.match(r"[\d,]+", row[1]).group(0).replace(",", ""))
    code = {name: getattr(limits, name) for name in dir(limits) if name.startswith("MAX_")}
    assert documented == code


def test_the_doc_lists_the_extension_dtypes_with_their_sizes():
    arrays = sections(DOC, 2)["Arrays"]
    rows = table(arrays[arrays.index("| extension dtype") :])
    assert {name: int(row[1]) for name, row in zip(names(rows), rows)} == EXTENSION_ITEMSIZES


def test_the_doc_states_what_each_checksum_covers():
    text = sections(DOC, 2)["Checksum"]
    assert sorted(names(table(text))) == sorted(checksum.CHECKSUM_ALGORITHMS)
    fed = text[text.index("first feeds") : text.index("custom_object_names")]
    assert re.findall(r"`(\w+)`", fed) == [*checksum.CHECKSUMMED_HEADER_FIELDS, "dialect"]


def test_the_schema_holds_the_code_s_constants():
    defs = SCHEMA["$defs"]
    header = defs["header"]["properties"]
    assert header["format"] == {"const": schema.FORMAT_NAME}
    assert header["format_version"]["enum"] == list(VERSIONS)
    assert header["kind"]["enum"] == list(schema.KINDS)
    assert header["dialect"]["enum"] == list(schema.DIALECTS)
    assert header["n_variables"]["maximum"] == limits.MAX_VARIABLES
    assert header["weight_bytes"]["maximum"] == limits.MAX_WEIGHT_BYTES
    assert defs["shape"]["maxItems"] == limits.MAX_ARRAY_RANK
    assert defs["entries"]["maxItems"] == limits.MAX_VARIABLES
    assert defs["config"]["maxLength"] == limits.MAX_CONFIG_BYTES
    assert defs["dtype"]["anyOf"][0]["enum"] == list(EXTENSION_ITEMSIZES)
    for algorithm in checksum.CHECKSUM_ALGORITHMS:
        assert re.fullmatch(header["checksum"]["anyOf"][1]["pattern"], f"{algorithm}:{'0' * 16}")


def exact_fields(rule: dict) -> set[str]:
    assert set(rule["required"]) == set(rule["propertyNames"]["enum"])
    return set(rule["required"])


def test_the_schema_requires_exactly_the_code_s_fields_for_every_version_and_kind():
    header_rules = {}
    for rule in SCHEMA["$defs"]["header"]["allOf"]:
        condition = rule["if"]["properties"]["format_version"]
        for version in condition.get("enum", [condition.get("const")]):
            header_rules[version] = exact_fields(rule["then"])
    assert header_rules == {v: set(schema.HEADER_FIELDS if v >= 4 else schema.HEADER_FIELDS_V3) for v in VERSIONS}
    for version in VERSIONS:
        for kind in schema.KINDS:
            header = {"format_version": version, "kind": kind}
            applied = [
                rule["then"]["properties"]["body"]
                for rule in SCHEMA["allOf"]
                if jsonschema.Draft202012Validator(rule["if"]).is_valid({"header": header})
            ]
            assert len(applied) == 1, (version, kind)
            assert exact_fields(applied[0]) == schema.body_fields(header), (version, kind)
