"""Nothing is lost: random small architectures round-trip every variable bit for bit.

Hypothesis draws an architecture (a plain description, printed when an example
fails): Sequential or Functional, optionally with a Sequential or Functional
nested inside, a stack of Dense, Conv1D, Embedding, LayerNormalization,
BatchNormalization, GRU, LSTM, Dropout and the custom ``zoo.Scale`` /
``zoo.Block`` layers, each with its own dtype (float32, float16, bfloat16,
mixed_float16, mixed_bfloat16, set through ``dtype=``; the property never
touches the global policy), and most often an optimizer (Adam, SGD with
momentum, RMSprop, Adam with EMA, LossScaleOptimizer), compiled only, built or
trained one step. Every variable, optimizer state included, is then set to
random non-default values and the model goes through ``pickle``; the copy must
hold the same variables, dtype policies and outputs, and train the same next
step.

A separate test sets the *global* policy to mixed_float16 or mixed_bfloat16
(so that layers take it without ``dtype=`` and Keras wraps the optimizer in a
LossScaleOptimizer under mixed_float16) and loads the copy under that policy
and under float32: the policies must travel in the payload, not come from the
loading process.

The budget is fixed and derandomized; ``KERAS_PICKLE_PROPERTY_EXAMPLES=500``
runs a longer, random session.
"""

from __future__ import annotations

import dataclasses
import os
import pickle

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_predictions, assert_same_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("KERAS_PICKLE_PROPERTY_EXAMPLES", "25"))
LONG_SESSION = "KERAS_PICKLE_PROPERTY_EXAMPLES" in os.environ

DTYPES = ("float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16")
TIME_STEPS, FEATURES, VOCABULARY = 5, 3, 10
# Layers for a (batch, features) input and for a (batch, time, features) one.
VECTOR_KINDS = ("dense", "layer_norm", "batch_norm", "dropout", "scale", "block")
SEQUENCE_KINDS = ("dense", "conv1d", "gru", "lstm", "layer_norm", "batch_norm", "dropout", "scale")
RESHAPING_KINDS = ("dense", "block", "conv1d", "gru", "lstm", "embedding")
OPTIMIZERS = (None, "adam", "sgd", "rmsprop", "adam_ema", "loss_scale")


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    kind: str
    dtype: str | None  # None: no ``dtype=``, the layer takes the global policy
    units: int  # output features of a reshaping kind; ignored by the others
    seed: int  # Dropout's seed


@dataclasses.dataclass(frozen=True)
class Architecture:
    inputs: str  # "vector" (float), "sequence" (float) or "tokens" (int, read by an Embedding)
    style: str  # "sequential" or "functional"
    layers: tuple[LayerSpec, ...]
    nested: tuple[int, int] | None  # layers[start:stop] form an inner model
    inner_style: str
    head_dtype: str | None  # None: the global policy
    optimizer: str | None  # None: not compiled
    optimizer_state: str  # "unbuilt" (compiled only), "built" (slots created) or "trained" (one step)
    seed: int


# --------------------------------------------------------------------------
# Strategy
# --------------------------------------------------------------------------


@st.composite
def layer_specs(draw, kinds: tuple[str, ...]) -> LayerSpec:
    return LayerSpec(
        kind=draw(st.sampled_from(kinds)),
        dtype=draw(st.sampled_from(DTYPES)),
        units=draw(st.integers(2, 4)),
        seed=draw(st.integers(0, 2**16)),
    )


@st.composite
def architectures(draw) -> Architecture:
    """A small random architecture; every draw builds and runs."""
    inputs = draw(st.sampled_from(("vector", "sequence", "tokens")))
    kinds = VECTOR_KINDS if inputs == "vector" else SEQUENCE_KINDS
    layers = draw(st.lists(layer_specs(kinds), min_size=1, max_size=4))
    if inputs == "tokens":
        layers = [draw(layer_specs(("embedding",))), *layers]
    nested = None
    if draw(st.booleans()):
        start = draw(st.integers(1 if inputs == "tokens" else 0, len(layers) - 1))
        nested = (start, draw(st.integers(start + 1, len(layers))))
    return Architecture(
        inputs=inputs,
        style=draw(st.sampled_from(("sequential", "functional"))),
        layers=tuple(layers),
        nested=nested,
        inner_style=draw(st.sampled_from(("sequential", "functional"))),
        head_dtype=draw(st.sampled_from(DTYPES)),
        optimizer=draw(st.sampled_from(OPTIMIZERS)),
        optimizer_state=draw(st.sampled_from(("unbuilt", "built", "trained"))),
        seed=draw(st.integers(0, 2**16)),
    )


# --------------------------------------------------------------------------
# Building and randomizing
# --------------------------------------------------------------------------


def make_layer(spec: LayerSpec) -> keras.layers.Layer:
    """A fresh layer for ``spec``."""
    dtype, units = spec.dtype, spec.units
    # TensorFlow's QR, which the default orthogonal initializer runs, has no bfloat16 kernel.
    recurrent = {"return_sequences": True, "recurrent_initializer": "glorot_uniform", "dtype": dtype}
    factories = {
        "dense": lambda: keras.layers.Dense(units, activation="tanh", dtype=dtype),
        "conv1d": lambda: keras.layers.Conv1D(units, 2, padding="same", dtype=dtype),
        "gru": lambda: keras.layers.GRU(units, **recurrent),
        "lstm": lambda: keras.layers.LSTM(units, **recurrent),
        "embedding": lambda: keras.layers.Embedding(VOCABULARY, units, dtype=dtype),
        "layer_norm": lambda: keras.layers.LayerNormalization(dtype=dtype),
        "batch_norm": lambda: keras.layers.BatchNormalization(dtype=dtype),
        "dropout": lambda: keras.layers.Dropout(0.3, seed=spec.seed, dtype=dtype),
        "scale": lambda: zoo.Scale(1.5, dtype=dtype),
        "block": lambda: zoo.Block(units, dtype=dtype),
    }
    return factories[spec.kind]()


def input_shape(arch: Architecture) -> tuple[int, ...]:
    return {"vector": (FEATURES,), "sequence": (TIME_STEPS, FEATURES), "tokens": (TIME_STEPS,)}[arch.inputs]


def shape_after(arch: Architecture, count: int) -> tuple[int, ...]:
    """The feature shape after the first ``count`` layers."""
    shape = input_shape(arch)
    for spec in arch.layers[:count]:
        if spec.kind == "embedding":
            shape = (*shape, spec.units)
        elif spec.kind in RESHAPING_KINDS:
            shape = (*shape[:-1], spec.units)
    return shape


def stack(layers: list, shape: tuple[int, ...], style: str, dtype: str = "float32") -> keras.Model:
    """A Sequential or a Functional applying ``layers`` in order to an input of ``shape``."""
    inputs = keras.Input(shape, dtype=dtype)
    if style == "sequential":
        return keras.Sequential([inputs, *layers])
    x = inputs
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def build(arch: Architecture) -> keras.Model:
    """The model ``arch`` describes, with a Dense(1) head (after pooling a sequence)."""
    layers = [make_layer(spec) for spec in arch.layers]
    if arch.nested is not None:
        start, stop = arch.nested
        inner = stack(layers[start:stop], shape_after(arch, start), arch.inner_style)
        layers[start:stop] = [inner]
    if arch.inputs != "vector":
        layers.append(keras.layers.GlobalAveragePooling1D(dtype=arch.head_dtype))
    layers.append(keras.layers.Dense(1, dtype=arch.head_dtype))
    return stack(layers, input_shape(arch), arch.style, dtype="int32" if arch.inputs == "tokens" else "float32")


def sample(arch: Architecture, n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A fixed batch ``(x, y)`` for ``arch``."""
    rng = np.random.default_rng(arch.seed)
    if arch.inputs == "tokens":
        x = rng.integers(0, VOCABULARY, size=(n, TIME_STEPS)).astype("int32")
    else:
        x = rng.normal(size=(n, *input_shape(arch))).astype("float32")
    return x, rng.normal(size=(n, 1)).astype("float32")


def make_optimizer(name: str) -> keras.optimizers.Optimizer:
    return {
        "adam": lambda: keras.optimizers.Adam(1e-2),
        "sgd": lambda: keras.optimizers.SGD(1e-2, momentum=0.9),
        "rmsprop": lambda: keras.optimizers.RMSprop(1e-2),
        "adam_ema": lambda: keras.optimizers.Adam(1e-2, use_ema=True),
        "loss_scale": lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2)),
    }[name]()


def all_variables(model: keras.Model) -> list:
    optimizer = getattr(model, "optimizer", None)
    return list(model.variables) + (list(optimizer.variables) if optimizer is not None else [])


def randomize(model: keras.Model, seed: int) -> None:
    """Give every variable, optimizer state included, random values that no initializer gives.

    Floats are drawn from [0.25, 1) (positive, so that variances stay valid),
    integers (seed-generator states, iteration counters) from [1, 1000).
    """
    rng = np.random.default_rng(seed)
    for variable in all_variables(model):
        dtype = keras.backend.standardize_dtype(variable.dtype)
        shape = tuple(variable.shape)
        if "float" in dtype:
            value = rng.uniform(0.25, 1.0, size=shape).astype("float32")
        else:
            value = rng.integers(1, 1000, size=shape)
        variable.assign(keras.ops.cast(value, dtype))


def prepare(arch: Architecture) -> keras.Model:
    """Build, compile (eager: no tracing) and bring the optimizer to its state, then randomize."""
    model = build(arch)
    if arch.optimizer is not None:
        model.compile(optimizer=make_optimizer(arch.optimizer), loss="mse", run_eagerly=True)
        if arch.optimizer_state == "trained":
            model.train_on_batch(*sample(arch))
        elif arch.optimizer_state == "built":
            model.optimizer.build(model.trainable_variables)
    randomize(model, arch.seed)
    return model


# --------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------


def raw(tensor) -> tuple[str, tuple, bytes]:
    """dtype, shape and bytes of a tensor or variable."""
    array = np.asarray(keras.ops.convert_to_numpy(tensor))
    return str(array.dtype), array.shape, array.tobytes()


def policies(model: keras.Model) -> list[tuple[str, str]]:
    return [(type(layer).__name__, layer.dtype_policy.name) for layer in model._flatten_layers(include_self=True)]


def assert_same_model(original: keras.Model, restored: keras.Model, arch: Architecture) -> None:
    """Same variables (dtype, shape, bytes), policies, optimizer and outputs, then the same training step."""
    assert_same_state(original, restored)
    assert policies(original) == policies(restored)
    x, y = sample(arch)
    assert raw(original(x, training=False)) == raw(restored(x, training=False)), "inference outputs differ"
    # Training mode draws Dropout masks from the seed state and updates BatchNormalization statistics.
    assert raw(original(x, training=True)) == raw(restored(x, training=True)), "training-mode outputs differ"
    if arch.optimizer is not None:
        assert type(restored.optimizer) is type(original.optimizer)
        assert restored.optimizer.built == original.optimizer.built
        original.train_on_batch(x, y)
        restored.train_on_batch(x, y)
    assert_same_state(original, restored)


# --------------------------------------------------------------------------
# The property
# --------------------------------------------------------------------------


@pytest.mark.timeout(60 + 3 * EXAMPLES)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not LONG_SESSION,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(arch=architectures(), protocol=st.sampled_from((2, 5)))
def test_every_variable_round_trips_bit_exact(arch: Architecture, protocol: int):
    original = prepare(arch)
    restored = pickle.loads(pickle.dumps(original, protocol=protocol))
    assert_same_model(original, restored, arch)


def test_randomize_leaves_no_default_values():
    """The property is only as strong as the values it compares: none may be an initializer's."""
    arch = Architecture(
        inputs="sequence",
        style="functional",
        layers=(LayerSpec("batch_norm", "mixed_float16", 2, 0), LayerSpec("dropout", "bfloat16", 2, 3)),
        nested=None,
        inner_style="sequential",
        head_dtype="float16",
        optimizer="adam",
        optimizer_state="built",
        seed=1,
    )
    model = prepare(arch)
    for variable in all_variables(model):
        value = np.asarray(keras.ops.convert_to_numpy(variable)).astype("float64")
        assert np.all(value != 0) and np.all(value != 1), variable.path


# --------------------------------------------------------------------------
# The global mixed-precision policy
# --------------------------------------------------------------------------


def global_policy_architecture(style: str) -> Architecture:
    """Dense, LayerNormalization, BatchNormalization, Dropout, zoo.Scale and a Dense head, none given ``dtype=``."""
    kinds = ("dense", "layer_norm", "batch_norm", "dropout", "scale")
    return Architecture(
        inputs="vector",
        style=style,
        layers=tuple(LayerSpec(kind, None, 4, 7) for kind in kinds),
        nested=None,
        inner_style="sequential",
        head_dtype=None,
        optimizer="adam",
        optimizer_state="trained",
        seed=3,
    )


@pytest.mark.parametrize("loading_policy", ["same", "float32"], ids=["load-under-same", "load-under-float32"])
@pytest.mark.parametrize("style", ["sequential", "functional"])
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_global_mixed_policy_round_trips(policy: str, style: str, loading_policy: str):
    """A model made under a global mixed policy comes back with it, whatever the global policy is at loading.

    Its layers and the model itself take the policy from the global state when
    they are made, and under mixed_float16 ``compile`` wraps the Adam optimizer
    in a LossScaleOptimizer. The copy, loaded under the same global policy or
    under float32, must carry the same policies on every layer and on the
    model, keep the optimizer's type and every variable bit for bit, predict
    the same outputs in the same compute dtype, and take the same next
    training step. The global policy is restored whatever happens.
    """
    previous = keras.mixed_precision.global_policy()
    arch = global_policy_architecture(style)
    compute_dtype = policy.removeprefix("mixed_")
    try:
        keras.mixed_precision.set_global_policy(policy)
        original = prepare(arch)  # compiled, one step trained, then every variable randomized
        # Preconditions: the global policy reached every layer, and Keras wrapped the optimizer under mixed_float16.
        assert {name for _, name in policies(original)} == {policy}
        wrapped = isinstance(original.optimizer, keras.optimizers.LossScaleOptimizer)
        assert wrapped == (policy == "mixed_float16")
        payload = pickle.dumps(original, protocol=pickle.HIGHEST_PROTOCOL)

        keras.mixed_precision.set_global_policy(policy if loading_policy == "same" else loading_policy)
        restored = pickle.loads(payload)
        assert policies(restored) == policies(original)
        assert restored.dtype_policy.name == policy
        assert isinstance(restored.optimizer, keras.optimizers.LossScaleOptimizer) == wrapped
        x, _ = sample(arch)
        assert keras.backend.standardize_dtype(restored(x).dtype) == compute_dtype
        assert_same_predictions(original, restored, x)
        trainable_before = [raw(v) for v in original.trainable_variables]
        assert_same_model(original, restored, arch)  # all variables, policies, outputs, then one more step
        trainable_after = [raw(v) for v in original.trainable_variables]
        # The step was applied (a LossScaleOptimizer skips steps whose gradients overflow), not skipped on both.
        assert all(a != b for a, b in zip(trainable_before, trainable_after))
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert keras.mixed_precision.global_policy().name == previous.name
