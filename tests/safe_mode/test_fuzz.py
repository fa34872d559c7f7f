"""Broken and hostile payloads: keras_pickle.loads raises a KerasPickleError, nothing else.

Every truncation and random mutations (bit flips, inserted, deleted and
overwritten bytes) of small valid payloads, random values in the header and
body, and absurd size claims. A loaded payload that was mutated must be the
original model, bit for bit, whenever it carries a checksum.

tests/safe_mode/test_fuzz_structure.py mutates configs and custom-object tables instead of bytes.

The hypothesis budget is fixed and derandomized; set
``KERAS_PICKLE_FUZZ_EXAMPLES=20000`` for a longer, random session (the counts
of inputs tried are printed at the end of the module with ``-s``).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pickle
import tracemalloc

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state, cpu_time_limit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_pickle
from keras_pickle import _format, limits
from keras_pickle._rebuild import decode as _rebuild_decode
from keras_pickle._wire import arrays, schema

BUDGET = int(os.environ.get("KERAS_PICKLE_FUZZ_EXAMPLES", "1500"))
LONG_SESSION = "KERAS_PICKLE_FUZZ_EXAMPLES" in os.environ
TIMEOUT = 120 * max(1, BUDGET // 1000)


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=not LONG_SESSION,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


TRIED: collections.Counter = collections.Counter()


@pytest.fixture(scope="module", autouse=True)
def report_inputs_tried():
    yield
    print("\nfuzz inputs tried:", dict(sorted(TRIED.items())), "total", sum(TRIED.values()))


def tiny_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), zoo.Scale(2.0), keras.layers.Dense(2)])


def unframed(data: bytes) -> bytes:
    """The same pickle without its FRAME opcode (frames are optional), so that
    truncations reach every opcode instead of failing at the frame check."""
    assert data[2] == 0x95
    return data[:2] + data[11:]


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def payloads(model):
    """name -> (data, checksummed)"""
    return {
        "protocol 5, checksum": (keras_pickle.dumps(model, checksum=True), True),
        "protocol 5 unframed, checksum": (unframed(keras_pickle.dumps(model, checksum=True)), True),
        "protocol 5 unframed": (unframed(keras_pickle.dumps(model, checksum=False)), False),
        "protocol 2, checksum": (keras_pickle.dumps(model, protocol=2, checksum=True), True),
        "protocol 2": (keras_pickle.dumps(model, protocol=2, checksum=False), False),
        "protocol 0, checksum": (keras_pickle.dumps(model, protocol=0, checksum=True), True),
    }


def outcome(data: bytes, model, checksummed: bool) -> str:
    """Load ``data``: a KerasPickleError, or (with a checksum) the original model."""
    try:
        with cpu_time_limit():
            restored = keras_pickle.loads(data)
    except keras_pickle.KerasPickleError as e:
        return type(e).__name__
    if checksummed:
        assert type(restored) is type(model)
        assert_same_state(model, restored)
    return "loaded"


def inspected(data: bytes) -> keras_pickle.KerasPickleError | None:
    """inspect() describes the data (None) or raises a KerasPickleError (returned), nothing else."""
    try:
        with cpu_time_limit():
            info = keras_pickle.inspect(data, verify=True)
    except keras_pickle.KerasPickleError as e:
        return e
    assert "keras_pickle payload" in str(info)
    json.dumps(dataclasses.asdict(info))
    return None


@pytest.mark.timeout(TIMEOUT)
def test_every_truncation_is_refused(model, payloads):
    for name in ("protocol 5, checksum", "protocol 5 unframed, checksum", "protocol 2", "protocol 0, checksum"):
        data, _checksummed = payloads[name]
        for end in range(len(data)):
            with pytest.raises(keras_pickle.KerasPickleError):
                keras_pickle.loads(data[:end])
            assert inspected(data[:end]) is not None
            TRIED["truncations"] += 1
    assert TRIED["truncations"] > 9000


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 20), st.integers(1, 16)),
)


def mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, position, value in mutations:
        at = position % (len(out) + 1)
        if kind == "flip" and at < len(out):
            out[at] ^= 1 << value
        elif kind == "set" and at < len(out):
            out[at] = value
        elif kind == "insert":
            out[at:at] = value
        elif kind == "delete":
            del out[at : at + value]
    return bytes(out)


PAYLOAD_NAMES = [
    "protocol 5, checksum",
    "protocol 5 unframed, checksum",
    "protocol 5 unframed",
    "protocol 2, checksum",
    "protocol 2",
    "protocol 0, checksum",
]


@pytest.mark.timeout(TIMEOUT)
@fuzz_settings(BUDGET)
@given(name=st.sampled_from(PAYLOAD_NAMES), mutations=st.lists(mutation, min_size=1, max_size=4))
def test_mutations_raise_keras_pickle_errors_or_load_the_original(model, payloads, name, mutations):
    data, checksummed = payloads[name]
    mutated = mutate(data, mutations)
    result = outcome(mutated, model, checksummed)
    refusal = inspected(mutated)
    if result == "loaded" and refusal is not None:
        # Whatever loads is a payload the inspector can read too, with one
        # exception: CPython's C unpickler reads a text-protocol number up to a
        # NUL byte ("p4\x00" as memo 4) where pickletools (and pickle's own
        # Python unpickler) refuse it.
        assert name.startswith("protocol 0"), refusal
        assert isinstance(refusal, keras_pickle.NotAPayloadError) and "not a well-formed pickle" in str(refusal)
        assert isinstance(refusal.original_error, ValueError)
        TRIED["mutations: loaded, inspect stricter"] += 1
    TRIED[f"mutations: {result}"] += 1


@pytest.mark.timeout(60)
def test_a_changed_weight_byte_loads_only_without_a_checksum(model, payloads):
    kernel = keras.ops.convert_to_numpy(model.layers[1].kernel).tobytes()
    changed = 0
    for data, checksummed in payloads.values():
        at = data.find(kernel)
        if at < 0:
            continue  # protocols 0-2 spell bytes as text
        damaged = bytearray(data)
        damaged[at + 2] ^= 0x10
        if checksummed:
            with pytest.raises(keras_pickle.ChecksumMismatchError):
                keras_pickle.loads(bytes(damaged))
        else:
            restored = keras_pickle.loads(bytes(damaged))
            assert not np.array_equal(
                keras.ops.convert_to_numpy(restored.layers[1].kernel),
                keras.ops.convert_to_numpy(model.layers[1].kernel),
            )
        changed += 1
    assert changed == 3  # the protocol-5 payloads


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("name", ["protocol 5 unframed, checksum", "protocol 2, checksum"])
def test_every_changed_byte_of_a_checksummed_payload_is_refused_or_changes_nothing(model, payloads, name):
    """Each byte in turn, one bit flipped: a KerasPickleError, or the same model with the same description.

    Only changes that pickle itself cannot see may load: a memo index nothing
    reads, say. Header fields (Keras version, class) and the custom objects'
    names are under the checksum as much as the weights.
    """
    data, _checksummed = payloads[name]
    original = keras_pickle.inspect(data)
    reference = keras_pickle.loads(data).get_config()
    loaded = 0
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        damaged = bytes(damaged)
        try:
            with cpu_time_limit():
                restored = keras_pickle.loads(damaged)
        except keras_pickle.KerasPickleError:
            continue
        loaded += 1
        assert type(restored) is type(model) and restored.get_config() == reference, position
        assert_same_state(model, restored)
        # The protocol number in the first bytes is the pickle's, not the payload's.
        assert dataclasses.replace(keras_pickle.inspect(damaged), protocol=original.protocol) == original, position
    TRIED["every byte flipped"] += len(data)
    assert loaded < len(data) // 20


class Forged:
    def __init__(self, header, body):
        self.header, self.body = header, body

    def __reduce__(self):
        return _format.restore, (self.header, self.body)


def reduced(model):
    _function, (header, body) = model.__reduce_ex__(5)
    body = {**body, "variables": [(k, d, s, bytes(memoryview(b))) for k, d, s, b in body["variables"]]}
    return header, body


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.tuples(children, children, children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


HEADER_KEYS = ["format", "format_version", "kind", "n_variables", "weight_bytes", "checksum"]
BODY_KEYS = ["config", "variables", "optimizer_variables", "optimizer_built", "layer_states", "custom_objects"]


@pytest.mark.timeout(TIMEOUT)
@fuzz_settings(BUDGET // 5)
@given(
    where=st.one_of(
        st.tuples(st.just("header"), st.sampled_from(HEADER_KEYS)),
        st.tuples(st.just("body"), st.sampled_from(BODY_KEYS)),
        st.tuples(st.just("entry"), st.integers(0, 3)),
    ),
    value=values,
)
def test_random_values_in_header_and_body_raise_keras_pickle_errors(model, where, value):
    header, body = reduced(model)
    part, key = where
    if part == "entry":
        entry = list(body["variables"][0])
        entry[key] = value
        body["variables"] = [tuple(entry), *body["variables"][1:]]
    else:
        (header if part == "header" else body)[key] = value
    data = pickle.dumps(Forged(header, body), protocol=5)
    try:
        keras_pickle.loads(data)
        TRIED["forged: loaded"] += 1
    except keras_pickle.KerasPickleError:
        TRIED["forged: refused"] += 1
    inspected(data)


# --------------------------------------------------------------------------
# Resource limits
# --------------------------------------------------------------------------


@pytest.fixture
def nothing_decoded(monkeypatch):
    """Fail the test if the reconstructor decodes an array or rebuilds anything."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the payload was decoded before it was refused")

    monkeypatch.setattr(arrays, "decode_array", forbidden)
    monkeypatch.setattr(_rebuild_decode, "object_from_payload", forbidden)


def loads_within(data: bytes, limit_bytes: int = 16 << 20) -> BaseException:
    """Load ``data``, expecting a refusal; check Python allocated under ``limit_bytes``."""
    tracemalloc.start()
    try:
        keras_pickle.loads(data)
    except keras_pickle.KerasPickleError as e:
        error = e
    else:
        raise AssertionError("the payload was accepted")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < limit_bytes, f"{peak} bytes allocated before the refusal"
    return error


@pytest.mark.parametrize(
    "claim, limit_name, shown",
    [
        ({"n_variables": 5_000_000}, "MAX_VARIABLES", "5,000,000 variables"),
        ({"weight_bytes": 3 << 40}, "MAX_WEIGHT_BYTES", "3.0 TiB of weights"),
    ],
)
def test_absurd_header_claims_are_refused_first(model, nothing_decoded, claim, limit_name, shown):
    header, body = reduced(model)
    error = loads_within(pickle.dumps(Forged({**header, **claim}, body), protocol=5))
    assert isinstance(error, keras_pickle.ResourceLimitError) and isinstance(error, keras_pickle.KerasUnpicklingError)
    assert error.limit_name == limit_name and error.limit == getattr(limits, limit_name)
    assert shown in str(error) and f"keras_pickle.limits.{limit_name}" in str(error)
    assert keras_pickle.ResourceLimitError is keras_pickle.errors.ResourceLimitError


def test_a_variable_whose_shape_implies_terabytes_is_refused(model, nothing_decoded):
    header, body = reduced(model)
    huge = ("sequential/scale/w", "<f4", (1 << 20, 1 << 20, 1 << 10), b"")
    body["variables"] = [huge, *body["variables"][1:]]
    error = loads_within(pickle.dumps(Forged(header, body), protocol=5))
    assert isinstance(error, keras_pickle.ResourceLimitError) and error.limit_name == "MAX_ARRAY_BYTES"
    assert "'sequential/scale/w'" in str(error) and "needs 4.0 PiB" in str(error)

    body["variables"] = [("wide", "<f4", (10**100,) * 64, b""), *body["variables"][1:]]
    error = loads_within(pickle.dumps(Forged(header, body), protocol=5))
    assert isinstance(error, keras_pickle.ResourceLimitError) and error.limit_name == "MAX_ARRAY_BYTES"
    assert "needs about 2^" in str(error) and len(str(error)) < 600

    body["variables"] = [("deep", "<f4", (1,) * 65, b"\0" * 4), *body["variables"][1:]]
    error = loads_within(pickle.dumps(Forged(header, body), protocol=5))
    assert isinstance(error, keras_pickle.ResourceLimitError) and error.limit_name == "MAX_ARRAY_RANK"


def test_header_claims_must_match_the_body(model, nothing_decoded):
    header, body = reduced(model)
    for claim in ({"n_variables": header["n_variables"] + 1}, {"weight_bytes": header["weight_bytes"] - 4}):
        error = loads_within(pickle.dumps(Forged({**header, **claim}, body), protocol=5))
        assert type(error) is keras_pickle.KerasUnpicklingError
        assert "its header claims" in str(error) and "its body holds" in str(error)


def test_too_many_layers_are_refused_before_keras_builds_them(model, nothing_decoded, monkeypatch):
    monkeypatch.setattr(limits, "MAX_LAYERS", 2)
    error = loads_within(keras_pickle.dumps(model))
    assert isinstance(error, keras_pickle.ResourceLimitError) and error.limit_name == "MAX_LAYERS"
    assert error.value == 3  # InputLayer, Scale, Dense


def million_layer_config() -> str:
    """A Sequential config listing a million minimal layers: 41 MiB of JSON, 2 million objects."""
    layer = '{"class_name": "Identity", "config": {}}'
    return '{"class_name": "Sequential", "config": {"layers": [' + ", ".join([layer] * 1_000_000) + "]}}"


@pytest.mark.parametrize(
    "limit_name, config",
    [
        pytest.param("MAX_CONFIG_OBJECTS", million_layer_config(), id="a million layers"),
        pytest.param("MAX_CONFIG_BYTES", '{"name": "' + "x" * (129 << 20) + '"}', id="a 129 MiB string"),
    ],
)
def test_huge_configs_are_refused_before_they_are_parsed(model, nothing_decoded, monkeypatch, limit_name, config):
    header, body = reduced(model)
    body["config"] = config
    data = pickle.dumps(Forged(header, body), protocol=5)

    def parse(*args, **kwargs):
        raise AssertionError("the config was parsed")

    monkeypatch.setattr(schema.json, "loads", parse)
    # Reading the stream holds the config twice (its UTF-8 bytes, then the str); parsing
    # the million layers would add about 300 MiB.
    error = loads_within(data, limit_bytes=int(2.2 * len(data)))
    assert isinstance(error, keras_pickle.ResourceLimitError) and error.limit_name == limit_name, error


def test_pickle_length_fields_beyond_the_data_are_refused_before_allocation():
    # CPython's unpickler allocates what BINBYTES8 / BYTEARRAY8 announce before reading.
    for opcode in (b"\x8e", b"\x96", b"\x8d", b"B"):
        width = 4 if opcode == b"B" else 8
        data = b"\x80\x05" + opcode + ((1 << (8 * width - 2)) - 1).to_bytes(width, "little") + b"abc."
        error = loads_within(data, limit_bytes=1 << 20)
        assert isinstance(error, keras_pickle.NotAPayloadError)
        assert "announces" in str(error) and "but only 4 follow" in str(error)


def test_memo_index_bombs_are_refused_before_allocation():
    # Found by atheris: CPython's unpickler sizes its memo by the largest index
    # stored, and zeroes it, so one LONG_BINPUT of 539780469 took 8 GiB.
    # Found by the longer session: the C unpickler reads a text PUT argument up
    # to its first NUL ("1\\0x" is 1), so the pre-scan must not stop there.
    bombs = (
        b"\x80\x02]r\xff\xff\xff\x7f.",
        b"(lp2000000000\n.",
        b"\x80\x05]r\x75\xa9\x2c\x20.",
        b"(lp1\x00x\nr\xff\xff\xff\x7f.",
        b"(lp1\x00x\np2000000000\x00\n.",
    )
    for data in bombs:
        error = loads_within(data, limit_bytes=1 << 20)
        assert isinstance(error, keras_pickle.NotAPayloadError) and "stores memo entry" in str(error)


@pytest.mark.timeout(30)
def test_negative_lengths_neither_hang_nor_allocate():
    # Found by the long fuzzing session: the length pre-scan once seeked
    # backwards on BINSTRING's signed count and looped forever.
    for count in (-1, -5, -(1 << 31)):
        data = b"\x80\x02T" + count.to_bytes(4, "little", signed=True) + b"abcdefgh."
        with cpu_time_limit(5):
            error = loads_within(data, limit_bytes=1 << 20)
        assert isinstance(error, keras_pickle.NotAPayloadError)
        with pytest.raises(keras_pickle.NotAPayloadError):
            keras_pickle.inspect(data)


def test_structural_damage_is_refused_before_decoding(model, nothing_decoded):
    header, body = reduced(model)
    cases = {
        "kind": ({**header, "kind": "weights"}, body, "unknown kind"),
        "loss with variables": (
            {**header, "kind": "loss"},
            body,
            "its loss body has unknown fields ['compile_call', 'compile_objects'",
        ),
        "layer without optimizer_built": (
            header,
            {k: v for k, v in body.items() if k != "optimizer_built"},
            "its layer body lacks optimizer_built.",
        ),
        "unknown header field": ({**header, "checksun": None}, body, "has unknown fields ['checksun']"),
        "custom object": (header, {**body, "custom_objects": {"Scale": "zoo.Scale"}}, "custom object 'Scale'"),
        "asset": (
            header,
            {**body, "layer_states": [("lookup", [], [("vocabulary.txt", 1 << 40)])]},
            "asset 'vocabulary.txt' holds a int",
        ),
        "entry": (header, {**body, "variables": [("w", "<f4", (3,))]}, "not a (path, dtype, shape, data) tuple"),
        "dtype": (
            header,
            {**body, "variables": [("w", "O", (3,), b"\0" * 24), *body["variables"][1:]]},
            "Refusing dtype",
        ),
        "config": (header, {**body, "config": "[" * 100_000}, "MAX_CONFIG_DEPTH"),
        "config text": (header, {**body, "config": "{]"}, "not valid JSON"),
    }
    for name, (forged_header, forged_body, message) in cases.items():
        error = loads_within(pickle.dumps(Forged(forged_header, forged_body), protocol=5))
        assert isinstance(error, keras_pickle.KerasUnpicklingError), name
        assert message in str(error), (name, str(error))


# --------------------------------------------------------------------------
# Hostile configs: Keras's own safe mode applies inside keras_pickle's
# --------------------------------------------------------------------------


def forged_sequential(layer_config: dict) -> bytes:
    config = {
        "module": "keras",
        "class_name": "Sequential",
        "config": {"name": "forged", "layers": [layer_config]},
        "registered_name": None,
    }
    header = {
        "format": "keras_pickle",
        "format_version": 1,
        "keras_version": keras.__version__,
        "backend": "tensorflow",
        "class": "keras.src.models.sequential.Sequential",
        "kind": "layer",
        "n_variables": 0,
        "weight_bytes": 0,
        "checksum": None,
    }
    body = {
        "config": json.dumps(config),
        "variables": [],
        "optimizer_variables": [],
        "optimizer_built": False,
        "layer_states": [],
        "custom_objects": {},
    }
    return pickle.dumps(Forged(header, body), protocol=5)


def test_configs_that_read_files_or_load_saved_models_are_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password\nhunter2\n")
    reads_a_file = forged_sequential(
        {"module": "keras.layers", "class_name": "StringLookup", "config": {"vocabulary": str(secret)}}
    )
    with pytest.raises(keras_pickle.KerasUnpicklingError, match="vocabulary file"):
        keras_pickle.loads(reads_a_file)
    # Without safe mode Keras reads it: that is what safe_mode=False trusts.
    assert "hunter2" in keras_pickle.loads(reads_a_file, safe_mode=False).layers[0].get_vocabulary()

    loads_a_saved_model = forged_sequential(
        {"module": "keras.layers", "class_name": "TFSMLayer", "config": {"filepath": str(tmp_path), "name": "t"}}
    )
    # Refused by keras_pickle before Keras's own check (which it would also fail).
    with pytest.raises(keras_pickle.UnsafePayloadError, match="Safe mode refused TFSMLayer layer 't'"):
        keras_pickle.loads(loads_a_saved_model)
