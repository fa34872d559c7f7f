"""Small models written as the keras.io examples write them (importable by reference from a fresh process).

The classes (``Sampling``, ``VAE``, ``GAN``) are the benchmarks' (``benchmarks/models.py``, the one
model collection); ``python -m benchmarks model_zoo`` measures the VAE and GAN built here. None
defines ``get_config()``: keras_pickle records their constructor (and ``compile()``) arguments when
``install()`` ran before they were built. The training steps use ``tf.GradientTape``, as keras.io's
TensorFlow versions do.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers

from benchmarks.models import GAN, VAE, Sampling

__all__ = ["GAN", "VAE", "Sampling", "data", "decoder", "encoder", "every_bytes", "every_value", "gan", "vae"]

LATENT = 2
FEATURES = 8


def data(n: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(n, FEATURES)).astype("float32")


def encoder() -> keras.Model:
    inputs = keras.Input(shape=(FEATURES,))
    x = layers.Dense(16, activation="relu")(inputs)
    z_mean = layers.Dense(LATENT, name="z_mean")(x)
    z_log_var = layers.Dense(LATENT, name="z_log_var")(x)
    return keras.Model(inputs, [z_mean, z_log_var, Sampling()([z_mean, z_log_var])], name="encoder")


def decoder() -> keras.Model:
    inputs = keras.Input(shape=(LATENT,))
    x = layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, layers.Dense(FEATURES, activation="sigmoid")(x), name="decoder")


def vae() -> VAE:
    model = VAE(encoder(), decoder())
    model.compile(optimizer=keras.optimizers.Adam())
    return model


def gan() -> GAN:
    discriminator = keras.Sequential(
        [keras.Input((FEATURES,)), layers.Dense(8, activation="relu"), layers.Dense(1)], name="discriminator"
    )
    generator = keras.Sequential([keras.Input((LATENT,)), layers.Dense(FEATURES)], name="generator")
    model = GAN(discriminator, generator, LATENT)
    model.compile(
        d_optimizer=keras.optimizers.Adam(1e-3),
        g_optimizer=keras.optimizers.Adam(2e-3),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


def every_value(model: keras.Model) -> list[tuple[str, bytes]]:
    """Every variable the model holds, metrics' and every optimizer's included, as (path, bytes)."""
    variables = list(model.variables) + list(model.metrics_variables)
    for name in ("optimizer", "d_optimizer", "g_optimizer"):
        optimizer = getattr(model, name, None)
        if optimizer is not None:
            variables += list(optimizer.variables)
    return [(v.path, keras.ops.convert_to_numpy(v).tobytes()) for v in variables]


def every_bytes(model: keras.Model) -> list[bytes]:
    """:func:`every_value` without the paths (Keras numbers them per process)."""
    return [raw for _path, raw in every_value(model)]
