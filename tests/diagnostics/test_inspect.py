"""keras_pickle.inspect and ``keras-pickle inspect``: describe a payload without loading it."""

from __future__ import annotations

import bz2
import dataclasses
import io
import json
import lzma
import os
import pickle
import sys
import tracemalloc
import zlib

import joblib
import keras
import pytest
import zoo
from helpers import PROBE_MODULE, cpu_time_limit, run_python

import keras_pickle
from keras_pickle import _format, limits
from keras_pickle._inspect import inspect_all, verdict
from keras_pickle._wire import checksum
from keras_pickle.cli import main as cli_main


@pytest.fixture(scope="module")
def functional():
    return zoo.trained(zoo.functional)


@pytest.fixture(scope="module")
def sequential():
    return zoo.trained(zoo.sequential)


def all_variables(model):
    optimizer = getattr(model, "optimizer", None)
    return list(model.variables) + (list(optimizer.variables) if optimizer is not None else [])


def custom_object_names(model) -> set[str]:
    _function, (_header, body) = model.__reduce_ex__(5)
    return {f"{obj.__module__}.{obj.__qualname__}" for obj in body["custom_objects"].values()}


def assert_describes(info: keras_pickle.PayloadInfo, model) -> None:
    variables = all_variables(model)
    assert info.format_version == keras_pickle.FORMAT_VERSION
    assert info.keras_version == keras.__version__
    assert info.backend == keras.backend.backend()
    assert info.model_class == f"{type(model).__module__}.{type(model).__qualname__}"
    assert info.kind == "layer"
    assert info.n_params == model.count_params()
    assert info.n_variables == info.header_n_variables == len(variables)
    assert info.n_optimizer_variables == len(getattr(model, "optimizer", None).variables)
    expected_bytes = sum(keras.ops.convert_to_numpy(v).nbytes for v in variables)
    assert info.weight_bytes == info.header_weight_bytes == expected_bytes
    assert set(info.custom_objects) == custom_object_names(model)
    assert {f"{m}.{n}" for m, n in info.imports} == custom_object_names(model)
    assert info.lambda_layers == () and not info.has_lambda
    # The custom objects are judged where the payload loads (registered there, Keras subclasses there): one
    # warning names them with the refusal they meet otherwise, and nothing else is reported.
    undecided = [w for w in info.warnings if w.startswith(verdict.UNDECIDED)]
    assert info.warnings == tuple(undecided) and len(undecided) <= 1
    assert all(name in undecided[0] for name in custom_object_names(model)) if undecided else not info.imports


@pytest.mark.backends
def test_describes_a_functional_model(functional):
    info = keras_pickle.inspect(keras_pickle.dumps(functional))
    assert_describes(info, functional)
    assert info.n_layers == len(functional.layers)
    # keras_pickle.dumps without a buffer_callback: a checksum by default
    assert info.checksum.startswith("xxh3_64+header:") and info.checksum_status == "present (not verified)"
    assert info.protocol == 5 and info.out_of_band_buffers == 0 and info.payloads_in_stream == 1
    text = str(info)
    for expected in (
        f"format version {keras_pickle.FORMAT_VERSION}",
        f"Keras {keras.__version__}",
        f"layers          {len(functional.layers)}",
        f"parameters      {functional.count_params():,}",
        "zoo.RegisteredScale",
        "Lambda layers   none",
        "checksum        present (not verified)",
    ):
        assert expected in text, expected


def test_layer_counts_follow_model_layers(sequential):
    # A Sequential config records its InputLayer; Sequential.layers does not.
    info = keras_pickle.inspect(pickle.dumps(sequential))
    assert_describes(info, sequential)
    assert info.n_layers == len(sequential.layers) == 5
    assert info.modules == ("zoo",)

    subclassed = zoo.trained(zoo.subclassed)
    info = keras_pickle.inspect(pickle.dumps(subclassed))
    assert_describes(info, subclassed)
    assert info.n_layers is None and "not listed in the config" in str(info)

    layer = zoo.Scale(3.0)
    layer.build((None, 4))
    info = keras_pickle.inspect(pickle.dumps(layer))
    assert (info.kind, info.n_layers, info.n_params, info.n_variables) == ("layer", None, 4, 1)
    assert info.model_class == "zoo.Scale" and info.custom_objects == ("zoo.Scale",)


def test_describes_a_loss():
    info = keras_pickle.inspect(pickle.dumps(zoo.CustomMSE()))
    assert info.kind == "loss" and info.n_variables == 0 and info.weight_bytes == 0
    assert info.custom_objects == ("zoo.CustomMSE",)


def sources(model, tmp_path):
    """The same model as every kind of input inspect() accepts."""
    data = keras_pickle.dumps(model)
    yield "bytes", data
    yield "bytearray", bytearray(data)
    yield "memoryview", memoryview(data)
    yield "file object", io.BytesIO(data)
    path = tmp_path / "dump.pkl"
    with open(path, "wb") as f:
        keras_pickle.dump(model, f)
    yield "keras_pickle.dump path (str)", str(path)
    pickled = tmp_path / "pickle.pkl"
    with open(pickled, "wb") as f:
        pickle.dump(model, f)
    yield "pickle.dump path", pickled
    for protocol in (0, 2, 4):
        yield f"protocol {protocol}", pickle.dumps(model, protocol=protocol)
    for compress in (0, 3, ("gzip", 3), ("bz2", 3), ("xz", 3), ("lzma", 3)):
        target = tmp_path / f"joblib-{compress}.pkl"
        joblib.dump(model, target, compress=compress)
        yield f"joblib.dump compress={compress}", target


def test_reads_every_kind_of_input(functional, tmp_path):
    reference = keras_pickle.inspect(keras_pickle.dumps(functional))
    seen = []
    for name, source in sources(functional, tmp_path):
        info = keras_pickle.inspect(source)
        same = dataclasses.replace(info, protocol=reference.protocol)
        assert same == reference, name
        seen.append(name)
    assert len(seen) == 15
    # joblib writes protocol 4 streams; protocol 0 streams have no PROTO opcode
    assert keras_pickle.inspect(tmp_path / "joblib-0.pkl").protocol == 4
    assert keras_pickle.inspect(pickle.dumps(functional, protocol=0)).protocol == 0


@pytest.mark.backends
def test_out_of_band_payloads_report_sizes_from_the_entries(functional):
    buffers = []
    data = keras_pickle.dumps(functional, checksum=True, buffer_callback=buffers.append)
    info = keras_pickle.inspect(data)
    assert_describes(info, functional)
    assert info.out_of_band_buffers == len(buffers) == info.n_variables
    in_band = keras_pickle.dumps(functional, checksum=True)
    assert len(in_band) - len(data) >= info.weight_bytes  # the weights are not in the stream
    assert info.checksum_status == "present (not verified)"
    status = keras_pickle.inspect(data, verify=True).checksum_status
    assert status == "present (not verified: the out-of-band buffers were not given)"
    assert keras_pickle.inspect(data, verify=True, buffers=buffers).checksum_status == "verified"
    damaged = [bytearray(b.raw()) for b in buffers]
    damaged[-1][0] ^= 0x40
    info = keras_pickle.inspect(data, verify=True, buffers=damaged)
    assert info.checksum_status.startswith("MISMATCH")
    assert any("does not match its checksum" in w for w in info.warnings)


@pytest.mark.backends
def test_checksum_status_in_band(sequential):
    data = keras_pickle.dumps(sequential, checksum=True)
    info = keras_pickle.inspect(data)
    algorithm = checksum.CHECKSUM_ALGORITHM
    assert info.checksum.startswith(f"{algorithm}:") and info.checksum_status == "present (not verified)"
    assert keras_pickle.inspect(data, verify=True).checksum_status == "verified"
    absent = keras_pickle.dumps(sequential, protocol=2, checksum=False)
    assert keras_pickle.inspect(absent, verify=True).checksum_status == "absent"
    kernel = keras.ops.convert_to_numpy(sequential.layers[0].kernel).tobytes()
    at = data.index(kernel)
    damaged = bytearray(data)
    damaged[at + 5] ^= 0x01
    info = keras_pickle.inspect(bytes(damaged), verify=True)
    assert info.checksum_status.startswith(f"MISMATCH (computed {algorithm}:")
    with pytest.raises(keras_pickle.ChecksumMismatchError):
        keras_pickle.loads(bytes(damaged))


def test_lambda_layers_are_reported():
    inputs = keras.Input((zoo.FEATURES,))
    outputs = keras.layers.Lambda(lambda t: t * 2.0, name="doubler")(keras.layers.Dense(2)(inputs))
    info = keras_pickle.inspect(pickle.dumps(keras.Model(inputs, outputs)))
    assert info.lambda_layers == ("doubler",) and info.has_lambda
    assert "Lambda layers   doubler" in str(info)


def test_several_payloads_in_one_pickle(sequential):
    layer = keras.layers.Dense(3)
    layer.build((None, 2))
    data = pickle.dumps({"model": sequential, "layer": layer})
    infos = inspect_all(data)
    assert [i.model_class for i in infos] == [
        "keras.src.models.sequential.Sequential",
        "keras.src.layers.core.dense.Dense",
    ]
    assert keras_pickle.inspect(data).payloads_in_stream == 2


def test_header_claims_that_disagree_with_the_body_are_flagged(sequential):
    _function, (header, body) = sequential.__reduce_ex__(5)
    forged = pickle.dumps(Forged({**header, "n_variables": 7, "weight_bytes": 10**12}, body), protocol=5)
    info = keras_pickle.inspect(forged)
    assert info.header_n_variables == 7 and info.n_variables == len(all_variables(sequential))
    assert any("claims 7 variables" in w for w in info.warnings)
    assert any("claims 1000000000000 weight bytes" in w for w in info.warnings)


@pytest.mark.parametrize(
    "data, found",
    [
        (pickle.dumps([1, 2, 3]), "never calls keras_pickle._format.restore"),
        (b"PK\x03\x04rest-of-a-zip", "a zip archive"),
        (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
        (b"not a pickle at all", "not a pickle"),
        (b"", "not a pickle"),
    ],
)
def test_not_a_payload(data, found):
    with pytest.raises(keras_pickle.NotAPayloadError, match=found):
        keras_pickle.inspect(data)


def test_a_truncated_payload_is_not_a_payload(sequential):
    data = keras_pickle.dumps(sequential, protocol=2, checksum=False)
    with pytest.raises(keras_pickle.NotAPayloadError, match="not a well-formed pickle"):
        keras_pickle.inspect(data[: len(data) // 2])
    # With a checksum (protocol 2 writes one by default), the same truncation is damage.
    data = pickle.dumps(sequential, protocol=2)
    with pytest.raises(keras_pickle.ChecksumMismatchError, match="Damaged keras_pickle payload.*not a well-formed"):
        keras_pickle.inspect(data[: len(data) // 2])


# --------------------------------------------------------------------------
# Nothing is imported, nothing runs
# --------------------------------------------------------------------------


def test_inspect_imports_nothing_the_payload_names(tmp_path, monkeypatch):
    module = f"kp_inspect_probe_{os.getpid()}"
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(PROBE_MODULE.format(marker=str(marker)))
    payload = tmp_path / "probe.pkl"
    run_python(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import keras, keras_pickle
        from {module} import ProbeLayer, probe_activation
        model = keras.Sequential([keras.Input((3,)), ProbeLayer(), keras.layers.Dense(2, activation=probe_activation)])
        with open({str(payload)!r}, "wb") as f:
            keras_pickle.dump(model, f, checksum=True)
        """,
        keras_imported=True,
    )
    marker.unlink()  # the subprocess imported it
    assert module not in sys.modules
    # The module is importable from here: importing it would leave the marker.
    monkeypatch.syspath_prepend(str(tmp_path))
    keras_pickle.inspect(keras_pickle.dumps(zoo.sequential()))  # warm up inspect's own code paths

    before = set(sys.modules)
    info = keras_pickle.inspect(payload, verify=True)
    assert set(sys.modules) == before
    assert not marker.exists()
    assert set(info.imports) == {(module, "ProbeLayer"), (module, "probe_activation")}
    assert set(info.custom_objects) == {f"{module}.ProbeLayer", f"{module}.probe_activation"}
    assert info.checksum_status == "verified" and info.n_params == 3 + 3 * 2 + 2

    # Safe mode refuses without importing either; plain pickle does import.
    with pytest.raises(keras_pickle.UnsafePayloadError, match="is not imported"):
        keras_pickle.load(open(payload, "rb"))
    assert set(sys.modules) == before and not marker.exists()
    try:
        with open(payload, "rb") as f:
            pickle.load(f)
        assert module in sys.modules and marker.exists(), "the probe does not detect imports"
    finally:
        sys.modules.pop(module, None)


# --------------------------------------------------------------------------
# Safe mode's verdict: one policy, asked by inspect and by loads
# --------------------------------------------------------------------------


def tf_keras_payloads(tmp_path) -> dict[str, tuple[bytes, bool]]:
    """tf-keras payloads naming what safe mode judges beyond a class (op layers' TensorFlow symbols, dotted names,
    a cell wrapper's module, a vocabulary file), each with whether safe mode refuses it."""
    import redteam
    import tensorflow as tf
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    inputs = tf_keras.Input((8,))
    spectrum = tf.abs(tf.signal.stft(inputs, frame_length=4, frame_step=4, fft_length=4))
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(2)(tf_keras.layers.Flatten()(spectrum)))
    model.compile(optimizer="adam", loss="mse")
    header, body = redteam.payload_parts(model)

    def edited(edit) -> bytes:
        return redteam.craft(header, redteam.edit_config(body, edit))

    def op_layer(function: str, kwargs: dict | None = None):
        def edit(config):
            layer = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "TFOpLambda")
            layer["config"]["function"] = function
            if kwargs is not None:
                layer["inbound_nodes"] = [["_CONSTANT_VALUE", -1, "float32", kwargs]]

        return edited(edit)

    def last_layer(layer: dict):
        def edit(config):
            config["config"]["layers"][-1] = {**layer, "inbound_nodes": config["config"]["layers"][-1]["inbound_nodes"]}

        return edited(edit)

    cell = {"class_name": "SimpleRNNCell", "config": {"name": "c", "units": 3}}
    wrapper = {"cell": cell, "residual_fn": None, "residual_fn_type": "function", "residual_fn_module": "os"}
    dotted = {"module": "tempfile", "class_name": "function", "config": "mkdtemp.__call__"}
    return {
        "tf.signal.stft": (keras_pickle.dumps(model), False),
        "io.write_file": (op_layer("io.write_file", {"contents": "import os"}), True),
        "raw_ops.ImmutableConst": (op_layer("raw_ops.ImmutableConst", {"shape": [2], "memory_region_name": "x"}), True),
        "dotted name": (edited(lambda c: c["compile_config"].__setitem__("steps_per_execution", dotted)), True),
        "cell wrapper": (last_layer({"class_name": "RNN", "config": {"name": "r", "cell": {
            "class_name": "ResidualWrapper", "config": wrapper}}}), True),
        "vocabulary": (last_layer({"class_name": "StringLookup", "config": {"name": "v", "vocabulary": "/x"}}), True),
    }  # fmt: skip


@pytest.mark.tf_keras
def test_inspect_and_loads_agree_on_what_a_tf_keras_payload_names(tmp_path):
    """Where keras_pickle's Keras level is loaded, inspect asks the same policy and resolver as loads: the same
    refusals, of the same things."""
    for name, (data, refused) in tf_keras_payloads(tmp_path).items():
        report = keras_pickle.inspect(data)
        try:
            keras_pickle.loads(data)
        except keras_pickle.UnsafePayloadError as error:
            assert refused, f"{name}: {error}"
            assert any(error.what in warning for warning in report.warnings), (name, error.what, report.warnings)
        else:
            assert not refused, name
        assert bool(report.safe_mode_refuses) == refused, (name, report.warnings)


KERAS_FREE_VERDICTS = """
import json, sys
import tempfile  # noqa: F401  (a module any process has imported)
if sys.argv[1] == "with TensorFlow":
    import tensorflow  # noqa: F401
import keras_pickle

verdicts = {}
for path in sys.argv[2:]:
    report = keras_pickle.inspect(path)
    judged_there = [w for w in report.warnings if "judges it where the payload loads" in w]
    verdicts[path.rsplit("/", 1)[-1]] = [bool(report.safe_mode_refuses), bool(judged_there)]
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "tf_keras" or m.startswith("keras_pickle._rebuild"))
print(json.dumps({"verdicts": verdicts, "loaded": loaded}))
"""


@pytest.mark.tf_keras
def test_a_keras_free_inspect_judges_tf_keras_names_as_loads_does_where_it_can_resolve_them(tmp_path):
    """Without keras_pickle's Keras level, inspect still asks safe mode's policy: a dotted name in an imported
    module is refused as loads refuses it; what an op layer calls is judged where TensorFlow is imported, and
    said to be judged where the payload loads where it is not (never reported as allowed)."""
    payloads = tf_keras_payloads(tmp_path)
    paths = []
    for index, (data, _) in enumerate(payloads.values()):
        paths.append(tmp_path / f"{index}.pkl")
        paths[-1].write_bytes(data)
    for tensorflow in ("without TensorFlow", "with TensorFlow"):
        found = json.loads(run_python(KERAS_FREE_VERDICTS, tensorflow, *map(str, paths)).strip().splitlines()[-1])
        assert found["loaded"] == [], found["loaded"]  # neither tf-keras nor keras_pickle's Keras level
        verdicts = {name: found["verdicts"][f"{index}.pkl"] for index, name in enumerate(payloads)}
        for name in ("dotted name", "cell wrapper", "vocabulary"):
            assert verdicts[name][0], (tensorflow, name, verdicts[name])  # beside the model's own op layers
        for name in ("tf.signal.stft", "io.write_file", "raw_ops.ImmutableConst"):
            refused = payloads[name][1]
            expected = [False, True] if tensorflow == "without TensorFlow" else [refused, False]
            assert verdicts[name] == expected, (tensorflow, name, verdicts[name])


class Gadget:
    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


class Forged:
    def __init__(self, header, body):
        self.header, self.body = header, body

    def __reduce__(self):
        return _format.restore, (self.header, self.body)


def test_gadgets_never_run(tmp_path):
    marker = tmp_path / "ran"
    command = f"touch {marker}"
    for data in (
        pickle.dumps(Gadget(os.system, command)),
        pickle.dumps(Gadget(eval, f"open({str(marker)!r}, 'w').close()"), protocol=0),
        b"cbuiltins\ngetattr\n(cimportlib\nimport_module\n(Vos\ntRVsystem\ntR(V" + command.encode() + b"\ntR.",
    ):
        with pytest.raises(keras_pickle.NotAPayloadError) as info:
            keras_pickle.inspect(data)
        message = str(info.value)
        assert "never calls keras_pickle._format.restore" in message
        assert "It calls" in message and ("system" in message or "eval" in message)
        assert not marker.exists()


def test_gadget_inside_a_payload_is_reported_not_run(tmp_path):
    marker = tmp_path / "ran"
    _function, (header, body) = zoo.sequential().__reduce_ex__(5)
    body["custom_objects"]["Scale"] = Gadget(os.system, f"touch {marker}")
    info = keras_pickle.inspect(pickle.dumps(Forged(header, body), protocol=5))
    assert not marker.exists()
    system = f"{os.system.__module__}.system"
    assert f"<by value: built by {system}>" in info.custom_objects
    assert (os.system.__module__, "system") in info.imports
    assert any(f"calls {system}" in w and "refuses" in w for w in info.warnings)
    assert any(f"names {system}" in w for w in info.warnings)


# --------------------------------------------------------------------------
# Hostile input: bounded memory, bounded time
# --------------------------------------------------------------------------

MiB = 1 << 20
BOMB_BYTES = 256 * MiB
PLACEHOLDER = b"kp-inspect-weight-placeholder-32"


def large_weight_payload(nbytes: int, *, checksum: str | None = None) -> tuple[bytes, bytes]:
    """A forged payload with one variable of ``nbytes`` zero bytes, as the pickle before and after them.

    Protocol 3 has no frames: the data is one BINBYTES opcode, announced in ``before``.
    """
    _function, (header, body) = zoo.sequential().__reduce_ex__(5)
    header = {**header, "n_variables": 1, "weight_bytes": nbytes, "checksum": checksum}
    variables = [("w", "<f4", (nbytes // 4,), PLACEHOLDER)]
    body = {**body, "variables": variables, "optimizer_variables": [], "layer_states": []}
    data = pickle.dumps(Forged(header, body), protocol=3)
    placeholder = b"C" + bytes([len(PLACEHOLDER)]) + PLACEHOLDER
    assert data.count(placeholder) == 1
    before, after = data.split(placeholder)
    return before + b"B" + nbytes.to_bytes(4, "little"), after


def compressed(compressor, before: bytes, nbytes: int, after: bytes = b"", fill: bytes = b"\0") -> bytes:
    """``before``, ``nbytes`` (whole MiB) of ``fill`` repeated, ``after``: through ``compressor``, a MiB at a time."""
    chunk = fill * (MiB // len(fill))
    parts = [compressor.compress(before)]
    parts += [compressor.compress(chunk) for _ in range(nbytes // MiB)]
    return b"".join([*parts, compressor.compress(after), compressor.flush()])


def traced_peak(function, *args, **kwargs):
    """``function(*args, **kwargs)``, or the KerasPickleError it raised, and the peak bytes allocated meanwhile.

    tracemalloc sees the decompressors' own buffers too (they allocate through PyMem_RawMalloc).
    """
    tracemalloc.start()
    try:
        try:
            result = function(*args, **kwargs)
        except keras_pickle.KerasPickleError as e:
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


COMPRESSORS = {
    "bz2": lambda: bz2.BZ2Compressor(9),
    "gzip": lambda: zlib.compressobj(9, wbits=31),
    "zlib": lambda: zlib.compressobj(9),
    "xz": lambda: lzma.LZMACompressor(),
    "lzma": lambda: lzma.LZMACompressor(format=lzma.FORMAT_ALONE),
}


@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_compressed_weights_are_read_as_a_stream_not_held(kind):
    # A 1 kB bz2 file once made inspect hold its whole decompressed output
    # (3.9 GB). The weights' data is only measured, never held.
    nbytes = BOMB_BYTES if kind == "bz2" else 64 * MiB
    before, after = large_weight_payload(nbytes)
    bomb = compressed(COMPRESSORS[kind](), before, nbytes, after)
    assert len(bomb) < nbytes // 500
    info, peak = traced_peak(keras_pickle.inspect, bomb)
    assert isinstance(info, keras_pickle.PayloadInfo), info
    assert (info.n_variables, info.weight_bytes, info.header_weight_bytes) == (1, nbytes, nbytes)
    assert info.n_params == nbytes // 4
    assert all(w.startswith(verdict.UNDECIDED) for w in info.warnings), info.warnings  # the custom objects
    assert peak < 16 * MiB, f"{peak} bytes allocated for {nbytes} decompressed"


def test_verifying_holds_in_band_data_only_within_max_held_bytes(monkeypatch):
    before, after = large_weight_payload(64 * MiB, checksum=f"{checksum.CHECKSUM_ALGORITHM}:0123456789abcdef")
    bomb = compressed(bz2.BZ2Compressor(9), before, 64 * MiB, after)
    monkeypatch.setattr(limits, "MAX_HELD_BYTES", 4 * MiB)
    info, peak = traced_peak(keras_pickle.inspect, bomb, verify=True)
    assert info.checksum_status == (
        "present (not verified: its in-band data is larger than the inspector holds, "
        "keras_pickle.limits.MAX_HELD_BYTES)"
    )
    assert info.weight_bytes == 64 * MiB and peak < 16 * MiB, peak
    # Within the limit the data is held and checked: the forged checksum does not match.
    monkeypatch.setattr(limits, "MAX_HELD_BYTES", 1 << 30)
    info = keras_pickle.inspect(bomb, verify=True)
    assert info.checksum_status.startswith(f"MISMATCH (computed {checksum.CHECKSUM_ALGORITHM}:")


# name: (compressor, the stream before the fill, the fill, limits to set, what the error says)
BOMBS = {
    "zeros": ("bz2", b"", b"\0", {}, "starts with b'\\x00"),
    "NONE and POP opcodes": ("gzip", b"\x80\x04", b"N0", {}, "MAX_OPCODES"),
    "a string": (
        "bz2",
        b"\x80\x04\x8d" + BOMB_BYTES.to_bytes(8, "little"),
        b"a",
        {"MAX_HELD_BYTES": 4 * MiB},
        "MAX_HELD_BYTES",
    ),
    "a text line": ("bz2", b"V", b"a", {"MAX_HELD_BYTES": 4 * MiB}, "MAX_HELD_BYTES"),
    "skipped bytes": (
        "bz2",
        b"\x80\x04\x8e" + BOMB_BYTES.to_bytes(8, "little"),
        b"\0",
        {"MAX_DECOMPRESSED_BYTES": 64 * MiB},
        "MAX_DECOMPRESSED_BYTES",
    ),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_compressed_bombs_end_with_a_keras_pickle_error(monkeypatch, name):
    kind, before, fill, lowered, expected = BOMBS[name]
    bomb = compressed(COMPRESSORS[kind](), before, BOMB_BYTES, fill=fill)
    assert len(bomb) < BOMB_BYTES // 500
    for limit, value in lowered.items():
        monkeypatch.setattr(limits, limit, value)
    error, peak = traced_peak(keras_pickle.inspect, bomb)
    assert isinstance(error, keras_pickle.KerasPickleError), error
    assert expected in str(error)
    if expected.startswith("MAX_"):
        assert isinstance(error, keras_pickle.ResourceLimitError) and error.limit_name == expected
        assert error.limit == getattr(limits, expected) < error.value
        assert f"keras_pickle.limits.{expected}" in str(error)
    assert peak < 16 * MiB, f"{peak} bytes allocated for {BOMB_BYTES} decompressed"


def shared_nesting(depth: int, container=list):
    """A value holding one value twice, ``depth`` levels deep: 2**depth leaves, pickled in a few bytes per level."""
    value = container()
    for _ in range(depth):
        value = container((value, value))
    return value


@pytest.mark.parametrize(
    "where, expected",
    [
        ("n_variables", "the header claims [[["),
        ("weight_bytes", "the header claims [[["),
        ("format_version", None),
        ("key", None),
        ("dtype", "has an invalid dtype [[["),
        ("shape", "has an invalid shape [[["),
        ("huge int", "the header claims <int of 16610 bits> variables"),
    ],
)
def test_shared_nested_values_are_described_in_bounded_time(tmp_path, where, expected):
    # repr([x, x]) nested 26 deep visits 2**26 lists (the audit's took 20 s
    # and 1.5 GB, and each level doubles it), and so would str() and the
    # checksum's repr of the header and the entries: every value the payload
    # provides is shown bounded, and the checksum is not computed over such
    # values. (The limit fails the test once a regressed repr returns.)
    nested = shared_nesting(26)
    _function, (header, body) = zoo.sequential().__reduce_ex__(5)
    header = {**header, "checksum": f"{checksum.CHECKSUM_ALGORITHM}:0123456789abcdef"}
    key, dtype, shape, data = body["variables"][0]
    if where in ("n_variables", "weight_bytes", "format_version"):
        header[where] = nested
    elif where == "huge int":
        header["n_variables"] = 10**5000
    else:
        entry = {"key": (nested, dtype, shape, data), "dtype": (key, nested, shape, data)}.get(where)
        body["variables"] = [entry or (key, dtype, nested, data), *body["variables"][1:]]
    data = pickle.dumps(Forged(header, body), protocol=5)
    assert len(data) < 20_000
    path = tmp_path / "nested.pkl"
    path.write_bytes(data)
    with cpu_time_limit(5):
        info = keras_pickle.inspect(data, verify=True)
        report = str(info) + json.dumps(dataclasses.asdict(info))
        # A payload checksummed whole and well-formed that no longer is: damaged (exit 3), its checksum not computed.
        assert cli_main(["inspect", str(path), "--json", "--verify"]) == 3
    assert len(report) < 10_000 and all(len(w) < 2_000 for w in info.warnings)
    if expected:
        assert any(expected in w for w in info.warnings), info.warnings
    if where in ("n_variables", "weight_bytes", "format_version"):
        assert getattr(info, where if where == "format_version" else f"header_{where}") == "<list>"
    assert info.checksum_status == "MISMATCH (none computable: the payload is malformed)"


def nested_tuple_pickle(depth: int, innermost: bytes, use: bytes) -> bytes:
    """A pickle that builds t = (t, t) ``depth`` levels deep with memo GETs, then ``use`` (t is memo ``depth``)."""
    ops = [b"\x80\x04", innermost, b"q\x00", b"0"]
    for level in range(1, depth + 1):
        ops += [b"h" + bytes([level - 1]), b"h" + bytes([level - 1]), b"\x86", b"q" + bytes([level]), b"0"]
    return b"".join([*ops, use, b"."])


def test_shared_nested_tuples_as_keys_are_not_hashed():
    # hash() of such a tuple visits 2**depth tuples (it is not cached), as
    # would any dict or set the real unpickler built with it: 2**32 take about
    # 30 s, after which the limit fails the test.
    depth = 32
    get = b"h" + bytes([depth])
    as_dict_key, as_frozenset_member, as_set_member = (
        b"}" + get + b"K\x01s",
        b"(" + get + b"\x91",
        b"\x8f(" + get + b"\x90",
    )
    with cpu_time_limit(10):
        for use in (as_dict_key, as_frozenset_member, as_set_member):
            with pytest.raises(keras_pickle.NotAPayloadError, match="never calls keras_pickle._format.restore"):
                keras_pickle.inspect(nested_tuple_pickle(depth, b")", use))
            # A list inside is unhashable, as the real unpickler would say.
            with pytest.raises(keras_pickle.NotAPayloadError, match="not a well-formed pickle"):
                keras_pickle.inspect(nested_tuple_pickle(depth, b"]", use))


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


@pytest.mark.backends
def test_cli_inspect(functional, tmp_path, capsys):
    path = tmp_path / "model.pkl"
    with open(path, "wb") as f:
        keras_pickle.dump(functional, f, checksum=True)
    assert cli_main(["inspect", str(path), "--verify"]) == 0
    out = capsys.readouterr().out
    assert f"layers          {len(functional.layers)}" in out and "verified" in out

    assert cli_main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n_params"] == functional.count_params() and report["checksum_status"] == "present (not verified)"

    damaged = bytearray(path.read_bytes())
    kernel = keras.ops.convert_to_numpy(functional.variables[0]).tobytes()
    damaged[damaged.index(kernel)] ^= 0x80
    path.write_bytes(bytes(damaged))
    assert cli_main(["inspect", str(path), "--verify"]) == 3
    assert "MISMATCH" in capsys.readouterr().out

    path.write_bytes(b"\x89HDF\r\n\x1a\n")
    assert cli_main(["inspect", str(path)]) == 1
    assert "an HDF5 file" in capsys.readouterr().err
    assert cli_main(["inspect", str(tmp_path / "missing.pkl")]) == 1
