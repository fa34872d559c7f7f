"""tf-keras's classes, imported on first use: ``import keras_pickle`` never imports tf-keras (nor the
TensorFlow it imports)."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any


def tf_keras() -> ModuleType:
    """The ``tf_keras`` package, imported now if it was not (raises ImportError where it is not installed)."""
    module = sys.modules.get("tf_keras")
    if module is None:
        import tf_keras as module
    return module


def is_imported() -> bool:
    return sys.modules.get("tf_keras") is not None


def protocol_bases() -> dict[str, type]:
    """The tf-keras base classes that receive the pickle protocol, by the kind of mixin they get."""
    k = tf_keras()
    return {
        "layer": k.layers.Layer,
        "model": k.Model,
        "loss": k.losses.Loss,
        "optimizer": k.optimizers.Optimizer,
        "legacy_optimizer": k.optimizers.legacy.Optimizer,
        "metric": k.metrics.Metric,
        "callback": k.callbacks.Callback,
    }


def is_legacy_optimizer(optimizer: Any) -> bool:
    """A ``tf_keras.optimizers.legacy`` optimizer (``OptimizerV2``), which builds its slots lazily."""
    return isinstance(optimizer, tf_keras().optimizers.legacy.Optimizer)


def is_optimizer(value: Any) -> bool:
    k = tf_keras()
    return isinstance(value, (k.optimizers.Optimizer, k.optimizers.legacy.Optimizer))
