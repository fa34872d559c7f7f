"""Real models through Keras's own pickling and keras_pickle, each loaded in a fresh process.

The zoo, built while keras_pickle is installed (it records constructor arguments then) and
trained one step on a seeded batch so optimizer slots exist (KerasHub tasks "fresh" are not):
every ``keras.applications`` constructor, found programmatically (``weights=None``, the
smallest of 32, 75 and 224 pixels it accepts, 3 classes, Adam, ``run_eagerly=True``: tracing
EfficientNetB7's train step takes ~100 s on 2 cores, an eager step ~10 s, and the pickled
state is the same); tiny KerasHub backbones (Adam, MSE) and tasks built from constructor
arguments and in-memory vocabularies, fresh and after use; keras.io idioms (the VAE, the
DCGAN, a stateful LSTM, adapted preprocessing layers, int8-quantized and LoRA Dense models); the
second sweep (``tests/sweep_models.py``, shared with ``tests/test_sweep.py``): keras.io's text
Transformer and ViT (layers whose constructors take no ``**kwargs``), a bidirectional GRU with
dropout after Masking, a dict-input two-output model, AdamW with EMA and gradient accumulation,
int8, a scikeras classifier in a scikit-learn Pipeline carried by joblib.

Every case runs on the backend ``KERAS_BACKEND`` names, except those marked TensorFlow-only (the
VAE and GAN train with ``tf.GradientTape``).

For Keras's own path (``keras_pickle.uninstall()``: ``KerasSaveable.__reduce__``) and
keras_pickle's (``install()``), each model:

* dumps: ``pickle.dumps(model, protocol=5)`` in this process, one timed run (the Pipeline:
  ``joblib.dump``, and ``joblib.load`` in the child);
* loads: ``pickle.loads`` in a fresh child process, one timed run after a warm-up load (one
  child per implementation and batch of models; it imports this module, so the classes
  above resolve by reference, and never calls ``install()``);
* state: every variable (``model.variables``, then each built optimizer the model holds; of the
  model a Pipeline holds)
  equals the original's by position, dtype, shape and bytes;
* preds: the loaded model's outputs on the batch are bit-identical to the original's;
* next: one more step on the same batch gives the variables the original gets from it.

A failure is recorded (exception type and message), never raised; the exit status is 1 if
any keras_pickle case fails a check. Usage::

    nice -n 10 python benchmarks/model_zoo.py [--quick] [--only NAME ...] [--max-params N] [--json P] [--md P]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import inspect
import io
import json
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import joblib  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402  (the keras.io VAE and GAN train with tf.GradientTape)
from keras import layers, ops  # noqa: E402

import keras_pickle  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import sweep_models  # noqa: E402  (the second sweep's models, shared with tests/test_sweep.py)

warnings.filterwarnings("ignore")  # Keras's advice on building and retracing, not results
tf.get_logger().setLevel("ERROR")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_JSON, DEFAULT_MD = HERE / "results" / "zoo.json", ROOT / "docs" / "zoo.md"
KERAS, KP = "keras", "keras_pickle"
IMPLS = (KERAS, KP)
CHECKS = ("loads", "state", "predictions", "next_step")
BATCH = 4
QUICK = ("MobileNetV3Small", "ResNet50", "EfficientNetB0", "BertBackbone", "VAE", "GAN")
BATCH_BYTES = 3 << 30  # payload bytes written before children load them: bounds disk and memory
LIMITS = {"max_params": 250_000_000}  # ConvNeXtXLarge (348M): Keras's own loads would need ~17 GB

# --------------------------------------------------------------------------
# keras.io idioms (module level: a fresh process imports them by reference)
# --------------------------------------------------------------------------


class Sampling(layers.Layer):
    """keras.io VAE: z = mean + exp(log_var / 2) * epsilon."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        return z_mean + ops.exp(0.5 * z_log_var) * keras.random.normal(ops.shape(z_mean), seed=self.seed_generator)


class VAE(keras.Model):
    """keras.io VAE: encoder and decoder models, Mean trackers, custom train_step, no get_config."""

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
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            bce = keras.losses.binary_crossentropy(data, reconstruction)
            reconstruction_loss = ops.mean(ops.sum(bce, axis=(1, 2)))
            kl_loss = ops.mean(ops.sum(-0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var)), axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        for tracker, value in zip(self.metrics, (total_loss, reconstruction_loss, kl_loss)):
            tracker.update_state(value)
        return {m.name: m.result() for m in self.metrics}


class GAN(keras.Model):
    """keras.io DCGAN: custom compile(d_optimizer, g_optimizer, loss_fn) and train_step."""

    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator, self.generator, self.latent_dim = discriminator, generator, latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
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


# --------------------------------------------------------------------------
# Cases: make() -> (model ready to pickle, x, y); predict and step run on the original and on each copy
# --------------------------------------------------------------------------


def fit_step(model, x, y) -> None:
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


def dataset_step(model, x, y) -> None:  # Keras's array adapter refuses strings; keras.io uses tf.data
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), epochs=1, verbose=0)


@dataclass
class Case:
    name: str
    group: str
    make: Callable[[], tuple[Any, Any, Any]]
    predict: Callable = lambda model, x: model(x, training=False)
    step: Callable = fit_step
    models: Callable = sweep_models.itself  # the Keras models the object holds
    joblib: bool = False  # carried by joblib.dump / joblib.load
    tensorflow_only: bool = False


class Skipped(Exception):
    """A model not measured in this run (over --max-params)."""


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def trained(model, x, y, step: Callable = fit_step, **compile_kwargs):
    model.compile(optimizer=keras.optimizers.Adam(1e-3), **compile_kwargs)
    step(model, x, y)
    return model, x, y


def application(name: str) -> Callable:
    def make():
        for size in (32, 75, 224):
            try:
                model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classes=3)
                break
            except ValueError:  # below this constructor's minimum size
                continue
        if model.count_params() > LIMITS["max_params"]:
            raise Skipped(f"{model.count_params():,} parameters > --max-params {LIMITS['max_params']:,}")
        x = rng().uniform(0, 255, (BATCH, size, size, 3)).astype("float32")
        return trained(model, x, np.arange(BATCH) % 3, loss="sparse_categorical_crossentropy", run_eagerly=True)

    return make


def backbone(cls: str, **kwargs) -> Callable:
    def make():
        model = getattr(keras_hub.models, cls)(**kwargs)
        if cls == "ViTBackbone":
            x = rng().normal(size=(BATCH, *kwargs["image_shape"])).astype("float32")
        else:
            x = {"token_ids": rng().integers(1, 64, (BATCH, 8)), "padding_mask": np.ones((BATCH, 8), "int32")}
            x.update({"segment_ids": np.zeros((BATCH, 8), "int32")} if cls == "BertBackbone" else {})
        return trained(model, x, keras.tree.map_structure(lambda t: np.zeros(t.shape, "float32"), model(x)), loss="mse")

    return make


WORDS = "the quick brown fox jumps over a lazy dog".split()
TEXTS = np.array(["the quick brown fox", "jumps over a lazy dog", "the lazy fox", "a quick dog jumps"])


def bert_classifier(used: bool) -> Callable:
    def make():
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

    return make


def gpt2_causal_lm(used: bool, top_k: bool = False) -> Callable:
    def make():
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

    return make


def vae():
    inputs = keras.Input((28, 28, 1))
    h = layers.Conv2D(8, 3, activation="relu", strides=2, padding="same")(inputs)
    h = layers.Conv2D(16, 3, activation="relu", strides=2, padding="same")(h)
    h = layers.Dense(16, activation="relu")(layers.Flatten()(h))
    z_mean, z_log_var = layers.Dense(2, name="z_mean")(h), layers.Dense(2, name="z_log_var")(h)
    encoder = keras.Model(inputs, [z_mean, z_log_var, Sampling()([z_mean, z_log_var])], name="encoder")
    latent = keras.Input((2,))
    h = layers.Reshape((7, 7, 16))(layers.Dense(7 * 7 * 16, activation="relu")(latent))
    h = layers.Conv2DTranspose(16, 3, activation="relu", strides=2, padding="same")(h)
    h = layers.Conv2DTranspose(8, 3, activation="relu", strides=2, padding="same")(h)
    decoder = keras.Model(latent, layers.Conv2DTranspose(1, 3, activation="sigmoid", padding="same")(h))
    return trained(VAE(encoder, decoder), rng().uniform(size=(BATCH, 28, 28, 1)).astype("float32"), None)


def gan():
    conv = {"strides": 2, "padding": "same"}
    discriminator = keras.Sequential(
        [keras.Input((16, 16, 1)), layers.Conv2D(8, 4, **conv), layers.LeakyReLU(0.2), layers.Conv2D(16, 4, **conv)]
        + [layers.LeakyReLU(0.2), layers.Flatten(), layers.Dropout(0.2), layers.Dense(1, activation="sigmoid")]
    )
    generator = keras.Sequential(
        [keras.Input((8,)), layers.Dense(4 * 4 * 16), layers.Reshape((4, 4, 16)), layers.Conv2DTranspose(16, 4, **conv)]
        + [layers.LeakyReLU(0.2), layers.Conv2DTranspose(8, 4, **conv), layers.LeakyReLU(0.2)]
        + [layers.Conv2D(1, 5, padding="same", activation="sigmoid")]
    )
    model = GAN(discriminator=discriminator, generator=generator, latent_dim=8)
    model.compile(keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-4), keras.losses.BinaryCrossentropy())
    x = rng().uniform(size=(BATCH, 16, 16, 1)).astype("float32")
    fit_step(model, x, None)
    return model, x, None


def stateful_lstm():
    model = keras.Sequential([keras.Input(batch_shape=(BATCH, 5, 3)), layers.LSTM(8, stateful=True), layers.Dense(1)])
    return trained(model, rng().normal(size=(BATCH, 5, 3)).astype("float32"), np.ones((BATCH, 1)), loss="mse")


def adapted_preprocessing():
    x = {"num": rng().normal(size=(BATCH, 3)).astype("float32"), "age": np.array([[18.0], [35.0], [52.0], [70.0]])}
    x["city"] = np.array([["paris"], ["lima"], ["oslo"], ["paris"]])
    normalization, discretization, lookup = (
        layers.Normalization(),
        layers.Discretization(num_bins=4),
        layers.StringLookup(),
    )
    for layer, key in ((normalization, "num"), (discretization, "age"), (lookup, "city")):
        layer.adapt(x[key])
    inputs = {
        k: keras.Input((n,), name=k, dtype=d) for k, n, d in [("num", 3, None), ("age", 1, None), ("city", 1, "string")]
    }
    ages = layers.CategoryEncoding(4, output_mode="one_hot")(discretization(inputs["age"]))
    cities = layers.Flatten()(layers.Embedding(lookup.vocabulary_size(), 4)(lookup(inputs["city"])))
    h = layers.Concatenate()([normalization(inputs["num"]), ages, cities])
    return trained(keras.Model(inputs, layers.Dense(1)(h)), x, np.ones((BATCH, 1)), dataset_step, loss="mse")


def dense_model(variant: str):
    model = keras.Sequential([keras.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(3)])
    if variant == "int8":
        model.quantize("int8")
    else:
        model.layers[0].enable_lora(rank=2)
    x = rng().normal(size=(BATCH, 8)).astype("float32")
    return trained(model, x, np.arange(BATCH) % 3, loss="sparse_categorical_crossentropy")


def cases() -> list[Case]:
    apps = vars(keras.applications).items()
    names = sorted(n for n, f in apps if inspect.isfunction(f) and "weights" in inspect.signature(f).parameters)
    tiny = {"vocabulary_size": 64, "num_layers": 2, "hidden_dim": 16, "intermediate_dim": 32}
    heads = {"num_query_heads": 2, "num_key_value_heads": 1}
    vit = {"image_shape": (32, 32, 3), "patch_size": 8, "num_layers": 2, "num_heads": 2, "hidden_dim": 16}
    predict = lambda model, x: model.predict(x, batch_size=BATCH, verbose=0)  # noqa: E731  (tasks preprocess)
    on_tensors = lambda model, x: model(keras.tree.map_structure(tf.constant, x), training=False)  # noqa: E731
    return (
        [Case(name, "keras.applications", application(name)) for name in names]
        + [
            Case("BertBackbone", "keras_hub", backbone("BertBackbone", num_heads=2, **tiny)),
            Case("GPT2Backbone", "keras_hub", backbone("GPT2Backbone", num_heads=2, **tiny)),
            Case("GemmaBackbone", "keras_hub", backbone("GemmaBackbone", head_dim=8, **heads, **tiny)),
            Case("LlamaBackbone", "keras_hub", backbone("LlamaBackbone", **heads, **tiny)),
            Case("ViTBackbone", "keras_hub", backbone("ViTBackbone", mlp_dim=32, **vit)),
            Case("BertTextClassifier", "keras_hub", bert_classifier(used=False), predict),
            Case("BertTextClassifier (used)", "keras_hub", bert_classifier(used=True), predict),
            Case("GPT2CausalLM", "keras_hub", gpt2_causal_lm(used=False), predict),
            Case("GPT2CausalLM (used)", "keras_hub", gpt2_causal_lm(used=True), predict),
            Case("GPT2CausalLM (used, TopKSampler)", "keras_hub", gpt2_causal_lm(used=True, top_k=True), predict),
            Case("VAE", "keras.io", vae, lambda model, x: model.decoder(model.encoder(x)[0]), tensorflow_only=True),
            Case(
                "GAN",
                "keras.io",
                gan,
                lambda model, x: (model.generator(ops.ones((BATCH, 8))), model.discriminator(x)),
                tensorflow_only=True,
            ),
            Case("stateful LSTM", "keras.io", stateful_lstm),
            Case("adapted preprocessing", "keras.io", adapted_preprocessing, on_tensors, dataset_step),
            Case("int8 Dense", "keras.io", lambda: dense_model("int8")),
            Case("LoRA Dense", "keras.io", lambda: dense_model("lora")),
        ]
        + [
            Case(name, "second sweep", case.make, case.predict, case.step, case.models, case.joblib)
            for name, case in sweep_models.CASES.items()
        ]
    )


# --------------------------------------------------------------------------
# Measuring: the same observations here (of the original) and in a child (of a loaded copy)
# --------------------------------------------------------------------------


def activate(impl: str) -> None:
    keras_pickle.install() if impl == KP else keras_pickle.uninstall()
    assert keras_pickle.is_installed() == (impl == KP)


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in map(np.ascontiguousarray, arrays):
        h.update(f"{a.dtype}{a.shape}".encode() + a.tobytes())
    return h.hexdigest()[:20]


def variables(obj, models: Callable = sweep_models.itself) -> tuple[list[str], list[str]]:
    """Paths and digests of model.variables, then of each built optimizer the model holds (the GAN's two),
    for each Keras model ``obj`` holds (``models``: itself, or the one a Pipeline holds)."""
    found = []
    for model in models(obj):
        held = [model.optimizer] + [
            v for _, v in sorted(vars(model).items()) if isinstance(v, keras.optimizers.Optimizer)
        ]
        optimizers = {id(o): o for o in held if o is not None and o.built}
        found += list(model.variables) + [v for o in optimizers.values() for v in o.variables]
    return [v.path for v in found], [digest(keras.ops.convert_to_numpy(v.value)) for v in found]


def dumps(case: Case, obj) -> bytes:
    if not case.joblib:
        return pickle.dumps(obj, protocol=5)
    buffer = io.BytesIO()
    joblib.dump(obj, buffer)
    return buffer.getvalue()


def loads(case: Case, data: bytes):
    return joblib.load(io.BytesIO(data)) if case.joblib else pickle.loads(data)


def failure(stage: str, e: BaseException) -> str:
    message = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split())  # no colours; Keras wraps mid-sentence
    return f"{stage}: {type(e).__name__}: {message[:300]}"


def observe(case: Case, model, x, y) -> dict:
    """Variable digests, then the predictions' digest, then one more step and the digests after it."""
    out: dict[str, Any] = dict(zip(("paths", "before"), variables(model, case.models)))
    try:
        out["pred"] = digest(*(keras.ops.convert_to_numpy(t) for t in keras.tree.flatten(case.predict(model, x))))
        case.step(model, x, y)
        out["paths_after"], out["after"] = variables(model, case.models)
    except Exception as e:
        out["error"] = failure("next step" if "pred" in out else "predict", e)
    return out


def payload(tmp: Path, name: str, kind: str) -> Path:
    """Where the pickle of one model (kind: an implementation) or of its batch (kind "data") is written."""
    return tmp / f"{''.join(c if c.isalnum() else '_' for c in name)}.{kind}.pkl"


def child(impl: str, tmp: Path, names: list[str]) -> None:
    """In a fresh process: load each payload of one implementation, observe it, append a JSON line."""
    by_name = {case.name: case for case in cases()}
    pickle.loads((tmp / f"warmup.{impl}.pkl").read_bytes())  # first-load imports are not timed
    with open(tmp / f"loaded.{impl}.jsonl", "a") as out:
        for name in names:
            data = payload(tmp, name, impl).read_bytes()
            x, y = pickle.loads(payload(tmp, name, "data").read_bytes())
            gc.collect()
            assert impl == KP or not keras_pickle.is_installed()
            try:
                start = time.perf_counter()
                model = loads(by_name[name], data)
                result = {"loads_s": time.perf_counter() - start}
            except Exception as e:
                result = {"error": failure("loads", e)}
            else:
                result.update(observe(by_name[name], model, x, y))
                del model
            out.write(json.dumps({"name": name, **result}) + "\n")
            out.flush()
            keras.backend.clear_session()


def run_children(impl: str, names: list[str], tmp: Path) -> dict[str, dict]:
    """One child for ``names``; if it dies, the model it was on fails and a new child takes the rest."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), str(HERE), str(ROOT / "tests"), env.get("PYTHONPATH")])
    )
    results: dict[str, dict] = {}
    remaining = list(names)
    while remaining:
        cmd = [sys.executable, str(HERE / "model_zoo.py"), "--child", impl, str(tmp), *remaining]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        path = tmp / f"loaded.{impl}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        results.update((row.pop("name"), row) for row in map(json.loads, lines))
        remaining = [n for n in remaining if n not in results]
        if remaining:
            last = ([line for line in proc.stderr.splitlines() if line.strip()] or ["no output"])[-1]
            results[remaining.pop(0)] = {"error": f"loads: child exited {proc.returncode}: {last[:300]}"}
    return results


def warm_up(tmp: Path) -> None:
    model = keras.Sequential([keras.Input((4,)), layers.Dense(4)])
    trained(model, np.ones((BATCH, 4), "float32"), np.ones((BATCH, 4), "float32"), loss="mse")
    for impl in IMPLS:
        activate(impl)
        (tmp / f"warmup.{impl}.pkl").write_bytes(pickle.dumps(model, protocol=5))


def measure(case: Case, tmp: Path) -> dict:
    record: dict[str, Any] = {"name": case.name, "group": case.group}
    activate(KP)  # constructed while installed: keras_pickle records constructor arguments
    keras.utils.set_random_seed(0)
    try:
        model, x, y = case.make()
    except Skipped as e:
        return {**record, "skipped": str(e)}
    except Exception as e:
        return {**record, "error": failure("build", e)}
    record["params"] = int(sum(np.prod(v.shape) for m in case.models(model) for v in m.weights))
    payload(tmp, case.name, "data").write_bytes(pickle.dumps((x, y)))
    for impl in IMPLS:
        activate(impl)
        gc.collect()
        try:
            start = time.perf_counter()
            data = dumps(case, model)
            record[impl] = {"dumps_s": time.perf_counter() - start, "bytes": len(data)}
            payload(tmp, case.name, impl).write_bytes(data)
            del data
        except Exception as e:
            record[impl] = {"error": failure("dumps", e)}
    activate(KP)
    record["reference"] = observe(case, model, x, y)
    del model
    keras.backend.clear_session()
    gc.collect()
    return record


def passed(record: dict, impl: str) -> bool:
    return impl in record.get("verdicts", {}) and all(record["verdicts"][impl][c] is True for c in CHECKS)


def keras_pickle_failed(records: list[dict]) -> list[str]:
    return [r["name"] for r in records if "skipped" not in r and not passed(r, KP)]


def compare(expected: list[str] | None, got: list[str] | None, paths: list[str]) -> bool | str | None:
    if expected is None or got is None:
        return None
    if len(got) != len(expected):
        return f"{len(got)} variables, expected {len(expected)}"
    bad = [p for p, a, b in zip(paths, expected, got) if a != b]
    return f"{len(bad)} of {len(expected)} variables differ, first {bad[0]}" if bad else True


def verdict(record: dict, impl: str, loaded: dict) -> dict:
    """Each check: True, a string saying what went wrong, or None (not reached)."""
    ref, side = record["reference"], record[impl]
    v = {"dumps_s": side.get("dumps_s"), "loads_s": loaded.get("loads_s"), "bytes": side.get("bytes")}
    v["error"] = side.get("error") or loaded.get("error")
    v["loads"] = True if "loads_s" in loaded else v["error"]
    v["state"] = compare(ref["before"], loaded.get("before"), ref["paths"])
    v["predictions"] = None if "pred" not in loaded else loaded["pred"] == ref.get("pred") or "outputs differ"
    v["next_step"] = compare(ref.get("after"), loaded.get("after"), ref.get("paths_after", []))
    return v


def run(selected: list[Case], tmp: Path, started: float) -> list[dict]:
    """Measure each case; whenever BATCH_BYTES of payloads are written, load them in children."""

    def log(message: str) -> None:
        print(f"{time.perf_counter() - started:7.1f}s  {message}", flush=True)

    records, pending, pending_bytes = [], [], 0
    for i, case in enumerate(selected):
        record = measure(case, tmp)
        records.append(record)
        sizes = [record[impl].get("bytes", 0) for impl in IMPLS if impl in record]
        status = record.get("skipped") or record.get("error") or f"{record['params']:,} params, payloads {sizes} B"
        log(f"dumped {case.name}: {status}")
        if "reference" in record:
            pending.append(record)
            pending_bytes += sum(sizes)
        if pending and (pending_bytes > BATCH_BYTES or i == len(selected) - 1):
            log(f"loading {len(pending)} model(s) in fresh processes")
            for impl in IMPLS:
                names = [r["name"] for r in pending if "dumps_s" in r[impl]]
                loaded = run_children(impl, names, tmp)
                for r in pending:
                    r.setdefault("verdicts", {})[impl] = verdict(r, impl, loaded.get(r["name"], {}))
            for path in tmp.glob("*.pkl"):
                if not path.name.startswith("warmup."):
                    path.unlink()
            pending, pending_bytes = [], 0
    return records


# --------------------------------------------------------------------------
# Report and main
# --------------------------------------------------------------------------

COLUMNS = [f"{i} {c}" for i in ("Keras", "kp") for c in ("loads", "state", "preds", "next", "s")]
HEADER = ["model", "params", *COLUMNS, "ratio"]


def rows(records: list[dict]) -> list[list[str]]:
    def mark(value):
        return "✓" if value is True else "–" if value is None else "✗"

    def seconds(v):
        return None if v["dumps_s"] is None or v["loads_s"] is None else v["dumps_s"] + v["loads_s"]

    out = []
    for r in records:
        if "verdicts" not in r:
            out.append([r["name"], "skipped" if "skipped" in r else "failed"] + ["–"] * (len(HEADER) - 2))
            continue
        cells = [r["name"], f"{r['params']:,}"]
        for v in map(r["verdicts"].get, IMPLS):
            cells += [mark(v[c]) for c in CHECKS] + [f"{seconds(v):.2f}" if seconds(v) is not None else "–"]
        keras_s, kp_s = (seconds(r["verdicts"][i]) for i in IMPLS)
        out.append(cells + [f"{keras_s / kp_s:.1f}×" if keras_s and kp_s else "–"])
    return out


def problems(records: list[dict]) -> list[str]:
    """One line per model and implementation with a failed check: what went wrong."""
    out = [f"{r['name']}: skipped, {r['skipped']}" for r in records if "skipped" in r]
    for r in records:
        if "error" in r or "error" in r.get("reference", {}):
            out.append(f"{r['name']} (this script): {r.get('error') or r['reference']['error']}")
        for impl, v in r.get("verdicts", {}).items():
            details = [f"{c}: {v[c]}" for c in CHECKS[1:] if isinstance(v[c], str)]
            if v["error"] or details:
                out.append(f"{r['name']} ({impl}): " + "; ".join(filter(None, [v["error"], *details])))
    return out


def print_table(records: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*HEADER, title="Keras's own pickling vs keras_pickle (kp), loaded in a fresh process")
    for row in rows(records):
        table.add_row(*row)
    Console(width=200).print(table, *(f"  {line}" for line in problems(records)), sep="\n", markup=False)


MARKDOWN = """# The zoo: real models through Keras's own pickling and keras_pickle

Generated by `{command}` on {when} ({versions}), {minutes:.0f} minutes.{note}

Each model is pickled in one process and loaded in a fresh one (`benchmarks/model_zoo.py` says exactly what is
measured). loads: unpickled; state: every variable (model and optimizers) bit-exact; preds: outputs
bit-identical; next: one more training step gives bit-identical variables; s: dumps + loads seconds;
ratio: Keras s / keras_pickle (kp) s. ✓ yes, ✗ no, – not reached.

{table}

## What failed

{failures}
"""


def markdown(records: list[dict], report: dict) -> str:
    table = ["| " + " | ".join(row) + " |" for row in [HEADER, ["---"] * len(HEADER), *rows(records)]]
    return MARKDOWN.format(
        command=shlex.join(report["command"]),
        when=report["when"],
        versions=report["versions_text"],
        minutes=report["elapsed_s"] / 60,
        note=f"\n{report['note']}" if report.get("note") else "",
        table="\n".join(table),
        failures="\n".join(f"- {line}" for line in problems(records) or ["nothing"]),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="just these models (names as in the table)")
    parser.add_argument("--quick", action="store_true", help="a representative handful: " + ", ".join(QUICK))
    parser.add_argument("--max-params", type=int, default=LIMITS["max_params"], help="skip larger applications")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results (default {DEFAULT_JSON})")
    parser.add_argument("--md", type=Path, default=DEFAULT_MD, help=f"markdown table (default {DEFAULT_MD})")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]), args.child[2:])
        return 0
    LIMITS["max_params"] = args.max_params
    every = [c for c in cases() if keras.backend.backend() == "tensorflow" or not c.tensorflow_only]
    wanted = args.only or (QUICK if args.quick else [c.name for c in every])
    unknown = set(wanted) - {c.name for c in every}
    if unknown:
        raise SystemExit(f"unknown model(s) {sorted(unknown)}; known: {[c.name for c in every]}")
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="keras-pickle-zoo-"))
    try:
        warm_up(tmp)
        records = run([c for c in every if c.name in wanted], tmp, started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(records)
    info = {"keras": keras.__version__, "keras_hub": keras_hub.__version__, "tensorflow": tf.__version__}
    info.update(keras_pickle=keras_pickle.__version__, backend=keras.backend.backend())
    report = {
        "what": "real models through Keras's own pickling and keras_pickle, loaded in a fresh process (model_zoo.py)",
        "command": [Path(sys.executable).name, *sys.argv],
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": info,
        "versions_text": ", ".join(f"{k} {v}" for k, v in info.items()),
        "elapsed_s": time.perf_counter() - started,
        "keras_pickle_failed": keras_pickle_failed(records),
        "records": records,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    args.md.write_text(markdown(records, report))
    bad = report["keras_pickle_failed"]
    print(f"\n{report['elapsed_s']:.0f} s; keras_pickle failed {len(bad)} of {len(records)}: {bad}")
    print(f"results: {args.json}, {args.md}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    import model_zoo  # this file as a module: its classes pickle as model_zoo.VAE, not __main__.VAE

    sys.exit(model_zoo.main())
