"""Subclassed models and layers without get_config(): constructor arguments recorded by install().

Backend-neutral (the default train_step); keras.io's VAE and GAN, whose
training steps are TensorFlow's, are in tests/models/test_kerasio.py.
"""

from __future__ import annotations

import copy
import pickle
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import zoo
from helpers import TESTS_DIR, assert_same_state, constructed_before_install, run_python

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend

HERE = Path(__file__).resolve().parent
"""This folder: the fresh interpreter imports this module by name."""


class Lookup(keras.layers.Layer):
    """A layer holding a numpy table: Keras records no config for it (an array is not a plain value)."""

    def __init__(self, table, **kwargs):
        super().__init__(**kwargs)
        self.table = table
        self.scale = self.add_weight(shape=(), initializer="ones", name="scale")

    def call(self, x):
        return keras.ops.matmul(x, keras.ops.convert_to_tensor(self.table)) * self.scale


class Seen(keras.metrics.Metric):
    """A custom metric: how many rows it was shown."""

    def __init__(self, name="seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, x):
        self.count.assign(self.count + keras.ops.cast(keras.ops.shape(x)[0], self.count.dtype))

    def result(self):
        return keras.ops.convert_to_tensor(self.count)


class Tracked(keras.Model):
    """Takes a model and an array, holds a custom metric tracker; no get_config."""

    def __init__(self, body, offsets, **kwargs):
        super().__init__(**kwargs)
        self.body = body
        self.offsets = offsets
        self.seen = Seen()
        self.head = keras.layers.Dense(1)

    def call(self, x):
        return self.head(self.body(x) + keras.ops.convert_to_tensor(self.offsets))


def tracked() -> Tracked:
    body = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(3), keras.layers.Dropout(0.2)])
    model = Tracked(body, np.arange(3, dtype="float32"))
    model.compile(optimizer="adam", loss="mse")
    x, y = zoo.data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    model.seen.update_state(x)
    return model


def functional_with_table() -> keras.Model:
    inputs = keras.Input((zoo.FEATURES,))
    table = np.random.default_rng(3).normal(size=(zoo.FEATURES, 2)).astype("float32")
    outputs = keras.layers.Dense(1)(Lookup(table, name="lookup")(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    model.fit(*zoo.data(), epochs=1, batch_size=8, verbose=0)
    return model


def test_a_model_taking_a_model_and_an_array_round_trips_with_its_tracker():
    model = tracked()
    x, y = zoo.data()
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert_same_state(model, restored)
        assert np.array_equal(restored.offsets, model.offsets) and restored.offsets is not model.offsets
        assert int(keras.ops.convert_to_numpy(restored.seen.count)) == 16
        assert restored.body in restored._flatten_layers()
        restored.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert_same_state(model, restored)


def test_the_argument_model_is_pickled_once_and_shared_in_the_stream():
    model = tracked()
    restored, body = pickle.loads(pickle.dumps((model, model.body)))
    assert body is restored.body
    copied, copied_body = copy.deepcopy((model, model.body))
    assert copied_body is copied.body and copied_body is not model.body


def test_a_layer_holding_a_numpy_table_inside_a_functional_model():
    model = functional_with_table()
    x, y = zoo.data()
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model), keras_pickle.loads(pickle.dumps(model))):
        lookup = restored.get_layer("lookup")
        assert np.array_equal(lookup.table, model.get_layer("lookup").table)
        assert_same_state(model, restored)
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))


FRESH = """
    import pickle, sys
    import numpy as np
    import keras, keras_pickle
    import helpers, zoo

    directory = sys.argv[1]
    data = open(f"{directory}/model.pkl", "rb").read()
    safe_refused = False
    try:
        keras_pickle.loads(data)
    except keras_pickle.UnsafePayloadError as e:
        safe_refused = "test_recorded_arguments" in str(e)
    assert safe_refused, "safe mode resolved a class of a module that is not imported"
    import test_recorded_arguments  # noqa: F401
    for restored in (pickle.loads(data), keras_pickle.loads(data)):
        values = helpers.variable_values(restored)
        expected = np.load(f"{directory}/before.npz")
        assert len(values) == len(expected.files)
        for i, (path, _, _, raw) in enumerate(values):
            assert raw == expected[f"v{i}"].tobytes(), path
    x, y = zoo.data()
    restored.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    np.savez(f"{directory}/after.npz", **{f"v{i}": np.frombuffer(raw, np.uint8)
                                          for i, (_, _, _, raw) in enumerate(helpers.variable_values(restored))})
    print("fresh ok")
"""


def test_loads_in_a_fresh_interpreter_safe_mode_included(tmp_path):
    model = tracked()
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(model))
    from helpers import variable_values

    np.savez(
        tmp_path / "before.npz",
        **{f"v{i}": np.frombuffer(raw, np.uint8) for i, (_, _, _, raw) in enumerate(variable_values(model))},
    )
    env = {"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}:{HERE}"}
    assert "fresh ok" in run_python(FRESH, str(tmp_path), env=env, timeout=400, keras_imported=True)
    x, y = zoo.data()
    model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    after = np.load(tmp_path / "after.npz")
    for i, (path, _, _, raw) in enumerate(variable_values(model)):
        assert raw == after[f"v{i}"].tobytes(), path


def test_safe_mode_refuses_an_argument_it_would_not_resolve_before_anything_runs(tmp_path):
    marker = tmp_path / "ran"
    model = Tracked(keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(3)]), print)
    data = pickle.dumps(model)
    with pytest.raises(keras_pickle.UnsafePayloadError, match="builtins.print"):
        keras_pickle.loads(data)
    assert not marker.exists()
    assert isinstance(pickle.loads(data), Tracked)


def test_an_argument_that_cannot_be_pickled_is_named_by_check():
    model = Tracked(keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(3)]), lambda x: x)
    report = keras_pickle.check(model)
    assert not report.ok
    assert any(p.path == "tracked.offsets" and "lambda" in p.reason for p in report.problems), str(report)
    with pytest.raises(Exception, match="lambda"):
        pickle.dumps(model)


class CompiledWithTracker(keras.Model):
    """A custom compile() that stores a second optimizer and creates a tracker (it did not exist before)."""

    def __init__(self, net, **kwargs):
        super().__init__(**kwargs)
        self.net = net

    def compile(self, extra_optimizer, **kwargs):
        super().compile(**kwargs)
        self.extra_optimizer = extra_optimizer
        self.loss_metric = keras.metrics.Mean(name="loss_metric")

    def call(self, x):
        return self.net(x)


def test_a_custom_compile_that_creates_trackers_and_holds_an_optimizer():
    net = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(1)])
    model = CompiledWithTracker(net)
    model.compile(keras.optimizers.SGD(0.1), optimizer="adam", loss="mse")
    x, y = zoo.data()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    model.extra_optimizer.build(model.trainable_variables)
    model.loss_metric.update_state([1.0, 2.0])
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert float(restored.loss_metric.result()) == 1.5
        assert isinstance(restored.extra_optimizer, keras.optimizers.SGD) and restored.extra_optimizer.built
        assert float(restored.extra_optimizer.learning_rate) == pytest.approx(0.1)
        assert_same_state(model, restored)


def test_a_recorded_payload_is_deterministic():
    model = tracked()
    assert pickle.dumps(model) == pickle.dumps(model)
    text = textwrap.dedent(str(keras_pickle.inspect(pickle.dumps(model))))
    assert "Tracked" in text


def test_a_layer_whose_constructor_refuses_its_config_is_rebuilt_from_its_arguments():
    """keras.io's PatchEncoder(num_patches, projection_dim) takes no **kwargs: Keras's cls(**config) fails on
    'name'. Built while installed, its recorded arguments rebuild it (under its own name); built before,
    dumps refuses, naming both remedies."""
    import sweep_models

    def build():
        inputs = keras.Input((4, 6))
        return keras.Model(inputs, sweep_models.PatchEncoder(4, 3)(inputs))

    model = build()
    x = np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32")
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert_same_state(model, restored)
        assert [layer.name for layer in restored.layers] == [layer.name for layer in model.layers]
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))
    with pytest.raises(keras_pickle.UnrecoverableConfigError, match=r"install\(\).*\*\*kwargs"):
        pickle.dumps(constructed_before_install(build))
