"""tf-keras (Keras 2, the ``tf_keras`` package): the same guarantees as for Keras 3.

Run in their own pytest process (``pytest -m tf_keras``; tests/run_all.py does): tf-keras imports
TensorFlow, and its models are checked here against the models of tests/tf_keras_models.py, written
as people write them (an unregistered custom layer, a subclassed model without get_config, seeded
Dropout, BatchNormalization, Adam / AdamW). Every value is compared bit for bit: weights, the
optimizer's iterations and slots, random-generator states.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import pickle
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import redteam
import tensorflow as tf
import tf_keras  # the test extra installs it: a missing tf-keras fails the run, never skips it
import tf_keras_models as tm
from helpers import TESTS_DIR, run_python, ulps_apart

import keras_pickle
from keras_pickle._format import restore

pytestmark = pytest.mark.tf_keras

HERE = Path(__file__).resolve().parent
"""This folder: Ray's workers import this module by name (``fit_one_epoch``)."""

NAMES = tuple(tm.BUILDERS)


@pytest.fixture(scope="module")
def models():
    return {name: tm.trained(name) for name in NAMES}


def assert_same_values(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b) and len(a) > 0, f"{len(a)} values vs {len(b)}"
    for position, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, f"value #{position}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
        assert x.tobytes() == y.tobytes(), f"value #{position} differs"


def assert_faithful(original, restored) -> None:
    """Every value equal, none shared, the same predictions, and one more epoch identical on both."""
    assert type(restored) is type(original)
    assert_same_values(tm.all_values(original), tm.all_values(restored))
    shared = {id(v) for v in original.variables} & {id(v) for v in restored.variables}
    assert not shared, "the copy shares variables with the original"
    x, _y = tm.data()
    assert np.array_equal(original.predict(x, verbose=0), restored.predict(x, verbose=0))
    assert_same_values(tm.train_step(original), tm.train_step(restored))


def test_install_covers_tf_keras():
    assert keras_pickle.is_installed()
    for cls in (tf_keras.Model, tf_keras.layers.Layer, tf_keras.optimizers.Optimizer, tf_keras.metrics.Metric):
        assert getattr(cls.__dict__.get("__reduce_ex__"), "__keras_pickle__", False), cls
    keras_pickle.uninstall()
    assert "__keras_pickle__" not in dir(tf_keras.Model.__dict__.get("__reduce__"))
    keras_pickle.install()


@pytest.mark.parametrize("name", NAMES)
def test_pickle_round_trip_is_faithful(name):
    model = tm.trained(name)
    restored = pickle.loads(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
    assert_faithful(model, restored)


@pytest.mark.parametrize("name", list(tm.WITH_DATA))
def test_vocabularies_statistics_and_applications_travel(name):
    model, x, y = tm.WITH_DATA[name]()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    for restored in (pickle.loads(pickle.dumps(model)), keras_pickle.loads(keras_pickle.dumps(model))):
        expected, actual = tm.weight_values(model), tm.weight_values(restored)
        assert len(expected) == len(actual)
        for a, b in zip(expected, actual):
            assert a.dtype == b.dtype and (
                a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes()
            )
        assert np.array_equal(model.predict(x, verbose=0), restored.predict(x, verbose=0))


def test_every_protocol_and_out_of_band_buffers(models):
    model = models["functional"]
    expected = tm.all_values(model)
    for protocol in range(0, 6):
        assert_same_values(expected, tm.all_values(pickle.loads(pickle.dumps(model, protocol=protocol))))
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    n_values = len(model.variables) + len(model.optimizer.variables)
    assert len(buffers) >= n_values, "weights travel out of band, one buffer each"
    assert sum(memoryview(b).nbytes for b in buffers) >= sum(v.numpy().nbytes for v in model.variables)
    assert len(data) < 20_000, "the stream holds no weight bytes"
    assert_same_values(expected, tm.all_values(pickle.loads(data, buffers=buffers)))


def test_header_names_the_dialect(models):
    function, (header, body) = models["sequential"].__reduce_ex__(5)
    assert function is restore
    assert header["dialect"] == "tf_keras" and header["keras_version"] == tf_keras.__version__
    assert header["format_version"] == keras_pickle.FORMAT_VERSION and header["backend"] == "tensorflow"
    info = keras_pickle.inspect(keras_pickle.dumps(models["sequential"]))
    assert info.dialect == "tf_keras" and f"tf-keras {tf_keras.__version__}" in str(info)


@pytest.mark.parametrize("name", ["subclassed", "functional"])
def test_deepcopy_is_faithful_and_independent(name):
    model = tm.trained(name)
    twin = copy.deepcopy(model)
    before = tm.all_values(model)
    tm.train_step(twin)
    assert_same_values(before, tm.all_values(model))  # training the copy leaves the original alone
    assert_faithful(model, copy.deepcopy(model))


def test_keras_3_and_tf_keras_models_travel_in_one_stream(models):
    k3 = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    k3.compile("adam", "mse")
    k3_back, tfk_back = pickle.loads(pickle.dumps((k3, models["functional"])))
    assert isinstance(k3_back, keras.Model) and isinstance(tfk_back, tf_keras.Model)
    assert_same_values(tm.all_values(models["functional"]), tm.all_values(tfk_back))


def test_a_fresh_process_loads_in_safe_mode_and_trains_identically(models, tmp_path):
    for name, model in models.items():
        (tmp_path / f"{name}.pkl").write_bytes(keras_pickle.dumps(model))
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        import numpy as np, keras_pickle, tf_keras_models as tm
        for name in {list(NAMES)!r}:
            model = keras_pickle.loads(open({str(tmp_path)!r} + f"/{{name}}.pkl", "rb").read())
            x, _ = tm.data()
            np.savez({str(tmp_path)!r} + f"/{{name}}.npz", *tm.all_values(model))
            np.save({str(tmp_path)!r} + f"/{{name}}_pred.npy", model.predict(x, verbose=0))
            np.savez({str(tmp_path)!r} + f"/{{name}}_next.npz", *tm.train_step(model))
        print("loaded", keras_pickle.is_installed())
        """
    )
    assert "loaded True" in out
    x, _ = tm.data()
    for name, model in models.items():
        with np.load(tmp_path / f"{name}.npz") as saved:
            assert_same_values(tm.all_values(model), [saved[f"arr_{i}"] for i in range(len(saved.files))])
        assert np.array_equal(np.load(tmp_path / f"{name}_pred.npy"), model.predict(x, verbose=0))
        with np.load(tmp_path / f"{name}_next.npz") as saved:
            assert_same_values(tm.train_step(model), [saved[f"arr_{i}"] for i in range(len(saved.files))])


def test_install_never_imports_tf_keras_and_covers_it_once_imported():
    out = run_python(
        """
        import sys
        import keras_pickle
        keras_pickle.install()
        print("imported by install:", "tf_keras" in sys.modules)
        import tf_keras
        print("covered after import:", getattr(tf_keras.Model.__reduce_ex__, "__keras_pickle__", False))
        """
    )
    assert "imported by install: False" in out and "covered after import: True" in out


def test_without_tf_keras_a_payload_names_both_dialects(models, tmp_path):
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(models["sequential"]))
    out = run_python(
        f"""
        import pickle, sys
        sys.modules["tf_keras"] = None  # as if tf-keras were not installed
        import keras_pickle
        data = open({str(path)!r}, "rb").read()
        for load in (pickle.loads, keras_pickle.loads):
            try:
                load(data)
            except keras_pickle.DialectError as e:
                print(type(e).__name__, e.written, e.here, e)
        """
    )
    assert out.count("DialectError tf_keras ('keras3',)") == 2, out
    assert f"tf-keras (Keras 2) model (tf-keras {tf_keras.__version__})" in out and "Keras 3 (" in out
    assert f"pip install tf-keras=={tf_keras.__version__}" in out


def test_safe_mode_refuses_lambda_layers_and_keeps_the_trusted_path():
    inputs = tf_keras.Input((4,))
    model = tf_keras.Model(inputs, tf_keras.layers.Lambda(lambda t: t * 2.0)(inputs))
    data = keras_pickle.dumps(model)
    with pytest.raises(keras_pickle.LambdaLayerError, match="Lambda layer"):
        keras_pickle.loads(data)
    x = np.ones((2, 4), "float32")
    assert np.array_equal(keras_pickle.loads(data, safe_mode=False).predict(x, verbose=0), x * 2)


@pytest.mark.parametrize(
    "activation",
    [
        {"module": "os", "class_name": "function", "config": "system", "registered_name": "system"},
        {"module": "subprocess", "class_name": "Popen", "config": {"args": "true"}, "registered_name": None},
        {"module": "tf_keras.src.saving.legacy.save", "class_name": "function", "config": "load_model",
         "registered_name": None},
    ],
)  # fmt: skip
def test_safe_mode_refuses_what_tf_keras_would_import_or_call(models, activation, tmp_path):
    header, body = redteam.payload_parts(models["sequential"])

    def poison(config):
        config["config"]["layers"][1]["config"]["activation"] = activation

    data = redteam.craft(header, redteam.edit_config(body, poison))
    with redteam.Effects(tmp_path / "marker") as effects:
        with pytest.raises(keras_pickle.UnsafePayloadError, match="Safe mode refused"):
            keras_pickle.loads(data)
    effects.assert_none()


def test_safe_mode_refuses_a_custom_object_that_is_not_a_tf_keras_class(models):
    header, body = redteam.payload_parts(models["functional"])
    body["custom_objects"] = {**body["custom_objects"], "Gate": redteam.GlobalRef("os", "system")}
    with pytest.raises(keras_pickle.UnsafePayloadError):
        keras_pickle.loads(redteam.craft(header, body))


def test_optimizers_metrics_and_callbacks_are_refused_with_a_clear_error(models):
    model = models["subclassed"]
    for obj in (model.optimizer, tf_keras.metrics.Mean(), tf_keras.callbacks.EarlyStopping(patience=2)):
        with pytest.raises(keras_pickle.PickleRefusedError, match="Refusing to pickle"):
            pickle.dumps(obj)
    with pytest.raises(keras_pickle.PickleRefusedError) as info:
        pickle.dumps(model.optimizer)
    assert "Pickle the compiled model instead" in str(info.value) and "allow=" not in str(info.value)
    keras_pickle.install(allow=("callbacks",))
    try:
        stopping = pickle.loads(pickle.dumps(tf_keras.callbacks.EarlyStopping(patience=2)))
        assert isinstance(stopping, tf_keras.callbacks.EarlyStopping) and stopping.patience == 2
    finally:
        keras_pickle.install(allow=())


def test_check_reports_a_model_and_what_cannot_travel(models):
    assert keras_pickle.check(models["subclassed"]).ok
    report = keras_pickle.check({"model": models["functional"], "optimizer": models["functional"].optimizer})
    assert not report.ok and "refused by design" in str(report)


def test_standalone_layers_losses_and_unbuilt_models_travel():
    gate = tm.Gate(3)
    gate(np.ones((1, 4), "float32"))
    back = pickle.loads(pickle.dumps(gate))
    assert_same_values([w.numpy() for w in gate.weights], [w.numpy() for w in back.weights])
    assert type(pickle.loads(pickle.dumps(tf_keras.layers.Dense(2)))) is tf_keras.layers.Dense
    unbuilt = pickle.loads(pickle.dumps(tf_keras.Sequential([tf_keras.layers.Dense(2)])))
    assert isinstance(unbuilt, tf_keras.Sequential) and not unbuilt.built
    for load in (pickle.loads, keras_pickle.loads):
        huber = load(pickle.dumps(tf_keras.losses.Huber(delta=2.5)))
        assert isinstance(huber, tf_keras.losses.Huber) and huber.get_config()["delta"] == 2.5


def test_a_layer_built_without_a_recorded_shape_is_refused_at_dumps():
    gate = tm.Gate(3)
    gate.build((None, 4))  # Gate.build does not call super().build(): tf-keras records no input shape
    with pytest.raises(keras_pickle.UnrecoverableConfigError, match="super\\(\\).build"):
        pickle.dumps(gate)


def test_a_legacy_optimizer_is_refused_naming_the_fix():
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2)])
    model.compile(tf_keras.optimizers.legacy.Adam(), "mse")
    model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)
    with pytest.raises(keras_pickle.KerasPicklingError, match="tf_keras.optimizers.Adam"):
        pickle.dumps(model)


def fit_one_epoch(model):
    tm.train_step(model)
    return model


def test_joblib_loky_workers_train_and_return_models(models):
    joblib = pytest.importorskip("joblib")
    sent = [copy.deepcopy(models["functional"]), copy.deepcopy(models["subclassed"])]
    returned = joblib.Parallel(n_jobs=2, backend="loky")(joblib.delayed(fit_one_epoch)(m) for m in sent)
    for original, back in zip(sent, returned):
        assert_same_values(tm.train_step(original), tm.all_values(back))


def test_multiprocessing_spawn_worker_trains_and_returns_a_model(models):
    model = copy.deepcopy(models["functional"])
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        back = pool.apply(fit_one_epoch, (copy.deepcopy(model),))
    assert_same_values(tm.train_step(model), tm.all_values(back))


def test_dask_and_ray_workers_train_and_return_models(models):
    distributed = pytest.importorskip("distributed")
    ray = pytest.importorskip("ray")
    model = models["functional"]
    expected = tm.train_step(copy.deepcopy(model))
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(TESTS_DIR), *sys.path[:1], saved]))
    try:
        with (
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as c,
            distributed.Client(c) as client,
        ):
            assert_same_values(expected, tm.all_values(client.submit(fit_one_epoch, model).result()))
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            back = ray.get(ray.remote(fit_one_epoch).remote(model))
            assert_same_values(expected, tm.all_values(back))
        finally:
            ray.shutdown()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


RECORDED_ULPS = 8
"""How far, in units in the last place of the largest prediction, predictions computed here may lie from those recorded
on another CPU (2 measured between two CPUs)."""


@pytest.mark.parametrize("name", ["v4_tf_keras_functional_checksum", "v4_tf_keras_subclassed_checksum"])
def test_stored_tf_keras_payloads_keep_loading(name):
    """Every stored value bit for bit; predictions bit for bit against a model built here from its code with the
    stored values (the same kernels), and within RECORDED_ULPS of those recorded on the CPU that wrote the payload
    (TensorFlow's kernels follow the instruction set)."""
    model = keras_pickle.loads((TESTS_DIR / "data" / "tf_keras" / f"{name}.pkl").read_bytes())
    with np.load(TESTS_DIR / "data" / "tf_keras" / f"{name}.npz") as npz:
        saved = {key: npz[key] for key in npz.files}
    values = [saved[key] for key in sorted(saved) if key.startswith("var_")]
    assert_same_values(values, tm.all_values(model))
    reference = tm.reference_predictions("functional" if "functional" in name else "subclassed", saved)
    predictions = model.predict(saved["x"], verbose=0)
    assert predictions.dtype == reference.dtype and np.array_equal(predictions, reference)
    assert ulps_apart(reference, saved["y"], at=np.abs(reference).max()).max() <= RECORDED_ULPS


def test_the_reference_of_a_stored_tf_keras_payload_is_built_from_the_stored_values():
    with np.load(TESTS_DIR / "data" / "tf_keras" / "v4_tf_keras_functional_checksum.npz") as npz:
        saved = {key: npz[key] for key in npz.files}
    changed = {**saved, "var_000": saved["var_000"] + np.ones_like(saved["var_000"])}
    assert not np.array_equal(
        tm.reference_predictions("functional", changed), tm.reference_predictions("functional", saved)
    )


# --------------------------------------------------------------------------
# tf-keras's own deepcopy tests, with install() active: what a config cannot rebuild is still
# copied, as tf-keras copies it without keras_pickle (every variable equal, none shared)
# --------------------------------------------------------------------------


def test_deepcopy_of_a_built_conv2d_with_an_inline_lambda_bias_regularizer():
    """tf-keras's base_layer_test.py::BaseLayerTest::test_deepcopy."""
    layer = tf_keras.layers.Conv2D(32, (3, 3), bias_regularizer=lambda x: 1e-3 * tf.reduce_sum(x))
    layer(tf.ones((1, 10, 10, 3)))
    twin = copy.deepcopy(layer)
    assert type(twin) is tf_keras.layers.Conv2D and len(twin.losses) == 1
    assert twin.bias_regularizer is layer.bias_regularizer
    assert_same_values([w.numpy() for w in layer.weights], [w.numpy() for w in twin.weights])
    assert not {id(w) for w in layer.weights} & {id(w) for w in twin.weights}
    twin.kernel.assign(tf.zeros_like(twin.kernel))
    assert np.abs(layer.kernel.numpy()).max() > 0, "assigning the copy's kernel changed the original's"


@pytest.mark.parametrize("built", [False, True], ids=["unbuilt", "built"])
def test_deepcopy_of_a_layer_with_inline_lambda_initializer_regularizer_and_constraint(built):
    layer = tf_keras.layers.Dense(
        3,
        kernel_initializer=lambda shape, dtype=None: tf.ones(shape, dtype=dtype) * 0.25,
        kernel_regularizer=lambda w: 1e-2 * tf.reduce_sum(tf.abs(w)),
        kernel_constraint=lambda w: tf.clip_by_value(w, -0.5, 0.5),
    )
    x = np.ones((2, 4), "float32")
    if built:
        layer(x)
    twin = copy.deepcopy(layer)
    assert twin.kernel_constraint is layer.kernel_constraint
    assert twin.built is built
    expected = np.full((2, 3), 1.0, "float32")
    assert np.array_equal(twin(x).numpy(), expected)
    assert layer.built is built, "calling the copy built the original"
    assert len(twin.losses) == 1
    assert_same_values([np.full((4, 3), 0.25, "float32")], [twin.kernel.numpy()])
    if built:
        assert twin.kernel is not layer.kernel


class OwnsAVariable(tf_keras.Model):
    """tf-keras's model_subclassing_test.py::CustomCallSignatureTests::test_deepcopy: never built."""

    def __init__(self):
        super().__init__()
        self.my_variable = tf_keras.backend.variable(0.0)
        self.layer = tf_keras.layers.Dense(4)

    def call(self, obs):
        return self.layer(obs)


def test_deepcopy_of_a_never_built_subclassed_model_that_owns_a_variable():
    model = OwnsAVariable()
    model.my_variable = tf.Variable(0.0, trainable=False)  # as tf-keras's test holds it
    model.my_variable.assign_add(1.0)
    twin = copy.deepcopy(model)
    assert type(twin) is OwnsAVariable and not twin.built
    assert twin.my_variable.numpy() == 1.0 and twin.my_variable is not model.my_variable
    twin.my_variable.assign(5.0)
    assert model.my_variable.numpy() == 1.0
    twin(np.ones((2, 3), "float32"))
    assert twin.layer.built and not model.layer.built, "calling the copy built the original"


def test_pickling_a_never_built_model_that_owns_a_variable_refuses_with_a_true_reason():
    model = OwnsAVariable()
    with pytest.raises(keras_pickle.UnrecoverableConfigError, match="never called on data") as raised:
        pickle.dumps(model)
    assert raised.value.class_name == "OwnsAVariable"


class LambdaRegularized(tf_keras.Model):
    """A subclassed model whose first layer has an inline-lambda kernel regularizer."""

    def __init__(self):
        super().__init__()
        self.hidden = tf_keras.layers.Dense(8, kernel_regularizer=lambda w: 1e-3 * tf.reduce_sum(tf.square(w)))
        self.out = tf_keras.layers.Dense(3)

    def call(self, x):
        return self.out(self.hidden(x))


def test_deepcopy_of_a_trained_subclassed_model_holding_an_inline_lambda_trains_like_the_original():
    model = LambdaRegularized()
    model.compile(tf_keras.optimizers.Adam(1e-2), tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tm.train_step(model)
    twin = copy.deepcopy(model)
    assert twin.optimizer is not model.optimizer and len(twin.losses) == 1
    before = tm.all_values(model)
    tm.train_step(copy.deepcopy(model))
    assert_same_values(before, tm.all_values(model))  # training a copy leaves the original alone
    assert_faithful(model, twin)


def test_deepcopy_of_a_trained_sequential_holding_an_inline_lambda_fails_as_without_keras_pickle_but_in_its_family():
    """tf-keras's own deepcopy of this model fails too (its SavedModel round trip cannot load the lambda)."""
    model = tf_keras.Sequential(
        [
            tf_keras.Input((6,)),
            tf_keras.layers.Dense(8, kernel_regularizer=lambda w: 1e-3 * tf.reduce_sum(tf.square(w))),
            tf_keras.layers.Dense(3),
        ]
    )
    model.compile("adam", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tm.train_step(model)
    with pytest.raises(keras_pickle.KerasPicklingError) as raised:
        copy.deepcopy(model)
    message = str(raised.value)
    assert "Cannot deep-copy Sequential" in message and "__lambda__" in message
    assert "copying its attributes failed" in message
