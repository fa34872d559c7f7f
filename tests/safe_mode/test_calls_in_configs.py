"""Safe mode judges what a payload makes Keras do: calls whose arguments the payload chooses, control flow,
values Keras decodes, calls Keras would run at load, and the first use of what loaded.

Each class of attack is refused by the static decision (safe mode's vocabulary and roles:
keras_pickle/_safe_mode/tables.py, roles.py), before Keras builds anything; the generated sweep
(call_sweep.py, in a fresh worker-like process) loads every op Keras builds with every kind of value in
every argument position, then calls, predicts and fits what loaded, with an audit hook watching and the
working directory and HOME in a scratch directory; ``inspect``, in a fresh Keras-free process, gives the
same verdicts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import redteam
from helpers import cpu_time_limit, run_python
from redteam import Effects

import keras_pickle

HERE = Path(__file__).resolve().parent


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "pwned"


def assert_refused(data: bytes, marker, **options) -> Exception:
    with Effects(marker) as effects, pytest.raises(keras_pickle.UnsafePayloadError) as info:
        keras_pickle.loads(data, **options)
    effects.assert_none()
    return info.value


@keras.saving.register_keras_serializable(package="calls_test")
def doubled(x):
    """A user's registered activation: allowed where Keras calls it with its own arguments."""
    return x * 2.0


def ops_model() -> keras.Model:
    """A Functional model as users write one with keras.ops on symbolic tensors."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, activation=doubled)(inputs)
    mixed = keras.ops.concatenate([hidden, keras.ops.sin(hidden) * 2.0 - 1.0, hidden[:, :1] / 3.0], axis=-1)
    mixed = keras.ops.where(mixed > 0, mixed, keras.ops.zeros_like(mixed))
    mixed = keras.ops.cast(mixed, "float32") + np.array([0.5] * 7, "float32")
    total = keras.ops.sum(mixed, axis=-1, keepdims=True) + keras.ops.max(mixed, axis=-1, keepdims=True)
    model = keras.Model(inputs, keras.ops.reshape(total, (-1, 1)))
    model.compile(optimizer="adam", loss="mse")
    return model


def switch_model() -> keras.Model:
    inputs = keras.Input((3,))
    index = keras.ops.cast(keras.ops.sum(inputs[:, :1]) > 0, "int32")
    return keras.Model(inputs, keras.ops.switch(index, [keras.activations.relu, keras.activations.tanh], inputs))


def edited(model: keras.Model, edit) -> bytes:
    header, body = redteam.payload_parts(model)
    return redteam.craft(header, redteam.edit_config(body, edit))


def node_named(config: dict, class_name: str) -> dict:
    return next(layer for layer in config["config"]["layers"] if layer["class_name"] == class_name)


KERAS_HUB_WRITER = {
    "module": "builtins",
    "class_name": "function",
    "config": "keras_hub>compute_word_piece_vocabulary",
    "registered_name": "function",
}
"""KerasHub's registered vocabulary writer, spelt as Keras writes a registered function."""


@pytest.fixture(scope="module", autouse=True)
def warm():
    """One load first, so that what loading imports on first use is not taken for an effect of a payload."""
    keras_pickle.loads(keras_pickle.dumps(keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])))


# --------------------------------------------------------------------------
# Legitimate models load, bit for bit
# --------------------------------------------------------------------------


def test_a_functional_model_using_keras_ops_loads_in_safe_mode_bit_exact():
    model = ops_model()
    data = keras_pickle.dumps(model)
    restored = keras_pickle.loads(data)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    np.testing.assert_array_equal(model.predict(x, verbose=0), restored.predict(x, verbose=0))
    for a, b in zip(model.variables, restored.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not keras_pickle.inspect(data).safe_mode_refuses


def test_control_flow_is_refused_by_default_and_the_advice_loads_it(marker):
    model = switch_model()
    error = assert_refused(keras_pickle.dumps(model), marker)
    assert "allow_control_flow=True" in str(error) and "Switch" in str(error)
    report = keras_pickle.inspect(keras_pickle.dumps(model))
    assert report.safe_mode_refuses and any("allow_control_flow=True" in w for w in report.warnings)
    restored = keras_pickle.loads(keras_pickle.dumps(model), allow_control_flow=True)
    for x in (np.array([[1.0, -2.0, 3.0]], "float32"), np.array([[-1.0, -2.0, 3.0]], "float32")):
        np.testing.assert_array_equal(model(x), restored(x))


# --------------------------------------------------------------------------
# Calls whose arguments the payload chooses
# --------------------------------------------------------------------------


def test_a_registered_function_as_a_switch_branch_is_refused_even_with_control_flow_allowed(marker, tmp_path):
    """The disclosed attack: KerasHub's registered vocabulary writer as the branch the index picks at first use."""
    pytest.importorskip("keras_hub")
    written = tmp_path / "site.pth"

    def edit(config):
        node = node_named(config, "Switch")
        call = node["inbound_nodes"][0]
        call["args"][1] = [{"module": "builtins", "class_name": "function", "config": "relu",
                            "registered_name": "function"}, KERAS_HUB_WRITER]  # fmt: skip
        call["args"].extend([str(written), "import os"])

    data = edited(switch_model(), edit)
    assert "allow_control_flow=True" in str(assert_refused(data, marker))
    assert "compute_word_piece_vocabulary" in str(assert_refused(data, marker, allow_control_flow=True))
    assert not written.exists()
    assert keras_pickle.inspect(data).safe_mode_refuses


def test_a_user_s_registered_function_loads_as_an_activation_but_not_as_a_branch_of_a_control_flow_op(marker):
    keras_pickle.loads(keras_pickle.dumps(ops_model()))  # registered, where Keras calls it: allowed
    model = switch_model()

    def edit(config):
        branch = {"module": "builtins", "class_name": "function", "config": "calls_test>doubled"}
        node_named(config, "Switch")["inbound_nodes"][0]["args"][1][1] = {**branch, "registered_name": "function"}

    data = edited(model, edit)
    error = assert_refused(data, marker, allow_control_flow=True)
    assert "chooses the arguments" in str(error) and "custom_objects" in str(error)
    restored = keras_pickle.loads(data, allow_control_flow=True, custom_objects={"calls_test>doubled": doubled})
    x = np.array([[1.0, -2.0, 3.0]], "float32")  # the index picks the second branch
    np.testing.assert_array_equal(restored(x), doubled(x))


@pytest.mark.parametrize("wrapper", ["loss", "metric"])
def test_a_wrapper_s_function_beside_keyword_arguments_the_payload_chose_is_refused(marker, wrapper):
    pytest.importorskip("keras_hub")
    model = ops_model()
    module, name = {
        "loss": ("keras.src.losses.losses", "LossFunctionWrapper"),
        "metric": ("keras.metrics", "MeanMetricWrapper"),
    }[wrapper]  # as Keras writes each
    wrapped = {
        "module": module,
        "class_name": name,
        "registered_name": None,
        "config": {
            "fn": KERAS_HUB_WRITER,
            "name": "w",
            "vocabulary_size": 10,
            "vocabulary_output_file": "/tmp/written",
        },
    }

    def edit(config):
        config["compile_config"]["loss" if wrapper == "loss" else "metrics"] = (
            wrapped if wrapper == "loss" else [wrapped]
        )

    error = assert_refused(edited(model, edit), marker)
    assert "compute_word_piece_vocabulary" in str(error)


def test_a_function_node_naming_a_class_is_refused(marker):
    def edit(config):
        dense = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "Dense")
        dense["config"]["activation"] = {"module": "keras.layers", "class_name": "function", "config": "Dense",
                                         "registered_name": "function"}  # fmt: skip

    error = assert_refused(edited(ops_model(), edit), marker)
    assert "names a function and this is a class" in str(error)


def test_a_keras_class_keras_does_not_build_from_a_config_is_refused(marker):
    def edit(config):
        dense = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "Dense")
        dense.update(module="keras.utils", class_name="Progbar")

    error = assert_refused(edited(ops_model(), edit), marker)
    assert "does not build from a config" in str(error)


def test_what_the_vocabulary_does_not_list_is_refused_and_the_advice_loads_it(marker, monkeypatch):
    from keras_pickle._safe_mode import tables

    table = tables.vocabulary("keras3")
    entries = {k: v for k, v in table.entries.items() if k != "keras.src.layers.core.dense.Dense"}
    monkeypatch.setattr(tables, "vocabulary", lambda dialect: tables.Vocabulary(
        dialect, entries, table.public, table.registered, table.reasons, table.generated_from))  # fmt: skip
    data = keras_pickle.dumps(ops_model())
    error = assert_refused(data, marker)
    assert "does not list it" in str(error)
    keras_pickle.loads(data, custom_objects={"Dense": keras.layers.Dense})


# --------------------------------------------------------------------------
# What Keras decodes or runs at load
# --------------------------------------------------------------------------

HUGE_VALUES = {
    "numpy bytes": {"class_name": "__numpy__", "config": {"value": ["a"], "dtype": "S1500000000"}},
    "numpy text": {"class_name": "__numpy__", "config": {"value": "a", "dtype": "U400000000"}},
    "numpy subarray": {"class_name": "__numpy__", "config": {"value": 0, "dtype": "(30000,30000)f8"}},
    "numpy void": {"class_name": "__numpy__", "config": {"value": [0], "dtype": "V1000000000"}},
    "numpy object": {"class_name": "__numpy__", "config": {"value": [0], "dtype": "O"}},
    "tensor of an unknown dtype": {"class_name": "__tensor__", "config": {"value": [0], "dtype": "S1500000000"}},
}


@pytest.mark.parametrize("where", ["layer config", "op argument"])
@pytest.mark.parametrize("kind", sorted(HUGE_VALUES))
def test_a_special_value_declaring_more_than_the_payload_carries_is_refused(marker, kind, where):
    def edit(config):
        if where == "layer config":
            node_named(config, "Dense")["config"]["bias_regularizer"] = HUGE_VALUES[kind]
        else:
            node_named(config, "Add")["inbound_nodes"][0]["args"][1] = HUGE_VALUES[kind]

    with cpu_time_limit():
        error = assert_refused(edited(ops_model(), edit), marker)
    assert "__numpy__" in str(error) or "__tensor__" in str(error)


def test_a_call_with_no_symbolic_input_is_refused_before_keras_runs_it(marker):
    def edit(config):
        node = node_named(config, "Add")
        node.update(module="keras.src.ops.numpy", class_name="Ones", registered_name="Ones")
        node["inbound_nodes"] = [{"args": [[100000, 100000]], "kwargs": {"dtype": "float64"}}]

    with cpu_time_limit():
        error = assert_refused(edited(ops_model(), edit), marker)
    assert "no symbolic input" in str(error)


# --------------------------------------------------------------------------
# The generated sweep: every op x every argument position x every kind of value, first use included
# --------------------------------------------------------------------------

KERAS_FREE_INSPECT = """
import json, sys
import keras_pickle
verdicts = {path.rsplit("/", 1)[-1]: keras_pickle.inspect(path).safe_mode_refuses for path in sys.argv[1:]}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("keras", "tensorflow", "tf_keras", "keras_hub"))
print(json.dumps({"verdicts": verdicts, "loaded": loaded}))
"""


@pytest.mark.timeout(1500)
def test_every_op_with_every_kind_of_argument_is_refused_or_harmless_through_first_use(tmp_path):
    scratch, out = tmp_path / "scratch", tmp_path / "payloads"
    scratch.mkdir()
    out.mkdir()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "HOME": str(scratch), "PYTHONPATH": str(HERE.parent)}
    result = subprocess.run([sys.executable, str(HERE / "call_sweep.py"), str(scratch), str(out)], env=env,
                            cwd=scratch, capture_output=True, text=True, timeout=1400)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    cases = report["cases"]
    assert len(cases) > 1000, len(cases)  # every op Keras builds, several argument positions, six kinds of value
    assert {"keras_hub>compute_word_piece_vocabulary | switch branch", "keras_hub>upload_preset | loss wrapper"} <= set(
        cases
    ), "every function registered in the worker, in every place the payload chooses arguments"
    let_through = [case for case, found in cases.items() if found["must_refuse"] and found["outcome"] != "refused"]
    assert let_through == [], let_through[:20]
    assert [(case, f["events"]) for case, f in cases.items() if f["events"]] == []
    assert report["created"] == [], "a payload wrote into the working directory or HOME"
    outcomes = {found["outcome"] for found in cases.values()}
    assert outcomes <= {"refused", "loaded", "KerasUnpicklingError"}, outcomes  # one exception family
    # inspect, in a fresh Keras-free process, gives the verdict loads gave
    files = sorted(out.iterdir(), key=lambda p: int(p.stem))
    found = json.loads(run_python(KERAS_FREE_INSPECT, *map(str, files), timeout=900).strip().splitlines()[-1])
    assert found["loaded"] == [], found["loaded"]
    disagree = [case for case, f in cases.items() if found["verdicts"][f["file"]] != (f["outcome"] == "refused")]
    assert disagree == [], disagree[:20]


def test_inspect_verdicts_do_not_depend_on_what_the_process_loaded_before(tmp_path):
    """A config node naming a function by module is judged the same before and after a loads in the process."""
    data = edited(switch_model(), lambda config: node_named(config, "Switch")["inbound_nodes"][0]["args"].__setitem__(
        1, [KERAS_HUB_WRITER]))  # fmt: skip
    path = tmp_path / "p.pkl"
    path.write_bytes(data)
    before = json.loads(run_python(KERAS_FREE_INSPECT, str(path)).strip().splitlines()[-1])["verdicts"]["p.pkl"]
    with pytest.raises(keras_pickle.KerasUnpicklingError):
        keras_pickle.loads(data)
    assert before is True and keras_pickle.inspect(data).safe_mode_refuses is True


# --------------------------------------------------------------------------
# Spellings that reach an object without a function node
# --------------------------------------------------------------------------

REGISTRY_NAME = "keras_hub>compute_word_piece_vocabulary"


def _as_switch_branch(value):
    def edit(config):
        node_named(config, "Switch")["inbound_nodes"][0]["args"][1][1] = value

    return edited(switch_model(), edit)


def _as_wrapper_fn(value):
    wrapped = {"module": "keras.src.losses.losses", "class_name": "LossFunctionWrapper", "registered_name": None,
               "config": {"fn": value, "name": "w", "vocabulary_output_file": "/tmp/written"}}  # fmt: skip
    return edited(ops_model(), lambda config: config["compile_config"].__setitem__("loss", wrapped))


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(lambda: _as_switch_branch(REGISTRY_NAME), id="a plain string as a switch branch"),
        pytest.param(lambda: _as_wrapper_fn(REGISTRY_NAME), id="a plain string as a wrapper's fn"),
        pytest.param(
            lambda: _as_wrapper_fn({"class_name": None, "registered_name": REGISTRY_NAME, "config": {}}),
            id="a node whose class_name is null",
        ),
        pytest.param(
            lambda: _as_switch_branch({"class_name": "function", "config": REGISTRY_NAME}),
            id="a function node with no module",
        ),
    ],
)
def test_a_registered_function_reached_by_a_name_keras_resolves_is_refused_by_loads_and_inspect(marker, payload):
    """Keras's deserializer returns the registered object a plain string names, looks a node with a null
    class_name up by its registered_name, and a function node with no module up in the registry."""
    pytest.importorskip("keras_hub")
    data = payload()
    assert_refused(data, marker, allow_control_flow=True)
    assert keras_pickle.inspect(data).safe_mode_refuses


def test_a_typespec_naming_a_keras_function_is_refused_by_loads_and_inspect(marker):
    typespec = {"class_name": "__typespec__", "spec_name": "get_file", "module": "keras.utils",
                "registered_name": None, "config": ["x", "/tmp/fetched"]}  # fmt: skip
    data = edited(ops_model(), lambda config: node_named(config, "Dense")["config"].__setitem__("bias_regularizer",
                                                                                                typespec))  # fmt: skip
    assert "get_file" in str(assert_refused(data, marker))
    assert keras_pickle.inspect(data).safe_mode_refuses


def test_an_op_that_calls_a_function_among_its_arguments_is_control_flow():
    from keras_pickle._safe_mode import tables

    assert tables.role_of("keras.src.ops.linalg.JVP") == "control_flow"
    for path in ("keras.src.ops.linalg.jvp", "keras.src.ops.numpy.vectorize", "keras.src.ops.core.custom_gradient"):
        assert tables.role_of(path) == "refused:higher_order", path
