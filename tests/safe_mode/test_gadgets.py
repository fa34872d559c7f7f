"""Safe loading: keras_pickle.loads refuses code-execution gadgets before they run."""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state, cpu_time_limit

import keras_pickle
from keras_pickle import _format

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


class Gadget:
    """Pickles as a call of ``function(*args)``."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def gadgets(marker):
    command = f"touch {marker}"
    return {
        "os.system": Gadget(os.system, command),
        "builtins.eval": Gadget(eval, f"open({str(marker)!r}, 'w').close()"),
        "builtins.exec": Gadget(exec, f"open({str(marker)!r}, 'w').close()"),
        "subprocess.call": Gadget(subprocess.call, ["touch", str(marker)]),
        "subprocess.Popen": Gadget(subprocess.Popen, ["touch", str(marker)]),
        "importlib.import_module": Gadget(importlib.import_module, "antigravity"),
        # getattr(importlib.import_module("os"), "system")(command), written by hand
        "builtins.getattr": (
            b"cbuiltins\ngetattr\n(cimportlib\nimport_module\n(Vos\ntRVsystem\ntR(V" + command.encode() + b"\ntR."
        ),
        "builtins.open": Gadget(open, str(marker), "w"),
        "numpy.load": Gadget(np.load, str(marker)),
    }


@pytest.mark.parametrize("name", sorted(gadgets("x")))
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_gadgets_are_refused_before_they_run(tmp_path, name, protocol):
    marker = tmp_path / "marker"
    gadget = gadgets(marker)[name]
    data = gadget if isinstance(gadget, bytes) else pickle.dumps(gadget, protocol=protocol)
    sys.modules.pop("antigravity", None)
    with pytest.raises(keras_pickle.UnsafePayloadError) as info:
        keras_pickle.loads(data)
    assert not marker.exists(), "the gadget ran"
    assert "antigravity" not in sys.modules, "the gadget imported a module"
    assert "Safe mode refused" in str(info.value)
    assert isinstance(info.value, pickle.UnpicklingError)


def test_gadget_next_to_a_valid_model_is_refused(tmp_path):
    marker = tmp_path / "marker"
    data = pickle.dumps({"model": zoo.sequential(), "extra": gadgets(marker)["os.system"]}, protocol=5)
    with pytest.raises(keras_pickle.UnsafePayloadError, match="os.system|posix.system"):
        keras_pickle.loads(data)
    assert not marker.exists()


def test_gadget_inside_the_payload_body_is_refused(tmp_path):
    marker = tmp_path / "marker"
    _function, (header, body) = zoo.sequential().__reduce_ex__(5)
    body["custom_objects"]["Scale"] = gadgets(marker)["os.system"]

    class Forged:
        def __reduce__(self):
            return _format.restore, (header, body)

    data = pickle.dumps(Forged(), protocol=5)
    with pytest.raises(keras_pickle.UnsafePayloadError):
        keras_pickle.loads(data)
    assert not marker.exists()


def test_keras_classes_resolve_but_cannot_be_called():
    data = pickle.dumps(Gadget(keras.layers.Dense, 3), protocol=5)
    with pytest.raises(keras_pickle.UnsafePayloadError, match="refused to call keras.src.layers.core.dense.Dense"):
        keras_pickle.loads(data)
    assert isinstance(pickle.loads(data), keras.layers.Dense)


def test_modules_are_never_imported(tmp_path, monkeypatch):
    """The module is importable and leaves a marker when imported: safe mode must not import it."""
    module, marker = "keras_pickle_test_never_imported", tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef Foo(): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = b"\x80\x04" + text(module) + text("Foo") + b"\x93)R."
    with pytest.raises(keras_pickle.UnsafePayloadError, match="is not imported"):
        keras_pickle.loads(data)
    assert module not in sys.modules and not marker.exists()
    with pytest.raises(keras_pickle.NotAPayloadError):  # plain pickle imports it: the probe works
        keras_pickle.loads(data, safe_mode=False)
    assert marker.exists()
    sys.modules.pop(module)


def test_keras_native_pickles_are_refused_with_a_hint():
    model = zoo.sequential()
    keras_pickle.uninstall()
    try:
        data = pickle.dumps(model)
    finally:
        keras_pickle.install()
    with pytest.raises(keras_pickle.UnsafePayloadError, match="Keras's own pickle format"):
        keras_pickle.loads(data)


def lambda_model():
    inputs = keras.Input((zoo.FEATURES,))
    outputs = keras.layers.Lambda(lambda t: t * 2.0, name="doubler")(keras.layers.Dense(2)(inputs))
    return keras.Model(inputs, outputs)


def test_lambda_layers_are_refused_in_safe_mode_only():
    model = lambda_model()
    data = keras_pickle.dumps(model)
    with pytest.raises(keras_pickle.LambdaLayerError) as info:
        keras_pickle.loads(data)
    assert "'doubler'" in str(info.value) and "safe_mode=False" in str(info.value)

    x = zoo.data()[0]
    for restored in (keras_pickle.loads(data, safe_mode=False), pickle.loads(data)):
        assert_same_state(model, restored)
        assert np.array_equal(model.predict(x, verbose=0), restored.predict(x, verbose=0))


def test_safe_mode_loads_custom_objects_of_imported_modules():
    model = zoo.trained(zoo.functional)
    restored = keras_pickle.loads(keras_pickle.dumps(model))
    assert_same_state(model, restored)


def test_safe_mode_imports_nothing_even_for_allowed_globals():
    array = np.arange(6.0).reshape(2, 3)
    data = keras_pickle.dumps({"model": zoo.sequential(), "array": array}, protocol=2)
    before = set(sys.modules)
    loaded = keras_pickle.loads(data)
    assert set(sys.modules) == before
    assert np.array_equal(loaded["array"], array)


# --------------------------------------------------------------------------
# BUILD: a stream may not change an object after it was made
# --------------------------------------------------------------------------


def text(value: str) -> bytes:
    """SHORT_BINUNICODE ``value``."""
    raw = value.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def build(target: bytes, attributes: dict[str, str], *, slots: bool) -> bytes:
    """``target`` opcodes, then BUILD with ``attributes`` as dict state or as slot state ``(None, {...})``."""
    state = b"}" + b"".join(text(k) + text(v) + b"s" for k, v in attributes.items())
    if slots:
        state = b"N" + state + b"\x86"
    return target + state + b"b"


RESTORE = text("keras_pickle._format") + text("restore") + b"\x93"


@pytest.mark.parametrize("checksum", [False, True])
def test_build_after_a_valid_model_is_refused(checksum):
    model = zoo.trained(zoo.sequential)
    data = keras_pickle.dumps(model, protocol=5, checksum=checksum)
    assert data.endswith(b".")
    hijacked = build(data[:-1], {"name": "hijacked"}, slots=False) + b"."
    assert pickle.loads(hijacked).name == "hijacked", "the forged stream must work on plain pickle"
    with pytest.raises(keras_pickle.UnsafePayloadError, match=r"BUILD"):
        keras_pickle.loads(hijacked)


@pytest.mark.parametrize("slots", [False, True], ids=["dict state", "slot state"])
def test_build_on_keras_pickles_own_reconstructor_is_refused(slots):
    data = b"\x80\x04" + build(RESTORE, {"__qualname__": "hijacked"}, slots=slots) + b"."
    try:
        with pytest.raises(keras_pickle.UnsafePayloadError, match="BUILD"):
            keras_pickle.loads(data)
        assert _format.restore.__qualname__ == "restore" and "__qualname__" not in vars(_format.restore)
    finally:
        _format.restore.__qualname__ = "restore"
        vars(_format.restore).pop("__qualname__", None)


def test_build_on_an_inert_reference_is_refused():
    dense = text("keras.src.layers.core.dense") + text("Dense") + b"\x93"
    data = b"\x80\x04" + build(dense, {"qualified_name": "numpy.ndarray"}, slots=True) + b"."
    with pytest.raises(keras_pickle.UnsafePayloadError, match="BUILD"):
        keras_pickle.loads(data)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_numpy_arrays_and_dtypes_still_load(protocol):
    """numpy's own pickles complete arrays and dtypes with BUILD (protocols < 5 and non-contiguous arrays)."""
    arrays = {
        "f8": np.arange(6.0).reshape(2, 3),
        "fortran": np.asfortranarray(np.arange(6, dtype="int16").reshape(2, 3)),
        "strided": np.arange(10.0)[::2],
        "record": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
        "scalar": np.float32(1.5),
        "dtype": np.dtype(">u2"),
    }
    loaded = keras_pickle.loads(keras_pickle.dumps({"model": zoo.sequential(), **arrays}, protocol=protocol))
    for name, value in arrays.items():
        assert type(loaded[name]) is type(value) and np.array_equal(loaded[name], value), name
        if isinstance(value, np.ndarray):
            assert loaded[name].dtype == value.dtype
    assert loaded["fortran"].flags.f_contiguous and not loaded["fortran"].flags.c_contiguous


# --------------------------------------------------------------------------
# Allowed globals cannot allocate, import or reach further
# --------------------------------------------------------------------------


NDARRAY = text("numpy") + text("ndarray") + b"\x93"
RECONSTRUCT = text("numpy.core.multiarray") + text("_reconstruct") + b"\x93"
DENSE = text("keras.src.layers.core.dense") + text("Dense") + b"\x93"


def int_tuple(*values: int) -> bytes:
    return b"(" + b"".join(b"\x8a\x08" + v.to_bytes(8, "little", signed=True) for v in values) + b"t"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(NDARRAY + b"(" + int_tuple(50_000_000) + text("O") + b"tR", id="ndarray object array"),
        pytest.param(NDARRAY + b"(" + int_tuple(1 << 40) + text("f8") + b"tR", id="ndarray 8 TiB"),
        pytest.param(RECONSTRUCT + b"(" + NDARRAY + int_tuple(50_000_000) + text("O") + b"tR", id="object array"),
        pytest.param(RECONSTRUCT + b"(" + NDARRAY + int_tuple(1 << 20, 1 << 20) + text("f8") + b"tR", id="8 TiB"),
        pytest.param(RECONSTRUCT + b"(" + NDARRAY + int_tuple(-5) + text("b") + b"tR", id="negative"),
        pytest.param(RECONSTRUCT + b"(" + DENSE + int_tuple(0) + text("b") + b"tR", id="other subtype"),
    ],
)
def test_numpy_constructors_cannot_allocate_what_the_stream_asks(call):
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(keras_pickle.UnsafePayloadError):
            keras_pickle.loads(b"\x80\x04" + call + b".")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20


@pytest.mark.parametrize("codec", ["bz2_codec", "zlib_codec", "hex_codec", "uu_codec", "rot13", "utf-16"])
def test_codecs_other_than_latin1_are_refused_without_importing_them(codec):
    module = f"encodings.{codec}"
    sys.modules.pop(module, None)
    data = b"\x80\x02" + b"c_codecs\nencode\n" + b"(" + text("abc") + text(codec) + b"tR."
    with pytest.raises(keras_pickle.UnsafePayloadError, match="_codecs.encode"):
        keras_pickle.loads(data)
    assert module not in sys.modules


def test_lazy_module_attributes_never_run(monkeypatch):
    """A module's __getattr__ (lazy submodules, deprecation shims) is code the payload would choose to run."""
    import types

    calls = []
    module = types.ModuleType("keras_pickle_test_lazy")
    module.__getattr__ = lambda name: calls.append(name) or (lambda: None)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    data = b"\x80\x04" + text(module.__name__) + text("submodule.function") + b"\x93)R."
    with pytest.raises(keras_pickle.UnsafePayloadError, match="no such attribute"):
        keras_pickle.loads(data)
    assert calls == []


def nested_shared_tuple(depth: int) -> bytes:
    """Opcodes for t_depth, where t_0 = () and t_k = (t_{k-1}, t_{k-1}) through one memo entry: 2**depth to hash."""
    stream = b")" + b"\x94"  # EMPTY_TUPLE, MEMOIZE (memo 0)
    for level in range(depth):
        stream += b"h" + bytes([level]) + b"h" + bytes([level]) + b"\x86\x94"  # (memo[k], memo[k]) -> memo k+1
    return stream


@pytest.mark.parametrize(
    "container",
    [
        pytest.param(lambda key: b"}" + key + b"Ns", id="SETITEM"),
        pytest.param(lambda key: b"}(" + key + b"Nu", id="SETITEMS"),
        pytest.param(lambda key: b"\x8f(" + key + b"\x90", id="ADDITEMS"),
        pytest.param(lambda key: b"(" + key + b"\x91", id="FROZENSET"),
    ],
)
def test_keys_that_would_take_exponential_time_to_hash_are_refused(container):
    data = b"\x80\x04" + container(nested_shared_tuple(40)) + b"."
    with cpu_time_limit(10), pytest.raises(keras_pickle.UnsafePayloadError, match="dict key or set item"):
        keras_pickle.loads(data)
    flat = b"\x80\x04" + container(text("name")) + b"."
    with pytest.raises(keras_pickle.NotAPayloadError):  # a plain container: well formed, just no payload
        keras_pickle.loads(flat)


def _dtype_state_payload(fields_dtype: bytes, flags: int, then: bytes = b"") -> bytes:
    """numpy.dtype("V8") completed by a BUILD whose state lays a field of ``fields_dtype`` at offset 0,
    with ``flags`` (numpy's __setstate__ checks neither), followed by ``then`` (which uses the dtype)."""
    p = pickle

    def text(x):
        b = x.encode()
        return p.BINUNICODE + len(b).to_bytes(4, "little") + b

    def number(x):
        return p.BININT + int(x).to_bytes(4, "little", signed=True)

    dtype_of = p.GLOBAL + b"numpy\ndtype\n" + text(fields_dtype.decode()) + p.TUPLE1 + p.REDUCE
    state = (p.MARK + number(3) + text("|") + p.NONE + text("a") + p.TUPLE1
             + p.EMPTY_DICT + text("a") + dtype_of + number(0) + p.TUPLE2 + p.SETITEM
             + number(8) + number(1) + number(flags) + p.TUPLE + p.BUILD)  # fmt: skip
    return p.GLOBAL + b"numpy\ndtype\n" + text("V8") + p.TUPLE1 + p.REDUCE + state + then


@pytest.mark.parametrize("flags", [0x3F, 0], ids=["object field", "object field whose flags say none"])
def test_a_dtype_state_that_lays_objects_over_bytes_is_refused(flags):
    """An object field over raw payload bytes is a pointer the payload chooses (a crash at least)."""
    data = b"\x80\x04" + _dtype_state_payload(b"O", flags) + b"."
    with pytest.raises(keras_pickle.UnsafePayloadError, match="numpy dtype"):
        keras_pickle.loads(data)
