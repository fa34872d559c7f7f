"""Safe mode against a determined attacker: payloads crafted from real ones (tests/redteam.py).

Each test edits the header, body, config or custom-object table of a real model's payload as an
attacker would, signs it again, and asserts the refusal's class and that nothing ran: no marker
file, no new module in ``sys.modules``, no audited process, file or import event, no Keras global
changed, also after the first use of a model that did load.
"""

from __future__ import annotations

import importlib
import pickle
import threading
import time

import keras
import numpy as np
import pytest
import redteam
import zoo
from keras.src.saving import serialization_lib
from redteam import Call, Effects, GlobalRef, keras_globals

import keras_pickle
import keras_pickle._allow  # noqa: F401  (imported on first load: imported here, so that imports show effects)
import keras_pickle._api  # noqa: F401

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


def assert_refused(data: bytes, marker, error: type = keras_pickle.UnsafePayloadError) -> Exception:
    """``keras_pickle.loads(data)`` raises ``error``, and had no effect."""
    with Effects(marker) as effects, pytest.raises(error) as info:
        keras_pickle.loads(data)
    effects.assert_none()
    return info.value


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "pwned"


def command(marker) -> list[str]:
    return ["sh", "-c", f"touch {marker}"]


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="first"), keras.layers.Dense(1)])


@pytest.fixture(scope="module")
def parts():
    return redteam.payload_parts(model())


def with_layer(parts, layer_config: dict, custom_objects: dict) -> bytes:
    """The model's payload with its last layer replaced and ``custom_objects`` as its table."""
    header, body = parts

    def edit(config):
        redteam.layer_configs(config)[-1] = layer_config

    body = redteam.edit_config(body, edit)
    return redteam.craft(header, {**body, "custom_objects": custom_objects})


# --------------------------------------------------------------------------
# 1. Globals resolve only as their module defines them
# --------------------------------------------------------------------------

# (module the payload names, a dotted path through it to a dangerous callable)
TRAVERSALS = [
    ("keras_pickle._safe_mode.resolution", "inspect.os.spawnv"),
    ("keras_pickle._reader.unpickler", "pickle._loads"),
    ("keras_pickle._safe_mode.decision", "sys.modules"),
    ("keras_pickle._api", "pickle.loads"),
    ("keras_pickle._capture.custom_objects", "sys.modules"),
    ("keras.src.saving.serialization_lib", "importlib.import_module"),
    ("keras.src.saving.serialization_lib", "global_state.set_global_attribute"),
    ("keras.src.utils.io_utils", "sys.stdout.write"),
    ("numpy", "os.system"),
    ("zoo", "np.load"),
]


@pytest.mark.parametrize(("module", "path"), TRAVERSALS)
def test_a_global_never_resolves_through_another_module(marker, parts, module, path):
    importlib.import_module(module)  # imported, as in a process that loaded a payload before
    gadget = redteam.dumps_crafted(Call(GlobalRef(module, path), f"touch {marker}"))
    assert_refused(gadget, marker)
    # The same name as a custom object of a real payload, under a Lambda that would call it.
    layer = {"module": "keras.layers", "class_name": "Dense", "config": {"units": 1, "name": "x"}}
    assert_refused(with_layer(parts, layer, {"spawnv": GlobalRef(module, path)}), marker)


def test_the_reported_exploit_runs_nothing(marker, parts):
    layer = {
        "module": "evil",
        "class_name": "Foo",
        "registered_name": "Foo",
        "config": redteam.lambda_layer_config("x", "spawnv", {"file": "/bin/sh", "args": command(marker)}),
    }
    table = {
        "Foo": GlobalRef("keras.src.layers.core.lambda_layer", "Lambda"),
        "spawnv": GlobalRef("keras_pickle._safe_mode.resolution", "inspect.os.spawnv"),
    }
    assert_refused(with_layer(parts, layer, table), marker)
    # What keras-pickle inspect says of it: the same verdict.
    report = keras_pickle.inspect(with_layer(parts, layer, table))
    assert report.safe_mode_refuses
    assert any("inspect.os.spawnv" in warning for warning in report.warnings)


def test_an_alias_kept_by_one_module_of_anothers_function_is_refused(marker):
    # keras.src.saving.serialization_lib imports importlib; the function lives in importlib.
    name = GlobalRef("keras.src.saving.serialization_lib", "importlib")
    assert_refused(redteam.dumps_crafted(name), marker)


# --------------------------------------------------------------------------
# 2. Which layers a payload builds is decided on the classes Keras instantiates
# --------------------------------------------------------------------------


class Sneaky(keras.layers.Lambda):
    """A user's subclass of Lambda: it still runs the payload's code."""


REFUSED_LAYERS = ["Lambda", "TFSMLayer", "TorchModuleWrapper", "JaxLayer", "FlaxLayer", "Sneaky"]


def _layer_class(name: str) -> type:
    return Sneaky if name == "Sneaky" else getattr(keras.layers, name)


@pytest.mark.parametrize("name", REFUSED_LAYERS)
def test_a_custom_object_never_stands_for_a_refused_layer(marker, parts, name):
    cls = _layer_class(name)
    layer = {
        "module": "evil",
        "class_name": "Foo",
        "registered_name": "Foo",
        "config": redteam.lambda_layer_config("x", "print_msg"),
    }
    table = {
        "Foo": GlobalRef(cls.__module__, cls.__qualname__),
        "print_msg": GlobalRef("keras.src.utils.io_utils", "print_msg"),
    }
    assert_refused(with_layer(parts, layer, table), marker)


@pytest.mark.parametrize("spelling", [("keras", "layers.Lambda"), ("keras.layers", "Lambda")])
def test_keras_spellings_of_lambda_are_refused_without_custom_objects(marker, parts, spelling):
    module, class_name = spelling
    layer = {"module": module, "class_name": class_name, "config": redteam.lambda_layer_config("x", "relu")}
    if keras.src.api_export.get_symbol_from_name(f"{module}.{class_name}") is None:
        pytest.skip(f"{module}.{class_name} is not a Keras name in this version")
    assert_refused(with_layer(parts, layer, {}), marker, keras_pickle.LambdaLayerError)


@pytest.mark.parametrize("cls", [keras.layers.Dense, keras.Sequential, keras.callbacks.ModelCheckpoint])
def test_a_custom_object_never_stands_for_a_keras_builtin_class(marker, parts, cls):
    layer = {"module": "evil", "class_name": "Foo", "registered_name": "Foo", "config": {"units": 1, "name": "x"}}
    error = assert_refused(with_layer(parts, layer, {"Foo": GlobalRef(cls.__module__, cls.__qualname__)}), marker)
    if issubclass(cls, keras.callbacks.Callback):  # refused as soon as the stream names it: callbacks act on files
        assert "callback" in str(error) and "allow_callbacks=True" in str(error)
    else:
        assert "Keras built-in class" in str(error)


def test_a_recorded_constructor_call_never_names_a_keras_builtin_class(marker, parts):
    header, body = parts
    body = {**body, "constructed": [(GlobalRef("keras.src.layers.core.dense", "Dense"), (1,), {})]}
    assert_refused(redteam.craft(header, body), marker)


# --------------------------------------------------------------------------
# 3. No value resolves to a function that changes process state
# --------------------------------------------------------------------------

STATE_CHANGERS = [
    ("keras.src.saving.serialization_lib", "enable_unsafe_deserialization"),
    ("keras.src.backend.config", "set_floatx"),
    ("keras.src.backend.config", "set_epsilon"),
    ("keras.src.dtype_policies.dtype_policy", "set_dtype_policy"),
    ("keras.src.utils.rng_utils", "set_random_seed"),
    ("keras.src.utils.io_utils", "print_msg"),
    ("keras.src.saving.saving_api", "load_model"),
    ("numpy", "save"),
    ("numpy", "load"),
]


def _field_edits(function_key: str) -> dict:
    """Where a config names a function: each edit makes that field name ``function_key``."""
    ref = {"module": "builtins", "class_name": "function", "config": function_key, "registered_name": "function"}
    as_class = {"module": "evil", "class_name": function_key, "config": {}, "registered_name": function_key}

    def first_dense(config):
        return redteam.layer_configs(config)[1]["config"]

    return {
        "activation": lambda c: first_dense(c).update(activation=function_key),
        "activation_ref": lambda c: first_dense(c).update(activation=ref),
        "kernel_initializer": lambda c: first_dense(c).update(kernel_initializer=ref),
        "kernel_regularizer": lambda c: first_dense(c).update(kernel_regularizer=ref),
        "kernel_constraint": lambda c: first_dense(c).update(kernel_constraint=ref),
        "learning_rate": lambda c: c["compile_config"]["optimizer"]["config"].update(learning_rate=ref),
        "schedule_class": lambda c: c["compile_config"]["optimizer"]["config"].update(learning_rate=as_class),
        "dtype_policy_class": lambda c: first_dense(c).update(dtype=as_class),
        "loss": lambda c: c["compile_config"].update(loss=ref),
        "metrics": lambda c: c["compile_config"].update(metrics=[ref]),
    }


@pytest.fixture(scope="module")
def compiled_parts():
    compiled = model()
    compiled.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", metrics=["mae"])
    return redteam.payload_parts(compiled)


@pytest.mark.parametrize("field", sorted(_field_edits("f")))
@pytest.mark.parametrize("target", STATE_CHANGERS, ids=lambda t: t[1])
def test_no_config_field_reaches_a_state_changing_function(marker, compiled_parts, field, target):
    header, body = compiled_parts
    body = redteam.edit_config(body, _field_edits("innocent")[field])
    data = redteam.craft(header, {**body, "custom_objects": {"innocent": GlobalRef(*target)}})
    assert_refused(data, marker)


@pytest.mark.parametrize(
    "api_name",
    ["keras.config.enable_unsafe_deserialization", "keras.config.set_floatx", "keras.utils.set_random_seed"],
)
def test_keras_names_of_state_changing_functions_are_refused(marker, compiled_parts, api_name):
    module, _, name = api_name.rpartition(".")
    ref = {"module": module, "class_name": "function", "config": name, "registered_name": None}
    header, body = compiled_parts
    body = redteam.edit_config(body, lambda c: c["compile_config"]["optimizer"]["config"].update(learning_rate=ref))
    assert_refused(redteam.craft(header, body), marker)


def test_a_registered_name_is_judged_as_what_it_resolves_to(marker, parts):
    keras.saving.get_custom_objects()["redteam>set_floatx"] = keras.config.set_floatx
    try:
        layer = {"module": "keras.layers", "class_name": "Dense", "config": {"units": 1, "name": "x"}}
        registered = Call(GlobalRef("keras_pickle._format", "registered"), "redteam>set_floatx")
        header, body = parts
        body = redteam.edit_config(body, lambda c: redteam.layer_configs(c).__setitem__(-1, layer))
        data = redteam.craft(header, {**body, "custom_objects": {"f": registered}})
        assert_refused(data, marker)
    finally:
        del keras.saving.get_custom_objects()["redteam>set_floatx"]


# --------------------------------------------------------------------------
# 4. Safe mode does not defer to Keras's process-wide switch
# --------------------------------------------------------------------------


def vocabulary_file_payload(tmp_path) -> bytes:
    secret = tmp_path / "secret.txt"
    secret.write_text("alpha\nbeta\n")
    keras.utils.set_random_seed(0)
    lookup = keras.Sequential([keras.Input((1,), dtype="string"), keras.layers.StringLookup(vocabulary=["a", "b"])])
    header, body = redteam.payload_parts(lookup)

    def point_at_file(config):
        redteam.layer_configs(config)[-1]["config"]["vocabulary"] = str(secret)

    return redteam.craft(header, redteam.edit_config(body, point_at_file))


def test_safe_mode_holds_after_enable_unsafe_deserialization(tmp_path, marker):
    data = vocabulary_file_payload(tmp_path)
    clean = _verdict(data)
    keras.config.enable_unsafe_deserialization()
    try:
        assert serialization_lib.in_safe_mode() is False
        assert _verdict(data) == clean
        assert serialization_lib.in_safe_mode() is False, "the caller's setting was not restored"
    finally:
        serialization_lib.global_state.set_global_attribute("safe_mode_saving", None)
    assert clean[0] is not None, "a vocabulary file outside the payload was read"


def _verdict(data: bytes) -> tuple:
    try:
        keras_pickle.loads(data)
    except keras_pickle.KerasUnpicklingError as e:
        return type(e), "Requested the loading of a vocabulary file" in str(e)
    return None, None


def test_the_keras_scope_is_held_per_thread_and_restored(parts):
    header, body = parts
    data = redteam.craft(header, body)
    seen = []

    def load():
        serialization_lib.global_state.set_global_attribute("safe_mode_saving", False)
        keras_pickle.loads(data)
        seen.append(serialization_lib.in_safe_mode())

    thread = threading.Thread(target=load)
    thread.start()
    thread.join()
    assert seen == [False]
    assert serialization_lib.in_safe_mode() is None


# --------------------------------------------------------------------------
# 5. Amplification, depth and cycles
# --------------------------------------------------------------------------


def shared_tree(depth: int, container=list):
    node: object = []
    for _ in range(depth):
        node = container([node, node]) if container is not dict else {"a": node, "b": node}
    return node


@pytest.mark.parametrize("field", ["constructed", "compile_call", "custom_objects"])
@pytest.mark.parametrize("container", [list, dict])
def test_shared_references_cannot_amplify(marker, parts, field, container):
    header, body = parts
    tree = shared_tree(40, container)
    value = {
        "constructed": [(GlobalRef("zoo", "Scale"), (tree,), {})],
        "compile_call": ((tree,), {}),
        "custom_objects": {"x": GlobalRef("zoo", "Scale"), "y": GlobalRef("zoo", "scaled_relu")},
    }[field]
    if field == "custom_objects":
        body = {**body, "compile_call": ((), {"tree": tree})}
    data = redteam.craft(header, {**body, field: value})
    assert len(data) < 4000
    start = time.perf_counter()
    error = assert_refused(data, marker, keras_pickle.ResourceLimitError)
    assert time.perf_counter() - start < 30
    assert error.limit_name in ("MAX_VALUE_NODES", "MAX_VALUE_DEPTH")


def test_a_cycle_in_recorded_arguments_is_refused(marker, parts):
    header, body = parts
    cycle: list = []
    cycle.append(cycle)
    data = redteam.craft(header, {**body, "compile_call": ((cycle,), {})})
    error = assert_refused(data, marker, keras_pickle.ResourceLimitError)
    assert error.limit_name == "MAX_VALUE_DEPTH"


@pytest.mark.parametrize("depth", [300, 50_000])
def test_deep_json_is_refused_before_keras_sees_it(marker, parts, depth):
    header, body = parts
    deep = "[" * depth + "]" * depth
    config = body["config"][:-1] + f', "deep": {deep}}}'
    error = assert_refused(redteam.craft(header, {**body, "config": config}), marker, keras_pickle.ResourceLimitError)
    assert error.limit_name == "MAX_CONFIG_DEPTH"


def test_shared_object_id_cycles_fail_cleanly(marker, parts):
    header, body = parts

    def share(config):
        layers = redteam.layer_configs(config)
        layers[1]["shared_object_id"] = 7
        layers[2] = dict(layers[1])
        layers[1]["config"]["kernel_initializer"] = {**layers[1], "config": dict(layers[1]["config"])}

    data = redteam.craft(header, redteam.edit_config(body, share))
    with Effects(marker) as effects:
        try:
            keras_pickle.loads(data)
        except keras_pickle.KerasUnpicklingError:
            pass
    effects.assert_none()


@pytest.mark.parametrize("shape", [(-1,), (1 << 40,), (1 << 20, 1 << 20), tuple([1] * 100)])
def test_absurd_declared_shapes_are_refused(marker, parts, shape):
    header, body = parts
    path, dtype, _shape, data = body["variables"][0]
    body = {**body, "variables": [(path, dtype, shape, data), *body["variables"][1:]]}
    assert_refused(redteam.craft(header, body), marker, keras_pickle.KerasUnpicklingError)


@pytest.mark.parametrize("layer", [1, 2], ids=["first Dense", "last Dense"])
def test_a_build_config_claiming_a_huge_input_is_refused_before_keras_allocates(parts, layer):
    """A 3 kB payload whose layer says it was built for a 10^9-wide input: the rebuild with recorded specs
    fails, and the ordinary build that follows would allocate an 8 GB kernel (and its initializer's
    temporaries) before any shape check. Safe mode allocates no more than twice what the payload carries.
    (Keras has drawn its initializers' default seeds from Python's random module by then, as any load does.)"""
    header, body = parts

    def edit(config):
        redteam.layer_configs(config)[layer]["build_config"] = {"input_shape": [None, 10**9]}

    with pytest.raises(keras_pickle.StateMismatchError, match=r"allocate a variable 'kernel' of shape \(1000000000,"):
        keras_pickle.loads(redteam.craft(header, redteam.edit_config(body, edit)))


@pytest.mark.parametrize("change", ["fewer", "more", "shorter", "longer"])
def test_out_of_band_buffers_of_the_wrong_count_or_size_are_refused(marker, change):
    buffers: list = []
    data = keras_pickle.dumps(model(), protocol=5, buffer_callback=buffers.append)
    raws = [bytes(b.raw()) for b in buffers]
    assert raws
    given = {
        "fewer": raws[:-1],
        "more": [*raws, b"\0" * 8],
        "shorter": [raws[0][:-4], *raws[1:]],
        "longer": [raws[0] + b"\0" * 4, *raws[1:]],
    }[change]
    with Effects(marker) as effects, pytest.raises(keras_pickle.KerasUnpicklingError):
        loaded = keras_pickle.loads(data, buffers=given)
        if change == "more":  # pickle ignores unused buffers: the model must still be exact
            for a, b in zip(model().variables, loaded.variables):
                assert np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
            raise keras_pickle.KerasUnpicklingError("loaded exactly")
    effects.assert_none()


# --------------------------------------------------------------------------
# 6. What does load stays harmless at first use
# --------------------------------------------------------------------------


def test_a_loaded_model_changes_nothing_at_first_use(marker):
    original = zoo.trained(zoo.functional)
    original.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    data = pickle.dumps(original)
    x, y = zoo.data()
    with Effects(marker) as effects:
        restored = keras_pickle.loads(data)
        restored(x[:2])
        float(keras.ops.convert_to_numpy(restored.optimizer.learning_rate))
        restored.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert not marker.exists()
    unchanged = {k: v for k, v in keras_globals().items() if not k.endswith("_random")}  # training draws
    assert unchanged == {k: v for k, v in effects.settings.items() if not k.endswith("_random")}
    assert not [e for e in effects.events if e.startswith(("os.", "subprocess.", "socket."))]


# --------------------------------------------------------------------------
# numpy's scalar allocates what its dtype says; restore_with_state rebuilds a metric or optimizer only
# --------------------------------------------------------------------------


def _scalar(*args) -> Call:
    return Call(GlobalRef("numpy._core.multiarray", "scalar"), *args)


def _dtype(spec: str) -> Call:
    return Call(GlobalRef("numpy", "dtype"), spec, False, True)


@pytest.mark.parametrize(
    "call",
    [
        _scalar(_dtype("V2147483647")),  # no data: numpy would allocate 2 GiB of zeros
        _scalar(_dtype("V2147483647"), b"x"),  # data shorter than the dtype
        _scalar(_dtype("f4"), b"\x00" * 8),
        _scalar(_dtype("O"), b"\x00" * 8),  # an object pointer made of payload bytes
    ],
    ids=["no data", "short data", "long data", "object"],
)
def test_a_numpy_scalar_allocates_only_what_the_payload_holds(marker, call):
    data = redteam.dumps_crafted([call, call, call])
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError, match="scalar"):
        keras_pickle.loads(data)
    effects.assert_none()
    from keras_pickle._safe_mode import calls

    function, args = np.float32(1.5).__reduce__()  # how numpy pickles a scalar passes
    assert calls._checked_scalar(*args) == np.float32(1.5) and function is calls._NUMPY_SCALAR


def test_restore_with_state_rebuilds_a_metric_or_an_optimizer_only(marker):
    from keras_pickle._protocol import opt_in

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)], name="honest")
    header, body = redteam.payload_parts(model)
    header["checksum"] = None
    header["checksum"] = redteam.content_checksum(header, body, redteam.CHECKSUM_ALGORITHM)
    allowed = set(opt_in.allowed())
    for kind in ("callbacks", "metrics", "optimizers"):
        state = {"variables": list(body["variables"]), "kind": kind, "variable_attributes": {},
                 "attributes": {"name": "attacker_named"}}  # fmt: skip
        data = redteam.dumps_crafted(Call(GlobalRef("keras_pickle._allow", "restore_with_state"), header, body, state))
        with Effects(marker) as effects, pytest.raises(keras_pickle.KerasUnpicklingError, match="only a metric or an"):
            keras_pickle.loads(data)
        effects.assert_none()
        assert set(opt_in.allowed()) == allowed, "loading switched on pickling of a kind the caller did not allow"


def test_a_format_1_payload_of_kind_loss_rebuilds_only_an_object_of_its_state_s_kind(marker):
    """Format 1 wrote an allowed metric or optimizer as kind "loss" (tests/data/allowed/): that spelling is read
    in format 1 only, and the object its config rebuilds must be of the state's kind."""
    import io

    from helpers import TESTS_DIR

    from keras_pickle._protocol import opt_in

    class Arguments(pickle.Unpickler):  # the stored payload's reconstructor arguments, read as data
        def find_class(self, module, name):
            if (module, name) == ("keras_pickle._allow", "restore_with_state"):
                return lambda *args: args
            return super().find_class(module, name)

    stored = (TESTS_DIR / "data" / "allowed" / "v1_optimizer.pkl").read_bytes()
    header, body, state = Arguments(io.BytesIO(stored)).load()
    assert (header["format_version"], header["kind"], state["kind"]) == (1, "loss", "optimizers")
    allowed = set(opt_in.allowed())
    forged = [
        (header, {**state, "kind": "metrics"}),  # an optimizer's config under a metric's state
        (header, {**state, "kind": "callbacks"}),
        ({**header, "format_version": 2}, state),  # "loss" is format 1's spelling only
    ]
    for forged_header, forged_state in forged:
        data = redteam.dumps_crafted(Call(GlobalRef("keras_pickle._allow", "restore_with_state"), forged_header, body,
                                          forged_state))  # fmt: skip
        with pytest.raises(keras_pickle.KerasUnpicklingError, match="only a metric or an optimizer"):
            keras_pickle.loads(data)
        assert set(opt_in.allowed()) == allowed, "loading switched on pickling of a kind the caller did not allow"


def _uninitialized(nbytes: int) -> Call:
    """numpy's _reconstruct of a non-empty array, with no BUILD after it: memory numpy never fills."""
    return Call(GlobalRef("numpy._core.multiarray", "_reconstruct"), GlobalRef("numpy", "ndarray"), (nbytes,), b"b")


@pytest.mark.parametrize("units", [3, 1 << 27], ids=["freed memory", "2.5 GiB"])
def test_a_variable_is_never_memory_numpy_left_uninitialized(marker, units):
    """A weight's data from _reconstruct without BUILD would be whatever the process freed (secrets, heap
    addresses) or gigabytes from a 2 kB payload: only numpy's own empty start is allowed, BUILD brings the data."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    header, body = redteam.payload_parts(model)

    def widen(config):
        layer = redteam.layer_configs(config)[-1]
        layer["config"]["units"] = units
        layer["keras_pickle_outputs"] = [[[[None, units], "float32", False, False]]]

    body = redteam.edit_config(body, widen)
    body["variables"] = [
        ("dense/kernel", "<f4", (4, units), _uninitialized(16 * units)),
        ("dense/bias", "<f4", (units,), _uninitialized(4 * units)),
    ]
    header = {**header, "weight_bytes": 20 * units, "checksum": None}
    data = redteam.craft(header, body, sign=False)
    assert len(data) < 4096
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError, match=r"shape \(0,\)"):
        keras_pickle.loads(data)
    effects.assert_none()
    assert keras_pickle.inspect(data).safe_mode_refuses


def _binbytes(data: bytes) -> bytes:
    return b"B" + len(data).to_bytes(4, "little") + data


def _binunicode(text: str) -> bytes:
    return b"X" + len(text).to_bytes(4, "little") + text.encode()


@pytest.mark.parametrize("rebuilt", ["BUILD again", "_frombuffer over an array"])
def test_a_stream_cannot_free_data_a_value_still_points_at(rebuilt):
    """An array BUILT a second time frees the bytes a _frombuffer view of it reads (memory reused later):
    BUILD completes only numpy's empty start, and _frombuffer reads only bytes or an out-of-band buffer."""
    import io

    from keras_pickle._reader.unpickler import SafeUnpickler

    size = 4096
    dtype = (
        b"cnumpy\ndtype\n" + _binunicode("u1") + b"\x89\x88\x87R(K\x03" + _binunicode("|")
        + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
    )  # fmt: skip
    array = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85C\x01b\x87Rq\x00" + dtype + b"q\x010"
    built = b"h\x00(K\x01M\x00\x10\x85h\x01\x89" + _binbytes(b"\x07" * size) + b"tb0"
    view = b"cnumpy._core.numeric\n_frombuffer\n(h\x00h\x01M\x00\x10\x85" + _binunicode("C") + b"tRq\x020"
    again = b"h\x00(K\x01K\x01\x85h\x01\x89" + _binbytes(b"Z") + b"tb0"
    stream = (
        b"\x80\x04" + array + built + (view + again if rebuilt == "_frombuffer over an array" else again) + b"h\x00."
    )
    with pytest.raises(keras_pickle.UnsafePayloadError, match="frombuffer over a ndarray|BUILD of a built array"):
        SafeUnpickler(io.BytesIO(stream), policy=None).load()
