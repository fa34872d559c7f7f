"""Models for the version-skew checks (tests/models/skew_side.py), built the same way on every Keras 3.

Each builder takes ``train`` (whether this Keras can run ``fit`` on its backend) and returns
``(model, x, y)``. The models of the field report (an MLP with Dropout and Adam, a Functional
with BatchNormalization and an unregistered layer) are trained, so that their optimizer and
seed state travel and the loading side can train them on; every layer family whose config
Keras changed between 3.8 and today has a model too, compiled but not trained (loading is
what changed), with its default values (they must load on an older Keras) and, in
``gated_attention`` and ``int4_dense``, with a value an older Keras cannot honour (it must be
refused, naming the layer and key). The quantized models are trained after quantizing: the
next step on the loading side is compared too.

``Scale`` is an unregistered custom layer in an importable module: it travels by reference.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

RNG = np.random.default_rng(0)
X8 = RNG.normal(size=(16, 8)).astype("float32")
Y1 = RNG.normal(size=(16, 1)).astype("float32")
SEQ = RNG.normal(size=(16, 6, 4)).astype("float32")
TOKENS = RNG.integers(0, 10, size=(16, 5)).astype("int32")
IMAGES = RNG.normal(size=(16, 4, 4, 1)).astype("float32")
CLASSES = RNG.integers(0, 3, size=(16,)).astype("int32")
SEQ8 = RNG.normal(size=(16, 8, 3)).astype("float32")
CORPUS = np.array(["the cat sat", "the dog ran", "a cat ran far", "dogs and cats"])
WORDS = np.array([["cat"], ["dog"], ["the"], ["zebra"]])


class Scale(layers.Layer):
    """An unregistered custom layer with a weight and a config argument."""

    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

    def call(self, x):
        return ops.multiply(x, self.w) * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def _fit(model, x, y, train):
    """Compiled with Adam and trained one epoch (where this Keras can train)."""
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    if train:
        model.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    else:
        model.optimizer.build(model.trainable_variables)
    return model, x, y


def _compiled(model, x, y):
    """Compiled with Adam, its optimizer built, not trained (cheap: nothing is traced)."""
    return _fit(model, x, y, train=False)


def mlp(train):
    """Dense + Dropout + Adam: the plainest model."""
    model = keras.Sequential(
        [keras.Input((8,)), layers.Dense(16, activation="relu"), layers.Dropout(0.5, seed=1), layers.Dense(1)],
        name="mlp",
    )
    return _fit(model, X8, Y1, train)


def functional_bn_custom(train, scale_class=Scale):
    """Functional with BatchNormalization and an unregistered custom layer."""
    inputs = keras.Input((8,))
    h = layers.Dense(16)(inputs)
    h = layers.BatchNormalization()(h)
    h = scale_class(factor=0.5)(h)
    outputs = layers.Dense(1)(h)
    return _fit(keras.Model(inputs, outputs, name="functional_bn_custom"), X8, Y1, train)


def convolution_recurrent(train):
    """Conv1D, SimpleRNN, LSTM, GRU: their initializers' configs (the VarianceScaling family)."""
    inputs = keras.Input((6, 4))
    h = layers.Conv1D(4, 2, padding="same")(inputs)
    h = layers.SimpleRNN(4, return_sequences=True)(h)
    h = layers.LSTM(4, return_sequences=True)(h)
    h = layers.GRU(3)(h)
    return _compiled(keras.Model(inputs, layers.Dense(1)(h), name="convolution_recurrent"), SEQ, Y1)


def attention(train):
    """MultiHeadAttention and GroupedQueryAttention with their defaults."""
    inputs = keras.Input((6, 4))
    h = layers.MultiHeadAttention(num_heads=2, key_dim=2, name="mha")(inputs, inputs)
    h = layers.GroupQueryAttention(head_dim=2, num_query_heads=2, num_key_value_heads=1, name="gqa")(h, h)
    h = layers.GlobalAveragePooling1D()(h)
    return _compiled(keras.Model(inputs, layers.Dense(1)(h), name="attention"), SEQ, Y1)


def embedding_einsum(train):
    """Embedding and EinsumDense (quantizable layers, like Dense)."""
    inputs = keras.Input((5,), dtype="int32")
    h = layers.Embedding(10, 4)(inputs)
    h = layers.EinsumDense("abc,cd->abd", output_shape=(5, 3), bias_axes="d")(h)
    h = layers.Flatten()(h)
    return _compiled(keras.Model(inputs, layers.Dense(1)(h), name="embedding_einsum"), TOKENS, Y1)


def resizing(train):
    """Resizing (image preprocessing) in front of a Dense."""
    model = keras.Sequential(
        [keras.Input((4, 4, 1)), layers.Resizing(2, 2), layers.Flatten(), layers.Dense(1)], name="resizing"
    )
    return _compiled(model, IMAGES, Y1)


def classifier_metrics(train):
    """Sparse categorical cross-entropy as loss and metric (compile config)."""
    model = keras.Sequential([keras.Input((8,)), layers.Dense(3)], name="classifier_metrics")
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalCrossentropy(from_logits=True)],
    )
    model.optimizer.build(model.trainable_variables)
    return model, X8, CLASSES


def _quantized(mode, train):
    model = keras.Sequential([keras.Input((8,)), layers.Dense(4), layers.Dense(1)], name=f"{mode}_dense")
    model.quantize(mode)  # ValueError where this Keras lacks the mode: not built
    return _fit(model, X8, Y1, train)


def int8_dense(train):
    """Dense layers quantized int8, then trained: Keras 3.15 writes a ``quantization_config`` that
    an older Keras takes from the int8 dtype policy."""
    return _quantized("int8", train)


def float8_dense(train):
    """Dense layers quantized float8 (scales and amax histories as variables), then trained."""
    return _quantized("float8", train)


def int4_dense(train):
    """Keras 3.15's int4 (block-wise scales and zero points): Keras 3.10 and 3.8 cannot quantize int4."""
    return _quantized("int4", train)


def text_vectorization(train):
    """An adapted TextVectorization, alone: its vocabulary travels as layer state."""
    layer = layers.TextVectorization(max_tokens=20, output_sequence_length=4, name="text_vectorization")
    layer.adapt(CORPUS)
    return layer, CORPUS, None


def string_lookup(train):
    """An adapted StringLookup, alone."""
    layer = layers.StringLookup(name="string_lookup")
    layer.adapt(WORDS)
    return layer, WORDS, None


def integer_lookup(train):
    """An adapted IntegerLookup, alone."""
    layer = layers.IntegerLookup(name="integer_lookup")
    layer.adapt(TOKENS)
    return layer, TOKENS, None


def gated_attention(train):
    """MultiHeadAttention(use_gate=True): a value Keras before 3.11 cannot honour."""
    inputs = keras.Input((6, 4))
    h = layers.MultiHeadAttention(num_heads=2, key_dim=2, use_gate=True, name="gated_mha")(inputs, inputs)
    h = layers.GlobalAveragePooling1D()(h)
    return _compiled(keras.Model(inputs, layers.Dense(1)(h), name="gated_attention"), SEQ, Y1)


MODELS = {
    builder.__name__: builder
    for builder in (
        mlp,
        functional_bn_custom,
        convolution_recurrent,
        attention,
        embedding_einsum,
        resizing,
        classifier_metrics,
        int8_dense,
        float8_dense,
        int4_dense,
        text_vectorization,
        string_lookup,
        integer_lookup,
        gated_attention,
    )
}
TRAINED = {"mlp", "functional_bn_custom", "int8_dense", "float8_dense", "int4_dense"}
"""The models trained before pickling, whose training the loading side continues and compares."""
