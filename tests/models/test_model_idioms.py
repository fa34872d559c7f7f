"""Every way keras.io builds a model, pickled and deep-copied, on every backend.

Functional subclasses called with positional or keyword ``inputs`` /
``outputs`` (a ``train_step``, ``test_step`` or ``compute_loss`` of their own,
each backend's own ``train_step``), subclasses that build their graph in
``__init__``, a Functional subclass with a constructor argument of its own,
Sequential subclasses, models nested in models and a transfer-learning head
on a frozen base. None defines ``get_config()``. A Functional subclass's
recorded arguments hold symbolic tensors of its own graph: they never travel,
and the copy is rebuilt from its Functional config into its own class.

Dropout layers are seeded: an unseeded Dropout on PyTorch draws from torch's
global generator, which no model carries.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
from pathlib import Path

import cloudpickle
import keras
import numpy as np
import pytest
import zoo
from helpers import REPO_DIR, TESTS_DIR, constructed_before_install, start_python
from keras import layers, ops

import keras_pickle

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend

HERE = Path(__file__).resolve().parent
"""This folder: the fresh interpreter imports this module by name."""

FEATURES = zoo.FEATURES


# --------------------------------------------------------------------------
# The idioms (module level: a fresh interpreter imports them by reference)
# --------------------------------------------------------------------------


class ForwardingTrainStep(keras.Model):
    """keras.io's ``CustomModel``: a ``train_step`` of its own that defers to Keras's (either signature)."""

    def train_step(self, *args):
        return super().train_step(*args)


class CustomTestStep(keras.Model):
    def test_step(self, *args):
        return super().test_step(*args)


class PenalizedLoss(keras.Model):
    """A ``compute_loss`` of its own."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training)
        return loss + 1e-3 * ops.mean(ops.square(y_pred))


class TensorFlowTrainStep(keras.Model):
    """keras.io's TensorFlow ``train_step``: a gradient tape."""

    def train_step(self, data):
        import tensorflow as tf

        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        return self._updated_metrics(loss, y, y_pred)

    def _updated_metrics(self, loss, y, y_pred):
        for metric in self.metrics:
            metric.update_state(loss) if metric.name == "loss" else metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class TorchTrainStep(TensorFlowTrainStep):
    """keras.io's PyTorch ``train_step``: ``loss.backward()``, then the optimizer."""

    def train_step(self, data):
        import torch

        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        trainable = list(self.trainable_weights)
        with torch.no_grad():
            self.optimizer.apply([v.value.grad for v in trainable], trainable)
        return self._updated_metrics(loss, y, y_pred)


class JaxTrainStep(keras.Model):
    """keras.io's JAX ``train_step(self, state, data)``: stateless, gradients by ``jax.value_and_grad``."""

    def train_step(self, state, data):
        import jax

        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y = data

        def loss_and_updates(trainable, non_trainable):
            y_pred, non_trainable = self.stateless_call(trainable, non_trainable, x, training=True)
            return ops.mean(ops.square(y - y_pred)), non_trainable

        (loss, non_trainable), gradients = jax.value_and_grad(loss_and_updates, has_aux=True)(trainable, non_trainable)
        trainable, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, gradients, trainable)
        return {"loss": loss}, (trainable, non_trainable, optimizer_variables, metrics_variables)


OWN_TRAIN_STEP = {"tensorflow": TensorFlowTrainStep, "jax": JaxTrainStep, "torch": TorchTrainStep}.get(
    keras.backend.backend(), ForwardingTrainStep
)


class BuildsItsGraph(keras.Model):
    """keras.io's Functional subclass that builds its own graph from an argument of its own."""

    def __init__(self, units, **kwargs):
        inputs = keras.Input((FEATURES,))
        hidden = layers.Dropout(0.25, seed=1)(layers.Dense(units, activation="relu")(inputs))
        super().__init__(inputs, layers.Dense(1)(hidden), **kwargs)
        self.units = units


class WeightedLoss(keras.Model):
    """Called with ``(inputs, outputs)`` and an argument of its own, which its ``compute_loss`` uses."""

    def __init__(self, inputs, outputs, weight=1.0, **kwargs):
        super().__init__(inputs, outputs, **kwargs)
        self.weight = weight

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return self.weight * super().compute_loss(x, y, y_pred, sample_weight, training)


class CustomSequential(keras.Sequential):
    def train_step(self, *args):
        return super().train_step(*args)


def graph(units: int = 3) -> tuple:
    inputs = keras.Input((FEATURES,))
    hidden = layers.Dropout(0.25, seed=1)(layers.Dense(units, activation="relu")(inputs))
    return inputs, layers.Dense(1)(hidden)


def frozen_base() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    outputs = layers.BatchNormalization()(layers.Dense(6, activation="relu")(inputs))
    base = keras.Model(inputs, outputs, name="base")
    base.trainable = False
    return base


def transfer_head(base: keras.Model) -> keras.Model:
    """keras.io's transfer learning: a frozen base called in inference mode, a new head."""
    inputs = keras.Input((FEATURES,))
    hidden = layers.Dropout(0.2, seed=2)(base(inputs, training=False))
    return ForwardingTrainStep(inputs, layers.Dense(1)(hidden), name="head")


def nested(outer_class) -> keras.Model:
    inner = ForwardingTrainStep(*graph(), name="inner")
    inputs = keras.Input((FEATURES,))
    return outer_class(inputs, layers.Dense(1)(inner(inputs)))


def idioms() -> dict[str, keras.Model]:
    """One trained model per idiom (its name, the key, says which)."""
    inputs, outputs = graph()
    models = {
        "positional": ForwardingTrainStep(*graph()),
        "keywords": ForwardingTrainStep(inputs=inputs, outputs=outputs, name="keywords"),
        "test_step": CustomTestStep(*graph()),
        "compute_loss": PenalizedLoss(*graph()),
        "own_train_step": OWN_TRAIN_STEP(*graph()),
        "builds_its_graph": BuildsItsGraph(5),
        "own_argument": WeightedLoss(*graph(), weight=3.0),
        "sequential": CustomSequential(
            [keras.Input((FEATURES,)), layers.Dense(3), layers.Dropout(0.25, seed=3), layers.Dense(1)]
        ),
        "nested_in_functional": nested(keras.Model),
        "nested_in_subclass": nested(CustomTestStep),
        "transfer": transfer_head(frozen_base()),
    }
    x, y = zoo.data()
    for model in models.values():
        model.compile(optimizer="adam", loss="mse", metrics=["mae"])
        model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    models["test_step"].evaluate(x, y, verbose=0)
    return models


def values(model: keras.Model) -> list[tuple[str, tuple, bytes]]:
    """(dtype, shape, bytes) of every variable: weights, seeds, optimizer (compile metrics restart at every fit)."""
    variables = [*model.variables, *model.optimizer.variables]
    arrays = [keras.ops.convert_to_numpy(v) for v in variables]
    return [(str(a.dtype), a.shape, a.tobytes()) for a in arrays]


def assert_same(name: str, original: keras.Model, restored: keras.Model) -> None:
    assert type(restored) is type(original), name
    a, b = values(original), values(restored)
    assert len(a) == len(b), f"{name}: {len(a)} variables vs {len(b)}"
    for i, (left, right) in enumerate(zip(a, b)):
        assert left == right, f"{name}: variable #{i} differs"


def train(model: keras.Model) -> None:
    model.fit(*zoo.data(), epochs=1, batch_size=8, shuffle=False, verbose=0)


def check_attributes(name: str, original: keras.Model, restored: keras.Model) -> None:
    """What is specific to an idiom beyond its variables."""
    if name != "builds_its_graph":  # rebuilt by its constructor: a new instance is named anew
        assert restored.name == original.name, (name, restored.name, original.name)
    if name == "own_argument":
        assert restored.weight == 3.0
    if name == "builds_its_graph":
        assert restored.units == 5
    if name == "transfer":
        base = restored.get_layer("base")
        assert not base.trainable and not base.trainable_weights
        assert len(restored.trainable_weights) == 2


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------

FRESH = """
    import pickle, sys
    import numpy as np
    import keras, keras_pickle

    directory = sys.argv[1]
    data = open(f"{directory}/models.pkl", "rb").read()
    import test_model_idioms as idioms  # safe mode resolves only what is imported

    expected = np.load(f"{directory}/before.npz")
    names = pickle.loads(open(f"{directory}/names.pkl", "rb").read())
    after = {}
    for loaded in (pickle.loads(data), keras_pickle.loads(data)):
        for name, model in loaded.items():
            assert type(model).__name__ == names[name][0], (name, type(model))
            if name != "builds_its_graph":
                assert model.name == names[name][1], (name, model.name)
            got = [raw for _, _, raw in idioms.values(model)]
            count = sum(1 for key in expected.files if key.startswith(name + "/"))
            assert got == [expected[f"{name}/{i}"].tobytes() for i in range(count)], name
    for name, model in loaded.items():
        idioms.train(model)
        for i, (_, _, raw) in enumerate(idioms.values(model)):
            after[f"{name}/{i}"] = np.frombuffer(raw, np.uint8)
    np.savez(f"{directory}/after.npz", **after)
    print("fresh ok")
"""


def test_every_idiom_loads_in_a_fresh_interpreter_and_deep_copies_training_on_identically(tmp_path):
    models = idioms()
    data = pickle.dumps(models)
    (tmp_path / "models.pkl").write_bytes(data)
    (tmp_path / "names.pkl").write_bytes(pickle.dumps({k: (type(m).__name__, m.name) for k, m in models.items()}))
    np.savez(
        tmp_path / "before.npz",
        **{
            f"{k}/{i}": np.frombuffer(raw, np.uint8)
            for k, m in models.items()
            for i, (_, _, raw) in enumerate(values(m))
        },
    )
    pythonpath = os.pathsep.join(map(str, (REPO_DIR, TESTS_DIR, HERE)))
    child = start_python(FRESH, str(tmp_path), env={"PYTHONPATH": pythonpath}, keras_imported=True)
    try:
        # Meanwhile, in this process: pickle and deepcopy, then one more epoch on the original and each copy.
        for name, restored in pickle.loads(data).items():
            assert_same(name, models[name], restored)
            check_attributes(name, models[name], restored)
        copies = copy.deepcopy(models)
        for name, model in models.items():
            assert_same(name, model, copies[name])
            check_attributes(name, model, copies[name])
            assert not {id(v) for v in model.variables} & {id(v) for v in copies[name].variables}, name
            train(model)
            train(copies[name])
            assert_same(name, model, copies[name])
        stdout = child.result(timeout=600)  # fails with its stderr where it exited with an error
    finally:
        child.kill()  # where this process failed first
    assert "fresh ok" in stdout
    after = np.load(tmp_path / "after.npz")
    for name, model in models.items():
        for i, (_, _, raw) in enumerate(values(model)):
            assert raw == after[f"{name}/{i}"].tobytes(), f"{name}: variable #{i} trained differently"


def test_symbolic_arguments_never_travel():
    """A Functional subclass's recorded inputs and outputs are its own graph's tensors: not in the payload."""
    model = ForwardingTrainStep(*graph())
    data = pickle.dumps(model)
    assert b"KerasTensor" not in data and b"keras.src.backend.common.keras_tensor" not in data
    restored = pickle.loads(data)
    assert restored.inputs[0] is not model.inputs[0]
    assert restored.layers[1]._inbound_nodes and restored.layers[1] is not model.layers[1]


def test_a_subclass_over_tensors_outside_its_graph_is_rebuilt_as_keras_does():
    """Inputs that are not ``keras.Input`` tensors: Keras clones them, so the recorded ones are not the model's."""
    inputs = keras.Input((FEATURES,))
    hidden = layers.Dense(3)(inputs)
    model = ForwardingTrainStep(hidden, layers.Dense(1)(hidden))
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert type(restored) is ForwardingTrainStep
        weights = [keras.ops.convert_to_numpy(v).tobytes() for v in restored.weights]
        assert weights == [keras.ops.convert_to_numpy(v).tobytes() for v in model.weights]
        x = np.ones((2, 3), "float32")
        assert np.array_equal(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)))


def local_subclass(register: bool) -> type:
    """scikeras's test suite: a ``keras.Model`` subclass defined inside the function that builds the model."""

    class CustomModelInFunction(keras.Model):
        pass

    if register:
        return keras.saving.register_keras_serializable(package="test_model_idioms")(CustomModelInFunction)
    return CustomModelInFunction


@pytest.mark.parametrize("register", [True, False], ids=["registered", "unregistered"])
def test_a_subclass_defined_inside_a_function(register):
    cls = local_subclass(register)
    model = cls(*graph())
    model.compile(optimizer="adam", loss="mse")
    train(model)
    copies = [copy.deepcopy(model), cloudpickle.loads(cloudpickle.dumps(model))]
    if register:
        copies.append(pickle.loads(pickle.dumps(model)))
    for restored in copies:
        assert_same("local", model, restored)
        assert type(restored).__name__ == "CustomModelInFunction"
    train(model)
    train(copies[0])
    assert_same("local", model, copies[0])


def test_a_subclass_built_before_install_takes_keras_functional_path():
    model = constructed_before_install(lambda: ForwardingTrainStep(*graph()))
    model.compile(optimizer="adam", loss="mse")
    train(model)
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert_same("before install", model, restored)
        assert restored.name == model.name


def test_check_reports_nothing_for_the_idioms():
    model = WeightedLoss(*graph(), weight=2.0)
    assert keras_pickle.check(model).ok


def test_each_instance_of_a_functional_subclass_keeps_its_own_arguments():
    """After its first construction the class is a Functional subclass, whose ``__new__`` drops the arguments."""
    first, second = WeightedLoss(*graph(), weight=2.0), WeightedLoss(*graph(), weight=5.0)
    for model, weight in ((first, 2.0), (second, 5.0)):
        for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
            assert type(restored) is WeightedLoss and restored.weight == weight


def test_a_graph_reference_to_no_tensor_is_a_corrupt_payload():
    from keras_pickle._capture import encode as _capture_encode
    from keras_pickle._keras3 import graph as _graph
    from keras_pickle._protocol import dialects
    from keras_pickle._rebuild import from_blueprint as _from_blueprint

    taken = _capture_encode.snapshot(ForwardingTrainStep(*graph()), dialects.KERAS3)
    config = json.loads(taken.config_json)
    config["config"][_graph.TENSORS_KEY][1][1] = ["no_such_layer", 0, 0]
    corrupt = dataclasses.replace(taken, config_json=json.dumps(config))
    with pytest.raises(keras_pickle.KerasUnpicklingError, match="names no tensor of its graph"):
        _from_blueprint.rebuild_with_state(corrupt, safe_mode=True)
