"""keras_pickle._diagnosis.damage: a damaged payload is called damaged, and where it carries a checksum, a mismatch.

The sweeps replace one byte at a time of a small checksummed payload (a Dense model) at protocols 2,
4 and 5, wherever it lands: ``keras_pickle.loads`` reads every byte with each of ten values (its
eight single-bit flips, 0x00 and 0xFF); ``keras_pickle.load`` (a file object, a path) every byte with
two of them in turn, and ``keras-pickle inspect --verify`` every byte with one. Each result is a
family error whose message says the payload is damaged (and, where the checksum can tell, that the
content does not match it), or, where ``UNCHANGED_BY`` says why, the same model. Protocol 0 is read
by ``keras_pickle.inspect`` for every byte's low bit.
"""

from __future__ import annotations

import io
import pickle
import pickletools

import keras
import numpy as np
import pytest

import keras_pickle
from keras_pickle import _format
from keras_pickle._diagnosis import damage, mismatch, written_globals
from keras_pickle._wire import schema
from keras_pickle.cli import main as cli_main

MASKS = (0x01, 0x80)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


@pytest.fixture(scope="module")
def payloads(model):
    return {protocol: keras_pickle.dumps(model, protocol=protocol, checksum=True) for protocol in (0, 2, 5)}


def flips(data: bytes, masks=MASKS):
    """(position, mask, data with that byte XOR-ed with mask) for every byte and mask."""
    for mask in masks:
        for position in range(len(data)):
            damaged = bytearray(data)
            damaged[position] ^= mask
            yield position, mask, bytes(damaged)


def says_damaged_and_mismatched(error: BaseException) -> bool:
    """A ChecksumMismatchError that says so; or a refusal of safe mode (which stays one) that says the same."""
    text = str(error)
    return (
        isinstance(error, (keras_pickle.ChecksumMismatchError, keras_pickle.UnsafePayloadError))
        and text.startswith(mismatch.PREFIX)
        and "does not match its checksum" in text
    )


def says_damaged(error: BaseException) -> bool:
    """Damage the checksum cannot see (a field's name) is still called damage, and the checksum said to match."""
    return says_damaged_and_mismatched(error) or (
        isinstance(error, keras_pickle.KerasUnpicklingError)
        and str(error).startswith(mismatch.PREFIX)
        and "still matches" in str(error)
    )


def same_model(restored, model) -> bool:
    """The same class, config (as JSON), variable names, weights and their dtypes."""
    return (
        type(restored) is type(model)
        and restored.to_json() == model.to_json()
        and [v.name for v in restored.variables] == [v.name for v in model.variables]
        and all(
            a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in zip(restored.get_weights(), model.get_weights(), strict=True)
        )
    )


# --------------------------------------------------------------------------
# The sweep: every byte of a small checksummed payload, ten values each
# --------------------------------------------------------------------------

SWEPT_PROTOCOLS = (2, 4, 5)

# The replacements that leave the payload loading as it was, each for a reason: keyed by the opcode the
# byte belongs to (pickletools' names) and "argument" (a byte of its argument), "opcode" (the opcode's
# byte, whatever it becomes) or the opcode's byte it becomes. No other replacement may load.
UNCHANGED_BY = {
    ("PROTO", "argument"): "the protocol number, which the unpickler only checks it knows (0 to 5)",
    ("BINPUT", "argument"): "a memo index: the value is stored under another, and never read back under the old one",
    ("LONG_BINPUT", "argument"): "a memo index, as for BINPUT",
    ("FRAME", "argument"): "a frame's length, cut to end where an opcode ends: the rest is read outside a frame",
    ("BINUNICODE", "T"): "BINSTRING, which reads the same ASCII string",
    ("SHORT_BINUNICODE", "U"): "SHORT_BINSTRING, which reads the same ASCII string",
    ("BINPUT", "opcode"): "a memo store of a value never read back, made an opcode that, with the index byte "
    "then read as the next opcode, leaves the stack as it was (PROTO n; MARK or a value, then POP; SETITEMS "
    "early, then MARK)",
    ("MEMOIZE", "\x98"): "READONLY_BUFFER, which leaves bytes as they are; the memo entry it no longer makes "
    "is never read back",
}


def unchanged_by(data: bytes, position: int, value: int) -> str | None:
    """The reason (UNCHANGED_BY) why replacing ``data[position]`` by ``value`` may leave the payload as it was."""
    for opcode, _arg, start in pickletools.genops(data):
        if start == position:
            return UNCHANGED_BY.get((opcode.name, "opcode")) or UNCHANGED_BY.get((opcode.name, chr(value)))
        if start > position:
            break
        name = opcode.name
    return UNCHANGED_BY.get((name, "argument"))


def replacements(byte: int) -> list[int]:
    """What the sweep writes in place of ``byte``: each of its eight single-bit flips, 0x00 and 0xFF."""
    return sorted(({byte ^ (1 << bit) for bit in range(8)} | {0x00, 0xFF}) - {byte})


def every_replacement(data: bytes):
    """(position, value, data with that byte replaced by value) for every byte and every value."""
    for position in range(len(data)):
        for value in replacements(data[position]):
            yield position, value, data[:position] + bytes((value,)) + data[position + 1 :]


def sampled_replacements(data: bytes, *, per_byte: int = 1):
    """A deterministic sample: every byte, with ``per_byte`` of its values, the next ones in turn for the next byte."""
    for position in range(len(data)):
        values = replacements(data[position])
        for value in {values[(position * per_byte + k) % len(values)] for k in range(per_byte)}:
            yield position, value, data[:position] + bytes((value,)) + data[position + 1 :]


def outcome(read, damaged: bytes, model) -> tuple[str, BaseException | None]:
    """("unchanged", None) where it loads the same model, else (the error's kind, the error).

    The error must be of the family and say that the payload is damaged, and that its content does
    not match its checksum, but where the checksum cannot tell: a field's name, which it does not
    cover ("still matches"), or a format version newer than this keras_pickle reads. Anything else fails.
    """
    try:
        restored = read(damaged)
    except keras_pickle.KerasPickleError as e:
        text = str(e)
        assert "damaged" in text.lower(), (type(e).__name__, text[:500])
        assert (
            "does not match its checksum" in text
            or "still matches" in text
            or isinstance(e, keras_pickle.FormatVersionError)
        ), (type(e).__name__, text[:500])
        return type(e).__name__, e
    assert same_model(restored, model), type(restored)
    return "unchanged", None


@pytest.fixture(scope="module")
def swept(model):
    return {protocol: keras_pickle.dumps(model, protocol=protocol, checksum=True) for protocol in SWEPT_PROTOCOLS}


@pytest.mark.parametrize("protocol", SWEPT_PROTOCOLS)
def test_loads_reports_every_changed_byte_as_damage_or_loads_the_same_model(model, swept, protocol):
    """Every byte, ten values each: damage (a family error that says so) or, where UNCHANGED_BY says why,
    the same model."""
    data = swept[protocol]
    counts: dict[str, int] = {}
    for position, value, damaged in every_replacement(data):
        try:
            kind, error = outcome(keras_pickle.loads, damaged, model)
        except AssertionError as e:
            raise AssertionError(f"byte {position} set to {value:#04x}: {e}") from None
        if kind == "unchanged":
            assert unchanged_by(data, position, value), (position, value)
        if isinstance(error, keras_pickle.UnsafePayloadError):  # a refusal stays one, the refusal its cause
            assert isinstance(error.original_error, keras_pickle.UnsafePayloadError), (position, value)
        counts[kind] = counts.get(kind, 0) + 1
    assert sum(counts.values()) == sum(len(replacements(b)) for b in data)
    assert counts["ChecksumMismatchError"] > 0.9 * sum(counts.values()), counts
    assert counts.get("unchanged", 0) < 0.05 * sum(counts.values()), counts


@pytest.mark.parametrize("protocol", SWEPT_PROTOCOLS)
def test_load_reports_damage_from_a_file_as_loads_does(model, swept, protocol, tmp_path):
    """Every byte, with two of its ten values in turn; from a file object, and from a path for a fifth."""
    data, path = swept[protocol], tmp_path / "model.pkl"

    def from_a_path(damaged: bytes):
        path.write_bytes(damaged)
        return keras_pickle.load(path)

    for position, value, damaged in sampled_replacements(data, per_byte=2):
        read = from_a_path if position % 5 == 0 else lambda b: keras_pickle.load(io.BytesIO(b))
        try:
            outcome(read, damaged, model)
        except AssertionError as e:
            raise AssertionError(f"byte {position} set to {value:#04x}: {e}") from None


@pytest.mark.parametrize("protocol", SWEPT_PROTOCOLS)
def test_the_cli_exits_3_on_every_damaged_byte(model, swept, protocol, tmp_path, capsys):
    """Every byte, with one of its ten values in turn: ``inspect --verify`` exits 3 and says the payload
    is damaged, or exits 0 where the same model loads."""
    data, path = swept[protocol], tmp_path / "model.pkl"
    codes = {}
    for position, value, damaged in sampled_replacements(data):
        path.write_bytes(damaged)
        code = codes[(position, value)] = cli_main(["inspect", str(path), "--verify", "--json"])
        said = capsys.readouterr()
        assert code in (0, 3), (position, value, code, said.err[-500:])
        if code == 3:
            assert "damaged" in (said.err + said.out).lower(), (position, value)
        else:
            assert outcome(keras_pickle.loads, damaged, model)[0] == "unchanged", (position, value)
    assert sum(code == 3 for code in codes.values()) > 0.9 * len(codes)


def test_inspect_verify_reports_every_changed_byte_of_protocol_0_as_damage_or_describes_the_same_payload(payloads):
    """Protocol 0, which the sweeps above leave out: every byte, its low bit."""
    data = payloads[0]
    original = keras_pickle.inspect(data, verify=True)
    assert original.checksum_status == "verified"
    unchanged = 0
    for position, mask, damaged in flips(data, (0x01,)):
        try:
            info = keras_pickle.inspect(damaged, verify=True)
        except keras_pickle.KerasPickleError as e:
            assert says_damaged_and_mismatched(e), (position, mask, e)
            continue
        if info.checksum_status == "verified":
            # Only what the payload does not hold may change: a memo index, the protocol number.
            unchanged += 1
            assert info.warnings == original.warnings, (position, mask)
            assert (info.n_variables, info.weight_bytes, info.model_class) == (
                original.n_variables,
                original.weight_bytes,
                original.model_class,
            )
            continue
        assert info.checksum_status.startswith(("MISMATCH", "DAMAGED")), (position, mask, info.checksum_status)
    assert unchanged < len(data) // 10


def test_a_config_string_that_no_longer_decodes_is_damage_for_inspect(payloads, tmp_path, capsys):
    """The issue's case: one byte of a config string flipped; inspect --verify exited 1 with a decoding error."""
    data = payloads[5]
    at = data.index(b'"class_name"') + 3
    damaged = bytearray(data)
    damaged[at] ^= 0x80
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="Damaged keras_pickle payload: .*codec can't decode"):
        keras_pickle.inspect(bytes(damaged), verify=True)
    path = tmp_path / "model.pkl"
    path.write_bytes(bytes(damaged))
    assert cli_main(["inspect", str(path), "--verify"]) == 3
    assert "does not match its checksum" in capsys.readouterr().err


# --------------------------------------------------------------------------
# loads and load: the cases the sweep found
# --------------------------------------------------------------------------


def test_load_reads_damage_from_a_file_as_loads_does(payloads):
    data = payloads[5]
    damaged = bytearray(data)
    damaged[data.index(b"<f4") + 2] ^= 0x01  # the kernel's dtype: "<f5"
    for read in (keras_pickle.loads, lambda b: keras_pickle.load(io.BytesIO(b))):
        with pytest.raises(keras_pickle.ChecksumMismatchError) as raised:
            read(bytes(damaged))
        assert says_damaged_and_mismatched(raised.value)


# --------------------------------------------------------------------------
# The schema's checks, with and without a checksum
# --------------------------------------------------------------------------


class Forged:
    def __init__(self, header, body):
        self.header, self.body = header, body

    def __reduce__(self):
        return _format.restore, (self.header, self.body)


def reduced(model, *, checksum: bool):
    with keras_pickle.checksums(checksum):
        _function, (header, body) = model.__reduce_ex__(2)
    return dict(header), dict(body)


def test_a_malformed_body_with_a_checksum_is_a_mismatch_with_the_checksum_recomputed(model):
    header, body = reduced(model, checksum=True)
    key, dtype, shape, data = body["variables"][0]
    body["variables"] = [(key, dtype, (3, 1), data), *body["variables"][1:]]
    with pytest.raises(keras_pickle.ChecksumMismatchError) as raised:
        keras_pickle.loads(pickle.dumps(Forged(header, body), protocol=2))
    error = raised.value
    # The variable is named by its path, whose layer name depends on what the process built before.
    assert says_damaged_and_mismatched(error) and key.endswith("/kernel") and f"'{key}'" in str(error)
    assert error.expected == header["checksum"] and error.computed not in (None, header["checksum"])
    assert isinstance(error.original_error, keras_pickle.StateMismatchError)


def test_without_a_checksum_a_malformed_body_keeps_its_own_error(model):
    header, body = reduced(model, checksum=False)
    key, dtype, shape, data = body["variables"][0]
    body["variables"] = [(key, dtype, (3, 1), data), *body["variables"][1:]]
    with pytest.raises(keras_pickle.StateMismatchError, match="truncated or corrupt"):
        keras_pickle.loads(pickle.dumps(Forged(header, body), protocol=2))


def test_a_damaged_header_field_name_is_a_mismatch(model):
    header, body = reduced(model, checksum=True)
    header["jind"] = header.pop("kind")
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="lacks kind") as raised:
        keras_pickle.loads(pickle.dumps(Forged(header, body), protocol=2))
    assert raised.value.computed is None and "none computable" in str(raised.value)


def test_a_damaged_checksum_key_still_counts_as_a_checksum(model):
    header, body = reduced(model, checksum=True)
    value = header.pop("checksum")
    header["chedksum"] = value
    assert mismatch.carried_checksum(header) == value
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="chedksum"):
        keras_pickle.loads(pickle.dumps(Forged(header, body), protocol=2))


def test_a_renamed_body_field_the_checksum_does_not_cover_is_damage_without_a_mismatch(model):
    header, body = reduced(model, checksum=True)
    body["optimizer_wariables"] = body.pop("optimizer_variables")  # an empty list: the checksum sees no change
    with pytest.raises(keras_pickle.KerasUnpicklingError) as raised:
        keras_pickle.loads(pickle.dumps(Forged(header, body), protocol=2))
    assert not isinstance(raised.value, keras_pickle.ChecksumMismatchError)
    assert says_damaged(raised.value) and "optimizer_wariables" in str(raised.value)
    info = keras_pickle.inspect(pickle.dumps(Forged(header, body), protocol=2), verify=True)
    assert info.checksum_status.startswith("DAMAGED (the checksum matches, but its layer body lacks")


def test_a_resource_limit_on_intact_content_stays_a_resource_limit(model, monkeypatch):
    header, body = reduced(model, checksum=True)
    monkeypatch.setattr(keras_pickle.limits, "MAX_CONFIG_BYTES", 10)
    with pytest.raises(keras_pickle.ResourceLimitError):
        schema.check_body(header, body, is_custom_object=callable)


def test_a_newer_format_version_with_a_checksum_names_damage_as_the_other_possibility(model):
    header, body = reduced(model, checksum=True)
    header["format_version"] = schema.FORMAT_VERSION + 1
    with pytest.raises(keras_pickle.FormatVersionError, match="Upgrade.*the payload is damaged instead"):
        schema.check_header(header)
    del header["checksum"]
    header["checksum"] = None
    with pytest.raises(keras_pickle.FormatVersionError) as raised:
        schema.check_header(header)
    assert "damaged" not in str(raised.value)


# --------------------------------------------------------------------------
# The evidence
# --------------------------------------------------------------------------


def test_stream_damage_needs_a_payload_in_the_head():
    error = pickle.UnpicklingError("bad opcode")
    assert damage.stream_damage(b"\x80\x05not a payload", "the data", error) is None
    found = damage.stream_damage(b'...keras_pickle..."checksum"...nothing like one', "the data", error)
    assert type(found) is keras_pickle.NotAPayloadError and "carries no checksum" in str(found)
    assert str(found).startswith(mismatch.PREFIX)


def test_a_refusal_of_safe_mode_in_a_damaged_stream_stays_a_refusal(payloads):
    refused = keras_pickle.UnsafePayloadError("module not imported", what="keras_pickle._format.restord")
    found = damage.stream_damage(payloads[5], "the data", refused)
    assert type(found) is keras_pickle.UnsafePayloadError and found.what == "keras_pickle._format.restord"
    assert says_damaged_and_mismatched(found) and "where keras_pickle writes keras_pickle._format.restore" in str(found)
    assert found.original_error is refused


def test_stream_damage_leaves_a_missing_module_to_its_own_error(payloads):
    assert damage.stream_damage(payloads[5], "the data", ModuleNotFoundError("no module named x")) is None
    refused = keras_pickle.UnsafePayloadError("module not imported", what="my_layers.Scale")
    assert damage.stream_damage(payloads[5], "the data", refused) is None


@pytest.mark.parametrize(
    "dotted, expected",
    [
        ("keras_pickle._format.restore", None),
        ("keras_pickle._format.restord", "keras_pickle._format.restore"),
        ("jeras_pickle._format.restore", "keras_pickle._format.restore"),
        ("keras_pickle._format\x0brestore", "keras_pickle._format.restore"),
        ("keras_pickle._format.restore\x0bp0", "keras_pickle._format.restore"),
        ("_codecs.dncode", "_codecs.encode"),
        ("my_layers.Scale", None),
        ("keras_pickle._format.restored_model", None),
    ],
)
def test_near_written_global(dotted, expected):
    assert written_globals.near_written_global(dotted) == expected


def test_the_checksum_is_found_in_a_stream_whatever_byte_of_it_changed(payloads):
    data = payloads[5]
    start = data.index(b"checksum")
    end = data.index(b"xxh3_64+header:") + len("xxh3_64+header:") + 16
    for position, _mask, damaged in flips(data[: end + 8], (0x01,)):
        if start <= position < end:
            found = damage.stream_damage(damaged, "the data", ValueError("x"))
            assert isinstance(found, keras_pickle.ChecksumMismatchError), position


@pytest.mark.parametrize(
    "dotted, garbled",
    [
        ("keras_pickle._format.restoreJq\x00}q\x01(X\x06", True),  # a GLOBAL's damaged line end read on
        ("\x02ckeras_pickle._format.restore", True),
        ("dense/bias.<f4", True),  # STACK_GLOBAL handed two of the payload's strings
        ("tensorflow.class", True),
        ("keras_pickle._format.resto", True),  # cut short by a line end
        ("_c.decs", True),  # _codecs, split by a line end
        ("restore.restore", True),
        ("odecs.encode", True),
        ("format.keras_pickle", True),
        ("kind.layer", True),
        ("keras.src.models.sequential.Sequential.kind", True),
        # what a loading process lacks, or a newer keras_pickle writes, or an attacker names: not damage
        ("my_layers.Scale", False),
        ("mylib.restore", False),
        ("keras_pickle._format.restore_v2", False),
        ("os.system", False),
        ("keras.src.backend.common.variables.KerasVariable", False),
        ("keras_pickle._format.restore", False),
    ],
)
def test_garbled_global(dotted, garbled):
    assert written_globals.garbled_global(dotted) is garbled


def test_the_fields_garbled_global_knows_are_the_schemas():
    header = {"kind": "layer", "format_version": schema.FORMAT_VERSION}
    assert schema.HEADER_FIELDS | schema.body_fields(header) <= written_globals._PAYLOAD_FIELDS


class Calls:
    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


@pytest.mark.parametrize("function", [__import__("os").system, _format.restore])
def test_a_crafted_payload_safe_mode_refuses_is_refused_and_not_called_damaged(model, function):
    """A checksummed payload whose body names a global safe mode refuses, spelt as a pickler spells it:
    refused, as it was, and not called damage (the refusal is the news)."""
    header, body = reduced(model, checksum=True)
    body["config"] = Calls(function, "echo owned") if function is not _format.restore else body["config"]
    stream = pickle.dumps(Forged(header, body), protocol=4)
    if function is _format.restore:  # a reconstructor a newer keras_pickle might write, which this one lacks
        stream = stream.replace(b"\x07restore\x94", b"\x0arestore_v2\x94", 1)
    with pytest.raises(keras_pickle.UnsafePayloadError) as raised:
        keras_pickle.loads(stream)
    assert not str(raised.value).startswith(mismatch.PREFIX), str(raised.value)


@pytest.mark.parametrize("safe_mode", [True, False])
def test_a_payload_wrapped_by_a_damaged_byte_before_stop_is_damage(payloads, safe_mode):
    """The last memo store made TUPLE1 (protocol 4 and 5): the stream still reads, its payload whole
    and its checksum verified, but STOP returns (model,): both unpicklers, and inspect, call it damage."""
    data = payloads[5]
    assert data[-2:] == b"\x94."
    damaged = data[:-2] + pickle.TUPLE1 + b"."
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="is not a well-formed pickle"):
        keras_pickle.loads(damaged, safe_mode=safe_mode)
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="is not a well-formed pickle"):
        keras_pickle.inspect(damaged, verify=True)


def test_a_pickler_in_fast_mode_which_memoizes_nothing_still_loads(model):
    file = io.BytesIO()
    pickler = pickle.Pickler(file, 4)
    pickler.fast = True
    keras_pickle.install()
    pickler.dump([model, 3])
    for safe_mode in (True, False):
        restored, three = keras_pickle.loads(file.getvalue(), safe_mode=safe_mode)
        assert same_model(restored, model) and three == 3
    info = keras_pickle.inspect(file.getvalue(), verify=True)
    assert info.checksum_status in ("verified", "absent")


@pytest.mark.parametrize("protocol", (2, 5))
def test_without_safe_mode_every_changed_byte_is_damage_or_the_same_model(model, swept, protocol):
    """pickle's own unpickler (``safe_mode=False``) imports what a global names: a damaged byte in a written
    global's module reads as a module the process lacks, and is still called damage. Every byte, two values."""
    data = swept[protocol]
    counts: dict[str, int] = {}
    for position, value, damaged in sampled_replacements(data, per_byte=2):
        try:
            kind, _ = outcome(lambda b: keras_pickle.loads(b, safe_mode=False), damaged, model)
        except AssertionError as e:
            raise AssertionError(f"byte {position} set to {value:#04x}: {e}") from None
        counts[kind] = counts.get(kind, 0) + 1
    assert counts["ChecksumMismatchError"] > 0.9 * sum(counts.values()), counts


@pytest.mark.parametrize(
    "written, damaged_to",
    [(b"keras_pickle._format", b"Keras_pickle._format"), (b"_format", b"_formbt"), (b"restore", b"restorf")],
)
def test_without_safe_mode_a_damaged_written_global_is_damage_not_a_missing_module(payloads, written, damaged_to):
    data = payloads[5]
    damaged = data.replace(written, damaged_to, 1)
    assert len(damaged) == len(data) and damaged != data
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="where keras_pickle writes keras_pickle._format"):
        keras_pickle.loads(damaged, safe_mode=False)


def test_a_missing_module_outside_safe_mode_stays_its_own_error(payloads):
    found = damage.stream_damage(
        payloads[5], "the data", ModuleNotFoundError("No module named 'my_layers'"), requested="my_layers.Scale"
    )
    assert found is None


@pytest.mark.parametrize("protocol", (2, 4, 5))
@pytest.mark.parametrize("safe_mode", [True, False])
def test_a_payload_run_through_pickletools_optimize_still_loads(model, protocol, safe_mode):
    """``pickletools.optimize`` drops every memo store never read back, the root's among them: not damage."""
    keras_pickle.install()
    optimized = pickletools.optimize(keras_pickle.dumps(model, protocol=protocol, checksum=True))
    assert same_model(keras_pickle.loads(optimized, safe_mode=safe_mode), model)
    restored, three = keras_pickle.loads(pickletools.optimize(pickle.dumps([model, 3], protocol)), safe_mode=safe_mode)
    assert same_model(restored, model) and three == 3
    info = keras_pickle.inspect(optimized, verify=True)
    assert info.checksum_status == "verified"
