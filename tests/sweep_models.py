"""Models written as keras.io and KerasHub write them, small, on every backend (importable by reference).

Each ``make_*`` builds its model while keras_pickle is installed (so constructor arguments are
recorded, as for anyone who installs it first), trains it one step on a seeded batch so optimizer
slots and seed states exist, and returns ``(obj, x, y)``: the object to pickle and its batch.
:data:`CASES` says, per model, how to predict, how to take one more step, where its Keras models
are (a scikit-learn pipeline holds one) and whether joblib carries it. ``tests/models/test_sweep.py`` and
``benchmarks/model_zoo.py`` run them; nothing here is registered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import layers, ops

BATCH = 4
RUN_EAGERLY = False
"""Compile every model with ``run_eagerly`` (it travels in the compile config): tests/models/test_sweep.py sets it,
since tracing a step costs seconds per model on 2 cores and the state a step leaves is the same."""


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def fit_step(model, x, y) -> None:
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


def call(model, x):
    return model(x, training=False)


def itself(obj) -> list:
    return [obj]


def trained(model, x, y, optimizer=None, **compile_kwargs) -> tuple:
    model.compile(optimizer=optimizer or keras.optimizers.Adam(1e-3), run_eagerly=RUN_EAGERLY, **compile_kwargs)
    fit_step(model, x, y)
    return model, x, y


# --------------------------------------------------------------------------
# keras.io "Text classification with Transformer": layers without **kwargs or get_config
# --------------------------------------------------------------------------


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.dropout1(self.att(inputs, inputs))
        out1 = self.layernorm1(inputs + attn_output)
        return self.layernorm2(out1 + self.dropout2(self.ffn(out1)))


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        positions = self.pos_emb(ops.arange(start=0, stop=ops.shape(x)[-1], step=1))
        return self.token_emb(x) + positions


def make_text_transformer() -> tuple:
    maxlen, vocab_size, embed_dim = 8, 20, 8
    inputs = layers.Input(shape=(maxlen,))
    h = TransformerBlock(embed_dim, 2, 16)(TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)(inputs))
    h = layers.Dropout(0.1)(layers.GlobalAveragePooling1D()(h))
    h = layers.Dropout(0.1)(layers.Dense(8, activation="relu")(h))
    model = keras.Model(inputs=inputs, outputs=layers.Dense(2, activation="softmax")(h))
    x = rng().integers(0, vocab_size, (BATCH, maxlen)).astype("float32")
    return trained(model, x, np.arange(BATCH) % 2, loss="sparse_categorical_crossentropy")


# --------------------------------------------------------------------------
# keras.io "Image classification with Vision Transformer": PatchEncoder(num_patches, projection_dim)
# --------------------------------------------------------------------------


class Patches(layers.Layer):
    def __init__(self, patch_size):
        super().__init__()
        self.patch_size = patch_size

    def call(self, images):
        shape = ops.shape(images)
        patches = keras.ops.image.extract_patches(images, size=self.patch_size)
        count = (shape[1] // self.patch_size) * (shape[2] // self.patch_size)
        return ops.reshape(patches, (shape[0], count, self.patch_size * self.patch_size * shape[-1]))

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size})
        return config


class PatchEncoder(layers.Layer):
    def __init__(self, num_patches, projection_dim):
        super().__init__()
        self.num_patches = num_patches
        self.projection = layers.Dense(units=projection_dim)
        self.position_embedding = layers.Embedding(input_dim=num_patches, output_dim=projection_dim)

    def call(self, patch):
        positions = ops.expand_dims(ops.arange(start=0, stop=self.num_patches, step=1), axis=0)
        return self.projection(patch) + self.position_embedding(positions)

    def get_config(self):
        config = super().get_config()
        config.update({"num_patches": self.num_patches})
        return config


def mlp(x, hidden_units, dropout_rate):
    for units in hidden_units:
        x = layers.Dropout(dropout_rate)(layers.Dense(units, activation=keras.activations.gelu)(x))
    return x


def make_vit() -> tuple:
    image_size, patch_size, projection_dim, num_heads = 8, 4, 8, 2
    inputs = keras.Input(shape=(image_size, image_size, 3))
    encoded = PatchEncoder((image_size // patch_size) ** 2, projection_dim)(Patches(patch_size)(inputs))
    x1 = layers.LayerNormalization(epsilon=1e-6)(encoded)
    attention = layers.MultiHeadAttention(num_heads=num_heads, key_dim=projection_dim, dropout=0.1)(x1, x1)
    x2 = layers.Add()([attention, encoded])
    x3 = mlp(layers.LayerNormalization(epsilon=1e-6)(x2), [projection_dim * 2, projection_dim], 0.1)
    representation = layers.Dropout(0.5)(
        layers.Flatten()(layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x3, x2])))
    )
    logits = layers.Dense(3)(mlp(representation, [16], 0.5))
    model = keras.Model(inputs=inputs, outputs=logits)
    x = rng().uniform(size=(BATCH, image_size, image_size, 3)).astype("float32")
    optimizer = keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4)
    return trained(
        model, x, np.arange(BATCH) % 3, optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )


# --------------------------------------------------------------------------
# A bidirectional GRU with dropout after Masking (keras.io's sequence models)
# --------------------------------------------------------------------------


def make_bigru() -> tuple:
    inputs = keras.Input((None, 3))
    h = layers.Masking()(inputs)
    h = layers.Bidirectional(layers.GRU(4, dropout=0.2, recurrent_dropout=0.1, return_sequences=True))(h)
    h = layers.Bidirectional(layers.GRU(4, dropout=0.2))(h)
    model = keras.Model(inputs, layers.Dense(1)(layers.Dropout(0.3)(h)))
    x = rng().normal(size=(BATCH, 6, 3)).astype("float32")
    x[:, 4:] = 0.0  # padded steps, masked
    return trained(model, x, np.ones((BATCH, 1), "float32"), loss="mse")


# --------------------------------------------------------------------------
# keras.io functional API guide: dict inputs, two named outputs, a loss per output
# --------------------------------------------------------------------------


def make_two_outputs() -> tuple:
    num_tags, num_words, num_departments = 6, 20, 3
    title = keras.Input(shape=(None,), name="title")
    body = keras.Input(shape=(None,), name="body")
    tags = keras.Input(shape=(num_tags,), name="tags")
    title_features = layers.LSTM(4)(layers.Embedding(num_words, 4)(title))
    body_features = layers.LSTM(2)(layers.Embedding(num_words, 4)(body))
    h = layers.concatenate([title_features, body_features, tags])
    outputs = {
        "priority": layers.Dense(1, name="priority")(h),
        "department": layers.Dense(num_departments, name="department")(h),
    }
    model = keras.Model(inputs={"title": title, "body": body, "tags": tags}, outputs=outputs)
    r = rng()
    x = {
        "title": r.integers(0, num_words, (BATCH, 5)),
        "body": r.integers(0, num_words, (BATCH, 7)),
        "tags": r.integers(0, 2, (BATCH, num_tags)).astype("float32"),
    }
    y = {"priority": r.uniform(size=(BATCH, 1)).astype("float32"), "department": np.arange(BATCH) % num_departments}
    return trained(
        model,
        x,
        y,
        keras.optimizers.RMSprop(1e-3),
        loss={
            "priority": keras.losses.BinaryCrossentropy(from_logits=True),
            "department": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        },
        loss_weights={"priority": 1.0, "department": 0.2},
    )


# --------------------------------------------------------------------------
# Optimizer state beyond slots, and quantized weights
# --------------------------------------------------------------------------


def make_adamw_ema_accumulation() -> tuple:
    """AdamW with an exponential moving average and gradient accumulation over 2 steps, stopped after 3
    batches: the accumulators hold a partial sum when pickled."""
    model = keras.Sequential([keras.Input((6,)), layers.Dense(8, activation="relu"), layers.Dense(1)])
    optimizer = keras.optimizers.AdamW(1e-2, use_ema=True, ema_overwrite_frequency=None, gradient_accumulation_steps=2)
    x = rng().normal(size=(3 * BATCH, 6)).astype("float32")
    return trained(model, x, x[:, :1] * 2.0, optimizer, loss="mse")


def make_int8() -> tuple:
    model = keras.Sequential([keras.Input((8,)), layers.Dense(16, activation="relu"), layers.Dense(3)])
    model.quantize("int8")
    x = rng().normal(size=(BATCH, 8)).astype("float32")
    return trained(model, x, np.arange(BATCH) % 3, loss="sparse_categorical_crossentropy")


# --------------------------------------------------------------------------
# A scikeras classifier in a scikit-learn Pipeline (joblib carries it)
# --------------------------------------------------------------------------


def classifier_model(meta):
    return keras.Sequential(
        [keras.Input((meta["n_features_in_"],)), layers.Dense(8, activation="relu"), layers.Dropout(0.2, seed=3)]
        + [layers.Dense(meta["n_classes_"], activation="softmax")]
    )


def pipeline_predict(pipeline, x):
    return pipeline.predict_proba(x)


def pipeline_step(pipeline, x, y) -> None:
    pipeline[-1].partial_fit(pipeline[:-1].transform(x), y)


def pipeline_models(pipeline) -> list:
    return [pipeline[-1].model_]


def make_scikeras_pipeline() -> tuple:
    from scikeras.wrappers import KerasClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    classifier = KerasClassifier(
        model=classifier_model,
        loss="sparse_categorical_crossentropy",
        optimizer="adam",
        epochs=1,
        batch_size=BATCH,
        shuffle=False,
        verbose=0,
        random_state=0,
        run_eagerly=RUN_EAGERLY,
    )
    pipeline = make_pipeline(StandardScaler(), classifier)
    x = rng().normal(size=(2 * BATCH, 5)).astype("float32")
    y = np.arange(2 * BATCH) % 3
    pipeline.fit(x, y)
    return pipeline, x, y


# --------------------------------------------------------------------------
# Dropout with and without a seed (PyTorch draws an unseeded one's masks from its global generator)
# --------------------------------------------------------------------------


def make_dropout(seed: int | None) -> tuple:
    model = keras.Sequential([keras.Input((6,)), layers.Dense(8), layers.Dropout(0.5, seed=seed), layers.Dense(1)])
    x = rng().normal(size=(BATCH, 6)).astype("float32")
    return trained(model, x, x[:, :1], loss="mse")


@dataclasses.dataclass(frozen=True)
class SweepCase:
    make: Callable[[], tuple]
    predict: Callable[[Any, Any], Any] = call
    step: Callable[[Any, Any, Any], None] = fit_step
    models: Callable[[Any], list] = itself  # the Keras models the object holds, whose variables are compared
    joblib: bool = False  # carried by joblib.dump / joblib.load instead of pickle


CASES: dict[str, SweepCase] = {
    "keras.io text Transformer": SweepCase(make_text_transformer),
    "keras.io ViT": SweepCase(make_vit),
    "BiGRU with dropout": SweepCase(make_bigru),
    "dict inputs, two outputs": SweepCase(make_two_outputs),
    "AdamW, EMA, gradient accumulation": SweepCase(make_adamw_ema_accumulation),
    "int8 Dense (sweep)": SweepCase(make_int8),
    "scikeras Pipeline": SweepCase(make_scikeras_pipeline, pipeline_predict, pipeline_step, pipeline_models, True),
    "Dropout, unseeded": SweepCase(lambda: make_dropout(None)),
    "Dropout, seeded": SweepCase(lambda: make_dropout(7)),
}
TORCH_GLOBAL_GENERATOR = ("keras.io text Transformer", "keras.io ViT", "BiGRU with dropout", "Dropout, unseeded")
"""Cases with an unseeded dropout: on PyTorch, Keras draws its masks from torch's global generator, the
process's and not the model's, so their next step differs from the original's whatever pickles them."""


def variables_of(obj: Any, models: Callable[[Any], list] = itself) -> list:
    """Every variable of the Keras models ``obj`` holds, then of each built optimizer they hold."""
    found = []
    for model in models(obj):
        found += list(model.variables)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and optimizer.built:
            found += list(optimizer.variables)
    return found
