"""Safe mode against names tf-keras acts on that are not a class to build: dotted names it resolves
by ``getattr``, the TensorFlow symbols its op layers call, the module its RNN cell wrappers merge into
their own namespace, and a lookup layer's vocabulary path. Each class of attack is generated from
what the process has imported (every module, every TensorFlow API symbol), not listed by hand."""

from __future__ import annotations

import re
import sys
import types

import click.termui  # noqa: F401  (every Dask and MLflow worker has it imported)
import joblib.memory  # noqa: F401
import numpy as np
import pytest
import redteam
import tensorflow as tf
import tf_keras
from redteam import Effects

import keras_pickle
import keras_pickle._allow  # noqa: F401  (imported on first load: imported here, so that imports show effects)
import keras_pickle._api  # noqa: F401
from keras_pickle._protocol import dialects
from keras_pickle._rebuild import vetting
from keras_pickle._safe_mode import config_judge as safe_configs
from keras_pickle._safe_mode import resolution

pytestmark = pytest.mark.tf_keras


@pytest.fixture(scope="module")
def parts():
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2), tf_keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return redteam.payload_parts(model)


def refusals(config) -> list:
    """What safe mode's one judge says of ``config`` in a tf-keras payload, as ``loads`` would ask it."""
    policy, resolver = vetting.globals_policy(), dialects.TF_KERAS.resolver({}, {})
    return list(safe_configs.config_refusals(config, policy, resolver, dialect="tf-keras"))


def assert_refused(data: bytes, marker) -> Exception:
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError) as info:
        keras_pickle.loads(data)
    effects.assert_none()
    return info.value


def imported_modules() -> list[tuple[str, types.ModuleType]]:
    """Every top-level module imported here, by the name ``sys.modules`` (and so tf-keras) finds it under."""
    return [(k, m) for k, m in sorted(sys.modules.items()) if isinstance(m, types.ModuleType) and "." not in k]


# --------------------------------------------------------------------------
# Dotted names: tf-keras resolves "a.b" in a module as getattr(vars(module)["a"], "b")
# --------------------------------------------------------------------------


def dotted_attacks() -> list[dict]:
    """For every top-level module imported here: ``f.__call__`` of a function it defines (an attribute of a
    function), ``C.__call__`` and ``C.mro`` of a class it defines (inherited, from the metaclass), each as a
    function node naming that module."""
    nodes = []
    for name, module in imported_modules():
        own = {k: v for k, v in vars(module).items() if getattr(v, "__module__", None) == module.__name__}
        function = next((k for k, v in own.items() if isinstance(v, types.FunctionType)), None)
        cls = next((k for k, v in own.items() if isinstance(v, type) and "__call__" not in vars(v)), None)
        for dotted in ([f"{function}.__call__"] if function else []) + (
            [f"{cls}.__call__", f"{cls}.mro"] if cls else []
        ):
            nodes.append({"module": name, "class_name": "function", "config": dotted, "registered_name": None})
    return nodes


def test_every_dotted_name_safe_mode_cannot_read_without_running_code_is_refused():
    attacks = dotted_attacks()
    assert len(attacks) > 100, "the process imports fewer modules than a worker does"
    passed = [node for node in attacks if not refusals({"class_name": "Dense", "config": {"activation": node}})]
    assert not passed, f"{len(passed)} dotted names were not refused, e.g. {passed[:3]}"


@pytest.mark.parametrize(
    "field, node",
    [
        ("steps_per_execution", {"module": "platform", "class_name": "function", "config": "architecture.__call__"}),
        ("steps_per_execution", {"module": "tempfile", "class_name": "function", "config": "mkdtemp.__call__"}),
        ("loss", {"module": "tf_keras.src.backend", "class_name": "function", "config": "np.matlib"}),
    ],
    ids=["subprocess", "mkdtemp", "lazy import"],
)
def test_a_dotted_name_in_the_compile_config_is_refused_before_anything_runs(tmp_path, parts, field, node):
    header, body = parts
    data = redteam.craft(header, redteam.edit_config(body, lambda c: c["compile_config"].__setitem__(field, node)))
    error = assert_refused(data, tmp_path / "m")
    assert node["config"] in str(error)


def test_a_dotted_name_that_reaches_a_registered_function_still_loads(parts):
    """The static resolution reaches what getattr reaches where it can tell: a class's own static method."""

    class Holder:
        @staticmethod
        def double(x):
            return x * 2.0

    module = types.ModuleType("kp_dotted_holder")
    module.Holder = Holder
    sys.modules[module.__name__] = module
    try:
        found = resolution.dotted_attribute(vars(module), "Holder.double")
        assert found is Holder.__dict__["double"].__func__
        assert isinstance(resolution.dotted_attribute(vars(module), "Holder.mro"), resolution.Unresolved)
        assert resolution.dotted_attribute(vars(module), "Nothing.here") is None
    finally:
        del sys.modules[module.__name__]


# --------------------------------------------------------------------------
# Op layers: TFOpLambda, SlicingOpLambda, ClassMethod, InstanceProperty, InstanceMethod
# --------------------------------------------------------------------------

SIDE_EFFECTS = re.compile(
    r"io_ops|file_io|gfile|script_ops|logging_ops|saved_model|summary|load_library|\.data\.|lookup_ops|debug|"
    r"checkpoint|resource_variable|state_ops|collective|nccl|rpc|sendrecv|tpu|distribute"
)
"""TensorFlow modules whose functions act outside the tensors they are given (files, Python callbacks,
printing, shared resources, other processes)."""


def tf_symbols() -> dict[str, object]:
    from tensorflow.python.util import tf_decorator, tf_export

    return {name: tf_decorator.unwrap(fn)[1] for name, fn in tf_export._NAME_TO_SYMBOL_MAPPING.items()}


def op_layer(function: str) -> dict:
    return {"class_name": "TFOpLambda", "config": {"name": "op", "function": function, "trainable": True}}


def test_every_tensorflow_symbol_acting_outside_its_tensors_is_refused_in_an_op_layer():
    symbols = tf_symbols()
    effects = {name for name, fn in symbols.items() if SIDE_EFFECTS.search(getattr(fn, "__module__", "") or "")}
    assert {"io.write_file", "print", "py_function", "numpy_function", "load_op_library", "io.gfile.rmtree"} <= {
        n for n in symbols if n in effects or n in ("print", "py_function", "numpy_function")
    }
    passed = [
        name for name in sorted(effects | {"print", "py_function", "numpy_function"}) if not refusals(op_layer(name))
    ]
    assert not passed, f"op layers may call {len(passed)} functions with side effects, e.g. {passed[:5]}"
    for spelling in redteam.REFUSED_LAYER_SPELLINGS.values():
        node = {**spelling("TFOpLambda"), "config": {"name": "op", "function": "io.write_file"}}
        if node.get("module") != "evil":  # a registered name only resolves through a registry
            assert refusals(node), node


def test_op_layers_as_tf_keras_writes_them_load_in_safe_mode_bit_exact():
    """x + 1, a slice, tf.reduce_mean, tf.concat and a ragged tensor's method: the op layers tf-keras writes for
    TensorFlow calls in a Functional model."""
    tf_keras.utils.set_random_seed(0)
    inputs = tf_keras.Input((4,))
    x = tf_keras.layers.Dense(6)(inputs) + 1.0
    x = tf.concat([x[:, :3], tf.reduce_mean(x, axis=1, keepdims=True)], axis=1)
    x = tf.nn.relu(tf.math.sqrt(tf.abs(x)))
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(2)(x))
    kinds = {type(layer).__name__ for layer in model.layers}
    assert {"TFOpLambda", "SlicingOpLambda"} <= kinds, kinds
    data = keras_pickle.dumps(model)
    assert not keras_pickle.inspect(data).safe_mode_refuses
    loaded = keras_pickle.loads(data)
    x = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    assert np.array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    for ours, theirs in zip(loaded.weights, model.weights, strict=True):
        assert np.array_equal(ours.numpy(), theirs.numpy())


def test_an_op_layer_writing_a_file_is_refused_and_writes_nothing(tmp_path):
    tf_keras.utils.set_random_seed(0)
    inputs = tf_keras.Input((4,))
    model = tf_keras.Model(inputs, tf.math.add(inputs, 1.0))
    header, body = redteam.payload_parts(model)
    target = tmp_path / "written.pth"

    def edit(config):
        for layer in config["config"]["layers"]:
            if layer["class_name"] == "TFOpLambda":
                layer["config"]["function"] = "io.write_file"
                layer["inbound_nodes"] = [["_CONSTANT_VALUE", -1, str(target), {"contents": "import os"}]]

    error = assert_refused(redteam.craft(header, redteam.edit_config(body, edit)), target)
    assert "io.write_file" in str(error) and "safe_mode=False" in str(error)


def test_signal_processing_and_ctc_op_layers_load_in_safe_mode_bit_exact():
    """tf.signal (framing, FFTs, STFT) and tf.nn.ctc_loss compute on the tensors they are given: their op layers
    load (they were once refused, their modules missing from the allow-list). tf.signal.rfft itself is no op
    layer tf-keras can trace (it reads its input's shape as a constant), but a config may name it."""
    tf_keras.utils.set_random_seed(0)
    inputs = tf_keras.Input((32,))
    frames = tf.signal.frame(tf.signal.fftshift(inputs), frame_length=8, frame_step=4)
    power = tf.abs(tf.signal.stft(inputs, frame_length=16, frame_step=8, fft_length=16))
    x = tf.concat([tf_keras.layers.Flatten()(frames), tf_keras.layers.Flatten()(power)], axis=1)
    spectral = tf_keras.Model(inputs, tf_keras.layers.Dense(2)(x))
    logits, labels = tf_keras.Input((6, 5)), tf_keras.Input((3,), dtype="int32")
    label_length, logit_length = tf_keras.Input((), dtype="int32"), tf_keras.Input((), dtype="int32")
    loss = tf.nn.ctc_loss(labels, logits, label_length, logit_length, logits_time_major=False, blank_index=-1)
    ctc = tf_keras.Model([logits, labels, label_length, logit_length], loss)
    rng = np.random.default_rng(0)
    cases = [
        (spectral, rng.standard_normal((3, 32)).astype("float32")),
        (ctc, [rng.standard_normal((2, 6, 5)).astype("float32"), np.array([[1, 2, 1], [3, 0, 0]], "int32"),
               np.array([3, 1], "int32"), np.array([6, 6], "int32")]),
    ]  # fmt: skip
    for model, x in cases:
        kinds = {type(layer).__name__ for layer in model.layers}
        assert "TFOpLambda" in kinds, kinds
        data = keras_pickle.dumps(model)
        assert not keras_pickle.inspect(data).safe_mode_refuses
        loaded = keras_pickle.loads(data)
        assert np.array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    for name in ("signal.rfft", "signal.irfft", "signal.stft", "signal.inverse_stft", "signal.frame", "nn.ctc_loss",
                 "nn.ctc_greedy_decoder", "nn.ctc_beam_search_decoder"):  # fmt: skip
        assert not refusals(op_layer(name)), name


FILE_OR_RESOURCE = {"memory_region_name", "filename", "filenames", "file_pattern", "path", "container", "shared_name"}
"""Arguments of a TensorFlow function that name a file or a resource shared beyond the tensors it is given."""


def test_every_tensorflow_symbol_naming_a_file_or_a_shared_resource_is_refused_in_an_op_layer():
    """Generated from every TensorFlow API symbol defined in an allowed module of tensor computations: one that
    takes a file or a shared resource by name (raw_ops.ImmutableConst memory-maps a file) is refused."""
    import inspect

    from keras_pickle._safe_mode.rules import TENSOR_OP_MODULES

    named = []
    for name, function in tf_symbols().items():
        if getattr(function, "__module__", None) not in TENSOR_OP_MODULES:
            continue
        try:
            parameters = set(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            continue
        if parameters & FILE_OR_RESOURCE:
            named.append(name)
    assert "raw_ops.ImmutableConst" in named, named
    passed = [name for name in sorted(named) if not refusals(op_layer(name))]
    assert not passed, f"op layers may call {len(passed)} functions naming a file or a resource: {passed}"


def test_an_op_layer_memory_mapping_a_file_is_refused_and_reads_nothing(tmp_path):
    """tf-keras calls an op layer's function with its input first, which a raw op (keyword arguments only) rejects,
    so ImmutableConst does not run today; safe mode refuses it before tf-keras is asked."""
    tf_keras.utils.set_random_seed(0)
    inputs = tf_keras.Input((4,))
    model = tf_keras.Model(inputs, tf.math.add(inputs, 1.0))
    header, body = redteam.payload_parts(model)
    region = tmp_path / "region.bin"
    region.write_bytes(bytes(16))

    def edit(config):
        for layer in config["config"]["layers"]:
            if layer["class_name"] == "TFOpLambda":
                layer["config"]["function"] = "raw_ops.ImmutableConst"
                kwargs = {"shape": [4], "memory_region_name": str(region)}
                layer["inbound_nodes"] = [["_CONSTANT_VALUE", -1, "float32", kwargs]]

    data = redteam.craft(header, redteam.edit_config(body, edit))
    error = assert_refused(data, tmp_path / "m")
    assert "raw_ops.ImmutableConst" in str(error) and "memory-maps" in str(error)
    assert keras_pickle.inspect(data).safe_mode_refuses


@pytest.mark.parametrize(
    "layer",
    [
        {"class_name": "ClassMethod", "config": {"name": "c", "cls_symbol": "io.gfile.GFile", "method_name": "write"}},
        {"class_name": "ClassMethod", "config": {"name": "c", "cls_symbol": "data.Dataset", "method_name": "load"}},
        {"class_name": "InstanceMethod", "config": {"name": "i", "attr_name": "__class__"}},
        {"class_name": "InstanceProperty", "config": {"name": "i", "attr_name": "_handle_data"}},
    ],
    ids=["GFile.write", "Dataset.load", "__class__", "private"],
)
def test_op_layers_calling_anything_but_a_tensor_computation_are_refused(layer):
    assert refusals(layer), layer
    ragged = {
        "class_name": "ClassMethod",
        "config": {"name": "c", "cls_symbol": "RaggedTensor", "method_name": "from_row_lengths"},
    }
    assert not refusals(ragged)


# --------------------------------------------------------------------------
# RNN cell wrappers merge the namespace of the module their config names into their own
# --------------------------------------------------------------------------


def test_a_cell_wrapper_naming_any_imported_module_is_refused():
    for name, _ in imported_modules():
        cell = {"class_name": "SimpleRNNCell", "config": {"name": "c", "units": 3}}
        wrapper = {
            "class_name": "ResidualWrapper",
            "config": {"cell": cell, "residual_fn": None, "residual_fn_type": "function", "residual_fn_module": name},
        }
        assert refusals({"class_name": "RNN", "config": {"name": "r", "cell": wrapper}}), name
    # The module's own name, spelt out: a load with safe_mode=False may have renamed it (that is what it merges).
    own = {
        "class_name": "ResidualWrapper",
        "config": {"residual_fn_type": "function", "residual_fn_module": "tf_keras.src.layers.rnn.cell_wrappers"},
    }
    assert not [e for e in refusals(own) if "module" in str(e)]


def test_a_cell_wrapper_merging_os_is_refused_and_leaves_tf_keras_as_it_was(tmp_path, parts):
    wrappers = sys.modules["tf_keras.src.layers.rnn.cell_wrappers"]
    before = dict(vars(wrappers))
    cell = {"class_name": "SimpleRNNCell", "config": {"name": "c", "units": 3}}
    wrapper = {
        "class_name": "ResidualWrapper",
        "config": {
            "cell": cell,
            "residual_fn": {"module": "builtins", "class_name": "function", "config": "linear"},
            "residual_fn_type": "function",
            "residual_fn_module": "os",
        },
    }
    header, body = parts

    def edit(config):
        config["config"]["layers"][-1] = {"class_name": "RNN", "config": {"name": "r", "cell": wrapper}}

    error = assert_refused(redteam.craft(header, redteam.edit_config(body, edit)), tmp_path / "m")
    assert "'os'" in str(error)
    assert vars(wrappers).keys() == before.keys() and wrappers.__name__ == before["__name__"]


# --------------------------------------------------------------------------
# A vocabulary path
# --------------------------------------------------------------------------


@pytest.mark.parametrize("layer", ["StringLookup", "TextVectorization"])
def test_a_lookup_layer_reading_a_vocabulary_path_is_refused(tmp_path, parts, layer):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n")
    header, body = parts

    def edit(config):
        config["config"]["layers"][-1] = {"class_name": layer, "config": {"name": "v", "vocabulary": str(secret)}}

    data = redteam.craft(header, redteam.edit_config(body, edit))
    error = assert_refused(data, tmp_path / "m")
    assert "secret.txt" in str(error)
    assert keras_pickle.inspect(data).safe_mode_refuses
