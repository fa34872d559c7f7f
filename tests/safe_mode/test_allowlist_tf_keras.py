"""Safe mode's allow-list on tf-keras payloads: tf-keras resolves module-less names at every depth and
imports any module a config names, so every node is judged under every spelling, and a function is
allowed only where tf-keras vouches for it or the caller names it (tests/safe_mode/test_allowlist.py for Keras 3, and
for the tests both dialects share, parametrized by ``dialect``)."""

from __future__ import annotations

import click.termui  # noqa: F401  (every Dask and MLflow worker has it imported)
import numpy as np
import pytest
import redteam
import tf_keras
from redteam import Effects, GlobalRef

import keras_pickle
import keras_pickle._allow  # noqa: F401  (imported on first load: imported here, so that imports show effects)
import keras_pickle._api  # noqa: F401
from keras_pickle._inspect import verdict

pytestmark = pytest.mark.tf_keras


def halve(x):
    """A custom activation nobody registered."""
    return tf_keras.activations.relu(x) * 0.5


@pytest.fixture(scope="module")
def parts():
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2), tf_keras.layers.Dense(1)])
    return redteam.payload_parts(model)


def assert_refused(data: bytes, marker, error: type = keras_pickle.UnsafePayloadError) -> Exception:
    with Effects(marker) as effects, pytest.raises(error) as info:
        keras_pickle.loads(data)
    effects.assert_none()
    # inspect refuses it too, or, for a name outside Keras's packages that only the loading process can judge
    # (is it registered there?), names the refusal it meets where it is not
    report = keras_pickle.inspect(data)
    assert report.safe_mode_refuses or any(w.startswith(verdict.UNDECIDED) for w in report.warnings), report
    return info.value


def with_last_layer(parts, layer: dict, table: dict) -> bytes:
    header, body = parts

    def edit(config):
        config["config"]["layers"][-1] = layer

    return redteam.craft(header, {**redteam.edit_config(body, edit), "custom_objects": table})


@pytest.mark.parametrize("kind", ["Lambda"])
@pytest.mark.parametrize("spelling", redteam.REFUSED_LAYER_SPELLINGS)
def test_a_lambda_is_refused_however_spelt_at_every_depth(tmp_path, parts, kind, spelling):
    inner = {"name": "lam", "function": {"class_name": "function", "config": "edit"}, "arguments": {}}
    for depth in redteam.DEPTHS:
        layer = redteam.nest(depth, {**redteam.REFUSED_LAYER_SPELLINGS[spelling](kind), "config": inner})
        error = assert_refused(with_last_layer(parts, layer, {}), tmp_path / "m", keras_pickle.LambdaLayerError)
        assert kind in str(error)


@pytest.mark.parametrize("place", ["activation", "kernel_initializer", "kernel_regularizer", "kernel_constraint"])
@pytest.mark.parametrize("table", [True, False], ids=["custom object", "module only"])
def test_a_worker_function_is_refused_in_every_place_tf_keras_calls_one(tmp_path, parts, place, table):
    header, body = parts
    node = {"class_name": "function", "config": "edit"} if table else {"module": "click.termui", "class_name": "edit"}

    def edit(config):
        config["config"]["layers"][-1]["config"][place] = node

    objects = {"edit": GlobalRef("click.termui", "edit")} if table else {}
    data = redteam.craft(header, {**redteam.edit_config(body, edit), "custom_objects": objects})
    error = assert_refused(data, tmp_path / "m")
    assert "edit" in str(error)


def test_a_module_less_lambda_calling_click_edit_in_a_nested_sequential_is_refused(tmp_path, parts):
    marker = tmp_path / "m"
    inner = {"name": "e", "function": {"class_name": "function", "config": "edit"},
             "arguments": {"text": "x", "editor": f"touch {marker}"}}  # fmt: skip
    nested = redteam.nest("nested Sequential", {"class_name": "Lambda", "config": inner})
    assert_refused(with_last_layer(parts, nested, {"edit": GlobalRef("click.termui", "edit")}), marker, Exception)
    assert not marker.exists()


def test_an_unregistered_function_loads_when_the_caller_names_it(parts):
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2, activation=halve)])
    data = keras_pickle.dumps(model)
    with pytest.raises(keras_pickle.UnsafePayloadError, match="custom_objects=") as info:
        keras_pickle.loads(data)
    assert "halve" in str(info.value)
    loaded = keras_pickle.loads(data, custom_objects={"halve": halve})
    x = np.ones((2, 3), "float32")
    assert np.array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def _touching_lambda(marker):
    """tf-keras's stored form of a lambda that creates ``marker`` when called (what ``func_dump`` writes)."""
    func_dump = tf_keras.src.utils.generic_utils.func_dump
    return func_dump(eval(f"lambda *args: open({str(marker)!r}, 'w')"))  # noqa: S307


@pytest.mark.parametrize(
    "wrapper, field",
    [("ResidualWrapper", "residual_fn"), ("DropoutWrapper", "dropout_state_filter_visitor"), ("Foo", "anything")],
)
@pytest.mark.parametrize("spelling", ["legacy, no module", "public module", "registered name only"])
def test_bytecode_in_an_rnn_cell_wrapper_is_refused_however_spelt_at_every_depth(
    tmp_path, parts, wrapper, field, spelling
):
    marker = tmp_path / "m"
    cell = {"class_name": "SimpleRNNCell", "config": {"name": "c", "units": 3}}
    inner = {"cell": cell, field: _touching_lambda(marker), f"{field}_type": "lambda", f"{field}_module": None}
    wrapped = {**redteam.REFUSED_LAYER_SPELLINGS[spelling](wrapper), "config": inner}
    rnn = {"class_name": "RNN", "config": {"name": "r", "cell": wrapped}}
    for depth in redteam.DEPTHS:
        data = with_last_layer(parts, redteam.nest(depth, rnn), {})
        error = assert_refused(data, marker, keras_pickle.LambdaLayerError)
        assert repr(field) in str(error) and "safe_mode=False" in str(error)
        assert not marker.exists()


def test_a_cell_wrapper_lambda_as_users_write_it_is_refused_and_loads_with_safe_mode_off():
    wrappers = tf_keras.src.layers.rnn.cell_wrappers
    tf_keras.utils.set_random_seed(0)
    cell = wrappers.ResidualWrapper(tf_keras.layers.SimpleRNNCell(3), residual_fn=lambda i, o: o * 2.0 + i)
    model = tf_keras.Sequential([tf_keras.Input((2, 3)), tf_keras.layers.RNN(cell), tf_keras.layers.Dense(1)])
    data = keras_pickle.dumps(model)
    with pytest.raises(keras_pickle.LambdaLayerError, match="safe_mode=False") as info:
        keras_pickle.loads(data)
    assert "residual_fn" in str(info.value)
    assert keras_pickle.inspect(data).lambda_layers == ("<Python lambda in 'residual_fn'>",)
    loaded = keras_pickle.loads(data, safe_mode=False)  # the advice, followed
    x = np.linspace(-1, 1, 12, dtype="float32").reshape(2, 2, 3)
    assert np.array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    for ours, theirs in zip(loaded.weights, model.weights, strict=True):
        assert np.array_equal(ours.numpy(), theirs.numpy())


def test_a_lambda_named_by_a_typespec_spec_name_is_refused(tmp_path, parts):
    """tf-keras resolves a __typespec__ node's class by its spec_name ("layers.Lambda"), any module."""
    marker = tmp_path / "m"
    fn = {"module": "joblib.memory", "class_name": "function", "config": "pydoc.pipepager", "registered_name": None}
    lam = {"class_name": "__typespec__", "module": "tf_keras", "spec_name": "layers.Lambda", "registered_name": "x",
           "config": {"name": "l", "function": fn, "function_type": "function", "module": None,
                      "output_shape": None, "output_shape_type": "raw", "output_shape_module": None,
                      "arguments": {"cmd": f"touch {marker}"}}}  # fmt: skip
    cell = {"class_name": "SimpleRNNCell", "config": {"name": "c", "units": 3}}
    wrapped = {"cell": cell, "residual_fn": lam, "residual_fn_type": "function", "residual_fn_module": None}
    wrapper = {"class_name": "ResidualWrapper", "config": wrapped}
    rnn = {"class_name": "RNN", "config": {"name": "r", "cell": wrapper}}
    assert_refused(with_last_layer(parts, rnn, {}), marker, keras_pickle.LambdaLayerError)


@pytest.mark.parametrize("place", ["activation", "kernel_regularizer"])
def test_a_function_reached_through_a_dotted_name_in_an_imported_module_is_refused(tmp_path, parts, place):
    """tf-keras resolves "a.b" in a module as attribute b of its attribute a: joblib.memory holds pydoc."""
    import joblib.memory  # noqa: F401

    header, body = parts
    node = {"module": "joblib.memory", "class_name": "function", "config": "pydoc.pipepager", "registered_name": None}

    def edit(config):
        config["config"]["layers"][-1]["config"][place] = node

    error = assert_refused(redteam.craft(header, redteam.edit_config(body, edit)), tmp_path / "m")
    assert "pipepager" in str(error)


# --------------------------------------------------------------------------
# Fields that name a file or a module: refused where tf-keras acts on them, not in a user's config
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrapped",
    [
        {"dropout_fn_module": "os"},  # tf-keras merges it before it reads dropout_fn or dropout_fn_type
        {"dropout_fn": None, "dropout_fn_module": "os"},
        {"residual_fn_module": "os"},
    ],
    ids=["module alone", "beside the function, no type", "residual module alone"],
)
def test_a_cell_wrapper_module_is_refused_with_or_without_its_type_and_nothing_is_merged(tmp_path, parts, wrapped):
    from tf_keras.src.layers.rnn import cell_wrappers

    cell = {"class_name": "SimpleRNNCell", "config": {"name": "c", "units": 3}}
    kind = "ResidualWrapper" if "residual_fn_module" in wrapped else "DropoutWrapper"
    rnn = {
        "class_name": "RNN",
        "config": {"name": "r", "cell": {"class_name": kind, "config": {"cell": cell, **wrapped}}},
    }
    error = assert_refused(with_last_layer(parts, rnn, {}), tmp_path / "m")
    assert "'os'" in str(error)
    assert getattr(cell_wrappers, "system", None) is not __import__("os").system


def test_a_feature_column_reading_a_vocabulary_file_is_refused(tmp_path, parts):
    """tf-keras's DenseFeatures with a VocabularyFileCategoricalColumn: TensorFlow reads the file in C++ when the
    layer is built, where no audit hook sees it; the field is refused by name before anything is built."""
    secret = tmp_path / "secret_vocab.txt"
    secret.write_text("hunter2\nroot\n")
    column = {"class_name": "VocabularyFileCategoricalColumn",
              "config": {"key": "a", "vocabulary_file": str(secret), "vocabulary_size": 2, "num_oov_buckets": 0,
                         "dtype": "string", "default_value": -1, "file_format": None}}  # fmt: skip
    indicator = {"class_name": "IndicatorColumn", "config": {"categorical_column": column}}
    layer = {"class_name": "DenseFeatures", "config": {"name": "features", "feature_columns": [indicator]}}
    error = assert_refused(with_last_layer(parts, layer, {}), tmp_path / "m")
    assert "secret_vocab.txt" in str(error) and "vocabulary_file" in str(error)


def test_a_subclass_of_a_lookup_layer_reading_a_file_is_refused_under_any_name(tmp_path, parts):
    import tf_keras_models  # noqa: F401  (the loading process has the user's module imported)

    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n")
    layer = {"class_name": "Renamed", "config": {"name": "v", "vocabulary": str(secret)}}
    error = assert_refused(
        with_last_layer(parts, layer, {"Renamed": GlobalRef("tf_keras_models", "MyLookup")}), tmp_path / "m"
    )
    assert "secret.txt" in str(error)


def test_a_subclass_of_a_cell_wrapper_merging_a_module_is_refused_under_any_name(tmp_path, parts):
    import tf_keras_models  # noqa: F401

    cell = {"class_name": "SimpleRNNCell", "config": {"name": "c", "units": 3}}
    wrapped = {"cell": cell, "residual_fn": None, "residual_fn_type": "function", "residual_fn_module": "os"}
    rnn = {"class_name": "RNN", "config": {"name": "r", "cell": {"class_name": "Mine", "config": wrapped}}}
    error = assert_refused(
        with_last_layer(parts, rnn, {"Mine": GlobalRef("tf_keras_models", "MyResidualWrapper")}), tmp_path / "m"
    )
    assert "'os'" in str(error)
