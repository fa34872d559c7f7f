"""Every model the benchmarks measure; tests/kerasio.py imports the keras.io classes from here.

Importing it imports only Keras and numpy (TensorFlow, KerasHub and tf-keras: the builders that need them).
Classes live at module level, so a fresh process finds them by reference (``benchmarks.models.VAE``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import keras
import numpy as np
from keras import layers, ops

BATCH = 4  # the zoo's batch


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# bench, checksum, joblib_parallel, tf_keras_pickling: built from a JSON-able spec (a memory child rebuilds it)


def dense_net(features: int, widths, k=keras, fitted: bool = True):
    """Dense layers (relu but the last) of ``k`` (keras or tf_keras); ``fitted``: Adam, one step (slots exist)."""
    last = len(widths) - 1
    dense = [k.layers.Dense(w, activation="relu" if i < last else None) for i, w in enumerate(widths)]
    model = k.Sequential([k.Input((features,)), *dense])
    if fitted:
        model.compile(optimizer=k.optimizers.Adam(1e-3), loss="mse")
        x = rng().normal(size=(32, features)).astype("float32")
        model.fit(x, np.zeros((32, widths[-1]), "float32"), batch_size=32, epochs=1, verbose=0)
    return model


def tiny_convnet(*, squeeze_excite: bool = False, residual_only: bool = False) -> keras.Model:
    """The layer kinds MobileNet, EfficientNet (squeeze-and-excite) or ResNet use, a few of each."""
    inputs = keras.Input((16, 16, 3))
    x = layers.Conv2D(8, 3, padding="same")(inputs if residual_only else layers.Rescaling(1 / 255)(inputs))
    if residual_only:
        for _ in range(2):
            y = layers.Conv2D(8, 3, padding="same")(x)
            x = layers.Add()([x, layers.Activation("relu")(layers.BatchNormalization()(y))])
    else:
        x = layers.BatchNormalization()(x)
        y = layers.ReLU()(layers.BatchNormalization()(layers.DepthwiseConv2D(3, padding="same")(x)))
        if squeeze_excite:
            s = layers.Conv2D(8, 1, activation="sigmoid")(layers.GlobalAveragePooling2D(keepdims=True)(y))
            y = layers.Multiply()([y, s])
        x = layers.Add()([x, y])
    x = layers.GlobalAveragePooling2D()(x)
    x = x if residual_only else layers.Dropout(0.2)(x)
    return keras.Model(inputs, layers.Dense(10, activation="softmax")(x))


apps = keras.applications
BENCH = {  # bench's models, in the order it measures them: name -> quick -> model
    "mlp3": lambda quick: dense_net(32, (64, 64, 10)),  # 32 -> 64 -> 64 -> 10, Adam, one fit step
    "mobilenetv3small": lambda q: tiny_convnet() if q else apps.MobileNetV3Small(input_shape=(96, 96, 3), weights=None),
    "efficientnetb0": lambda q: tiny_convnet(squeeze_excite=True) if q else apps.EfficientNetB0(weights=None),
    "resnet50": lambda q: tiny_convnet(residual_only=True) if q else apps.ResNet50(weights=None),
    "deep150": lambda q: dense_net(32, (32,) * (15 if q else 150), fitted=False),
    "dense100mb": lambda q: dense_net(64 if q else 2048, (64 if q else 2048,) * 6),  # 96 MiB, 288 MiB with slots
}
TF_KERAS = {"small": (16, (32, 32, 1)), "100mb": (2560, (2560,) * 4)}  # tf-keras models: input features, widths


def build(spec: dict):
    """A model from ``{"kind": a BENCH name, "quick": bool}``, ``{"kind": "wide", "params": n}`` (4 equal Dense,
    no optimizer), ``{"kind": "depth", "depth": n}`` (n x Dense(32)) or ``{"kind": "tf_keras", "name": ...}``."""
    if spec["kind"] == "wide":
        width = max(2, int(round((spec["params"] / 4) ** 0.5)))
        return dense_net(width, (width,) * 4, fitted=False)
    if spec["kind"] == "depth":
        return dense_net(32, (32,) * spec["depth"], fitted=False)
    if spec["kind"] == "tf_keras":
        import tf_keras

        return dense_net(*TF_KERAS[spec["name"]], k=tf_keras)
    return BENCH[spec["kind"]](spec.get("quick", False))


def tiny_spec(spec: dict) -> dict:
    """A small model of the same kind, to warm code paths up."""
    tiny = {"wide": {"params": 10_000}, "depth": {"depth": 3}, "tf_keras": {"name": "small"}}
    return {"kind": spec["kind"], **tiny.get(spec["kind"], {"quick": True})}


# keras.io idioms: tests/kerasio.py builds the VAE and the GAN the tests and the zoo use from these classes


class Sampling(layers.Layer):
    """keras.io VAE: z = mean + exp(log_var / 2) * epsilon, drawn with a seeded generator."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        return z_mean + ops.exp(0.5 * z_log_var) * keras.random.normal(ops.shape(z_mean), seed=self.seed_generator)


class VAE(keras.Model):
    """keras.io's VAE: models as constructor arguments, Mean trackers, a tf.GradientTape train_step, no get_config."""

    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder, self.decoder = encoder, decoder
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
            bce = keras.losses.binary_crossentropy(data, self.decoder(z))
            reconstruction_loss = ops.mean(ops.sum(bce, axis=tuple(range(1, len(bce.shape)))))  # per sample
            kl_loss = ops.mean(ops.sum(-0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var)), axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        for tracker, value in zip(self.metrics, (total_loss, reconstruction_loss, kl_loss)):
            tracker.update_state(value)
        return {m.name: m.result() for m in self.metrics}


class GAN(keras.Model):
    """keras.io's DCGAN: two models, ``compile(d_optimizer, g_optimizer, loss_fn)``, a ``tf.GradientTape`` train_step;
    the loss trackers made in ``__init__``, not ``compile()``, so that a model compiled again holds one pair."""

    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator, self.generator, self.latent_dim = discriminator, generator, latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        import tensorflow as tf

        batch_size = ops.shape(real_images)[0]
        latent = keras.random.normal((batch_size, self.latent_dim), seed=self.seed_generator)
        combined = ops.concatenate([self.generator(latent), real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)
        # keras.io's label noise is an unseeded tf.random.uniform: seeded here, so a step can be reproduced
        labels += 0.05 * keras.random.uniform(ops.shape(labels), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(combined))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        latent = keras.random.normal((batch_size, self.latent_dim), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(ops.zeros((batch_size, 1)), self.discriminator(self.generator(latent)))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


# The zoo: make() -> (model ready to pickle, x, y), built while keras_pickle is installed


def fit_step(model, x, y) -> None:
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


def dataset_step(model, x, y) -> None:  # Keras's array adapter refuses strings; keras.io uses tf.data
    import tensorflow as tf

    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), epochs=1, verbose=0)


def trained(model, x, y, step=fit_step, **compile_kwargs):
    model.compile(optimizer=keras.optimizers.Adam(1e-3), **compile_kwargs)
    step(model, x, y)
    return model, x, y


class Skipped(Exception):
    """A model not measured in this run (over --max-params)."""


def application(name: str, max_params: int):
    """``keras.applications.<name>``, the smallest of 32, 75 and 224 pixels it accepts, 3 classes, eager
    (tracing EfficientNetB7's train step takes ~100 s on 2 cores, an eager step ~10 s; the state is the same)."""
    for size in (32, 75, 224):
        try:
            model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classes=3)
            break
        except ValueError:  # below this constructor's minimum size
            continue
    if model.count_params() > max_params:
        raise Skipped(f"{model.count_params():,} parameters > --max-params {max_params:,}")
    x = rng().uniform(0, 255, (BATCH, size, size, 3)).astype("float32")
    return trained(model, x, np.arange(BATCH) % 3, loss="sparse_categorical_crossentropy", run_eagerly=True)


def backbone(cls: str, **kwargs):
    import keras_hub

    model = getattr(keras_hub.models, cls)(**kwargs)
    if cls == "ViTBackbone":
        x = rng().normal(size=(BATCH, *kwargs["image_shape"])).astype("float32")
    else:
        x = {"token_ids": rng().integers(1, 64, (BATCH, 8)), "padding_mask": np.ones((BATCH, 8), "int32")}
        x.update({"segment_ids": np.zeros((BATCH, 8), "int32")} if cls == "BertBackbone" else {})
    return trained(model, x, keras.tree.map_structure(lambda t: np.zeros(t.shape, "float32"), model(x)), loss="mse")


WORDS = "the quick brown fox jumps over a lazy dog".split()
TEXTS = np.array(["the quick brown fox", "jumps over a lazy dog", "the lazy fox", "a quick dog jumps"])


def bert_classifier(used: bool):
    import keras_hub

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=8)
    net = keras_hub.models.BertBackbone(len(vocabulary), 2, 2, 16, 32, max_sequence_length=8)
    model = keras_hub.models.BertTextClassifier(net, num_classes=2, preprocessor=preprocessor)
    labels = np.array([0, 1, 0, 1])
    if used:
        model.predict(TEXTS, batch_size=BATCH, verbose=0)
        fit_step(model, TEXTS, labels)
    return model, TEXTS, labels


def gpt2_causal_lm(used: bool, top_k: bool = False):
    import keras_hub

    vocabulary, merges = {"<|endoftext|>": 0}, []
    for word in WORDS + ["Ġ" + w for w in WORDS]:  # merges that build each word letter by letter
        for i, char in enumerate(word):
            vocabulary.setdefault(char, len(vocabulary))
            vocabulary.setdefault(word[: i + 1], len(vocabulary))
            merges += [f"{word[:i]} {char}"] if i and f"{word[:i]} {char}" not in merges else []
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=8)
    net = keras_hub.models.GPT2Backbone(len(vocabulary), 2, 2, 16, 32, max_sequence_length=16)
    model = keras_hub.models.GPT2CausalLM(net, preprocessor=preprocessor)
    if top_k:  # as the KerasHub guides do: a sampler object, not a name
        model.compile(sampler=keras_hub.samplers.TopKSampler(k=2, seed=1))
    if used:
        model.predict(TEXTS, batch_size=BATCH, verbose=0)
        fit_step(model, TEXTS, None)
        model.generate("the quick", max_length=8)
    return model, TEXTS, None


def stateful_lstm():
    model = keras.Sequential([keras.Input(batch_shape=(BATCH, 5, 3)), layers.LSTM(8, stateful=True), layers.Dense(1)])
    return trained(model, rng().normal(size=(BATCH, 5, 3)).astype("float32"), np.ones((BATCH, 1)), loss="mse")


def adapted_preprocessing():
    x = {"num": rng().normal(size=(BATCH, 3)).astype("float32"), "age": np.array([[18.0], [35.0], [52.0], [70.0]])}
    x["city"] = np.array([["paris"], ["lima"], ["oslo"], ["paris"]])
    normalization, discretization, lookup = layers.Normalization(), layers.Discretization(4), layers.StringLookup()
    for layer, key in ((normalization, "num"), (discretization, "age"), (lookup, "city")):
        layer.adapt(x[key])
    shapes = [("num", 3, None), ("age", 1, None), ("city", 1, "string")]
    inputs = {k: keras.Input((n,), name=k, dtype=d) for k, n, d in shapes}
    ages = layers.CategoryEncoding(4, output_mode="one_hot")(discretization(inputs["age"]))
    cities = layers.Flatten()(layers.Embedding(lookup.vocabulary_size(), 4)(lookup(inputs["city"])))
    h = layers.Concatenate()([normalization(inputs["num"]), ages, cities])
    return trained(keras.Model(inputs, layers.Dense(1)(h)), x, np.ones((BATCH, 1)), dataset_step, loss="mse")


def lora_dense():
    """Dense(16) -> Dense(3), LoRA on the first layer (the int8 one is tests/sweep_models.py's)."""
    model = keras.Sequential([keras.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(3)])
    model.layers[0].enable_lora(rank=2)
    x = rng().normal(size=(BATCH, 8)).astype("float32")
    return trained(model, x, np.arange(BATCH) % 3, loss="sparse_categorical_crossentropy")


# behaviour, and the model modules the tests own


def custom_layer_model(custom: bool = True) -> keras.Model:
    """Dense(8), Dropout, then an unregistered custom layer (``keras_pickle.demo.Gate``) or a Dense; Adam, one fit."""
    from keras_pickle.demo import Gate

    keras.utils.set_random_seed(0)
    last = Gate() if custom else layers.Dense(8)
    model = keras.Sequential([keras.Input((4,)), layers.Dense(8), layers.Dropout(0.3, seed=1), last])
    model.compile("adam", "mse")
    model.fit(rng().normal(size=(16, 4)).astype("float32"), np.ones((16, 8), "float32"), verbose=0)
    return model


TESTS = Path(__file__).resolve().parent.parent / "tests"


def from_tests(name: str):
    """``tests/<name>.py``, imported under its own name (its classes pickle by that reference; a child that loads
    them gets tests/ on its path from ``common.child(..., tests=True)``)."""
    if str(TESTS) not in sys.path:
        sys.path.append(str(TESTS))
    return importlib.import_module(name)
