"""Models written as the keras.io examples write them (importable by reference from a fresh process).

None defines ``get_config()``: keras_pickle records their constructor (and
``compile()``) arguments when ``install()`` ran before they were built. The
training steps use ``tf.GradientTape``, as keras.io's TensorFlow versions do.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

LATENT = 2
FEATURES = 8


def data(n: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(n, FEATURES)).astype("float32")


class Sampling(layers.Layer):
    """keras.io VAE: draws z from (z_mean, z_log_var) with a seeded generator."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        epsilon = keras.random.normal(ops.shape(z_mean), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


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


class VAE(keras.Model):
    """keras.io "Variational AutoEncoder": models as constructor arguments, Mean trackers, custom train_step."""

    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.kl_loss_tracker]

    def train_step(self, data):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = ops.mean(ops.sum(keras.losses.binary_crossentropy(data, reconstruction), axis=-1))
            kl_loss = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            kl_loss = ops.mean(ops.sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {m.name: m.result() for m in self.metrics}


def vae() -> VAE:
    model = VAE(encoder(), decoder())
    model.compile(optimizer=keras.optimizers.Adam())
    return model


class GAN(keras.Model):
    """keras.io "DCGAN" pattern: two models, compile(d_optimizer, g_optimizer, loss_fn), custom train_step."""

    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real):
        import tensorflow as tf

        batch = ops.shape(real)[0]
        z = keras.random.normal((batch, self.latent_dim), seed=self.seed_generator)
        combined = ops.concatenate([self.generator(z), real], axis=0)
        labels = ops.concatenate([ops.ones((batch, 1)), ops.zeros((batch, 1))], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(combined))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        z = keras.random.normal((batch, self.latent_dim), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(ops.zeros((batch, 1)), self.discriminator(self.generator(z)))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


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
