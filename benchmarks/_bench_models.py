"""The models benchmarks/bench.py measures, and what runs on each.

Every model is built from a JSON-able spec (:func:`build`), which is also how a
memory child process rebuilds it. ``quick`` swaps in a tiny model of the same
kind of problem (a smoke test, not a measurement).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import keras
import numpy as np

layers = keras.layers


def mlp3(quick: bool = False) -> keras.Model:
    """A 3-layer MLP (32 -> 64 -> 64 -> 10) compiled with Adam, after one ``fit`` step (slots exist)."""
    model = keras.Sequential(
        [keras.Input((32,)), layers.Dense(64, activation="relu"), layers.Dense(64, activation="relu"), layers.Dense(10)]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 32)).astype("float32"), rng.normal(size=(32, 10)).astype("float32")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    return model


def mobilenetv3small(quick: bool = False) -> keras.Model:
    """``keras.applications.MobileNetV3Small(input_shape=(96, 96, 3), weights=None)``."""
    if quick:
        return tiny_convnet(squeeze_excite=False)
    return keras.applications.MobileNetV3Small(input_shape=(96, 96, 3), weights=None)


def efficientnetb0(quick: bool = False) -> keras.Model:
    """``keras.applications.EfficientNetB0(weights=None)`` (224 x 224 inputs)."""
    if quick:
        return tiny_convnet(squeeze_excite=True)
    return keras.applications.EfficientNetB0(weights=None)


def resnet50(quick: bool = False) -> keras.Model:
    """``keras.applications.ResNet50(weights=None)``, or a tiny residual net."""
    if not quick:
        return keras.applications.ResNet50(weights=None)
    inputs = keras.Input((16, 16, 3))
    x = layers.Conv2D(8, 3, padding="same")(inputs)
    for _ in range(2):
        y = layers.Conv2D(8, 3, padding="same")(x)
        y = layers.BatchNormalization()(y)
        y = layers.Activation("relu")(y)
        x = layers.Add()([x, y])
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(10, activation="softmax")(x))


def dense100mb(quick: bool = False) -> keras.Model:
    """6 x Dense(2048) on 2048 inputs (96 MiB of weights), Adam, trained one step (288 MiB with slots)."""
    width = 64 if quick else 2048
    model = keras.Sequential([keras.Input((width,))] + [layers.Dense(width, activation="relu") for _ in range(6)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    x = np.random.default_rng(0).normal(size=(32, width)).astype("float32")
    model.train_on_batch(x, x)
    return model


def deep150(quick: bool = False) -> keras.Model:
    """A Sequential of 150 x Dense(32) on 32 inputs."""
    return deep_mlp(15 if quick else 150)


def tiny_convnet(*, squeeze_excite: bool) -> keras.Model:
    """The layer kinds MobileNet and EfficientNet use (rescaling, depthwise convolutions, batch
    normalization, squeeze-and-excite, dropout), a few of each: the quick stand-in for both."""
    inputs = keras.Input((16, 16, 3))
    x = layers.Rescaling(1 / 255)(inputs)
    x = layers.Conv2D(8, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    y = layers.DepthwiseConv2D(3, padding="same")(x)
    y = layers.BatchNormalization()(y)
    y = layers.ReLU()(y)
    if squeeze_excite:
        s = layers.GlobalAveragePooling2D(keepdims=True)(y)
        s = layers.Conv2D(8, 1, activation="sigmoid")(s)
        y = layers.Multiply()([y, s])
    x = layers.Add()([x, y])
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    return keras.Model(inputs, layers.Dense(10, activation="softmax")(x))


def deep_mlp(depth: int) -> keras.Model:
    return keras.Sequential([keras.Input((32,))] + [layers.Dense(32) for _ in range(depth)])


def wide_mlp(params: int) -> keras.Model:
    """4 Dense(w) layers on w inputs, w chosen so the model has about ``params`` parameters."""
    width = max(2, int(round((params / 4) ** 0.5)))
    return keras.Sequential([keras.Input((width,))] + [layers.Dense(width) for _ in range(4)])


@dataclasses.dataclass(frozen=True)
class Plan:
    """What bench.py measures on one model."""

    build: Callable[[bool], keras.Model]
    floor_dumps: bool  # dumps vs the floor, and the per-phase profile of keras_pickle's dumps
    floor_loads: bool  # loads and deepcopy vs the floor (from_config + set_weights)
    vs_keras: tuple[str, ...]  # ops timed against Keras's own pickling


# In the order they run. The floors and Keras's own pickling of one model run
# on one build of it.
LOADS_IN_A_ROW = "10 loads in a row"  # an op of bench.py's "vs Keras" section (bench.loads_in_a_row)

PLANS: dict[str, Plan] = {
    "mlp3": Plan(mlp3, floor_dumps=True, floor_loads=False, vs_keras=("dumps", "loads", "dumps+loads")),
    "mobilenetv3small": Plan(mobilenetv3small, floor_dumps=True, floor_loads=True, vs_keras=()),
    "efficientnetb0": Plan(efficientnetb0, floor_dumps=False, floor_loads=True, vs_keras=()),
    "resnet50": Plan(resnet50, floor_dumps=True, floor_loads=True, vs_keras=("dumps", "loads")),
    "deep150": Plan(deep150, floor_dumps=False, floor_loads=True, vs_keras=("dumps", "loads")),
    "dense100mb": Plan(
        dense100mb, floor_dumps=True, floor_loads=False, vs_keras=("dumps", "loads", LOADS_IN_A_ROW, "deepcopy")
    ),
}

GIB = 2**30
# The sweeps: parameters (4 wide Dense layers, float32: 268,435,456 parameters is 1 GiB) and depth.
SWEEP_PARAMS = [1_000_000, 4_000_000, 16_000_000, 64_000_000, GIB // 4]
SWEEP_DEPTH = [10, 30, 100, 300, 500]
QUICK_SWEEP_PARAMS = [10_000, 30_000, 100_000]
QUICK_SWEEP_DEPTH = [3, 10, 30]


def sweep_specs(quick: bool) -> list[tuple[str, dict]]:
    """``(axis, spec)`` of every sweep point."""
    points = [("params", {"kind": "wide", "params": p}) for p in (QUICK_SWEEP_PARAMS if quick else SWEEP_PARAMS)]
    return points + [("depth", {"kind": "depth", "depth": d}) for d in (QUICK_SWEEP_DEPTH if quick else SWEEP_DEPTH)]


def build(spec: dict) -> keras.Model:
    """A model from a JSON-able spec: ``{"kind": name, "quick": bool}``, ``wide`` or ``depth``."""
    kind = spec["kind"]
    if kind in PLANS:
        return PLANS[kind].build(spec.get("quick", False))
    if kind == "wide":
        return wide_mlp(spec["params"])
    if kind == "depth":
        return deep_mlp(spec["depth"])
    raise ValueError(f"Unknown model kind {kind!r}")


def tiny_spec(spec: dict) -> dict:
    """A small model of the same kind, to warm code paths up."""
    if spec["kind"] in PLANS:
        return {"kind": spec["kind"], "quick": True}
    if spec["kind"] == "wide":
        return {"kind": "wide", "params": 10_000}
    return {"kind": "depth", "depth": 3}


def state_variables(model: keras.Model) -> list:
    """Every variable keras_pickle pickles for these models: the model's and its optimizer's."""
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        variables += list(optimizer.variables)
    return variables


def nbytes(variables) -> int:
    return int(sum(np.dtype(v.dtype).itemsize * int(np.prod(v.shape)) for v in variables))


def describe(model: keras.Model) -> dict:
    return {
        "params": int(model.count_params()),
        "weight_bytes": nbytes(model.variables),
        "state_bytes": nbytes(state_variables(model)),
        "n_layers": len(model.layers),
    }


def sample_batch(model: keras.Model, size: int = 2) -> np.ndarray:
    """A fixed batch of inputs (outputs are compared on it)."""
    shape = tuple(model.inputs[0].shape[1:])
    return np.random.default_rng(1).uniform(0.0, 1.0, size=(size, *shape)).astype("float32")


def outputs(model: keras.Model, batch: np.ndarray) -> np.ndarray:
    return keras.ops.convert_to_numpy(model(batch, training=False))
