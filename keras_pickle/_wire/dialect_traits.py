"""What the format knows of each Keras dialect a payload may hold, without importing either.

A header names its dialect (:data:`~.schema.DIALECTS`); everything that reads a payload without Keras (safe mode's
tables and resolution, the inspector, the diagnosis of a failed load) asks the dialect's :class:`Traits` instead of
comparing its name: which package it lives in, how a sentence names it, and how its deserializer reads the names a
config spells. The Keras side's interface is :class:`keras_pickle._dialect.Dialect`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .schema import DIALECT_KERAS3, DIALECT_TF_KERAS


@dataclasses.dataclass(frozen=True)
class Traits:
    """One dialect, as a payload's reader sees it."""

    name: str
    """The header's ``dialect``."""
    title: str
    """The dialect in a message about dialects: ``"Keras 3"``, ``"tf-keras (Keras 2)"``."""
    keras: str
    """The dialect in a sentence about versions: ``"Keras"`` (``"Keras 3.15.1"``), ``"tf-keras"``."""
    package: str
    """The package it lives in (``keras``, ``tf_keras``): its version, and what it defines."""
    vocabulary: str
    """Safe mode's table of what its packages define (``keras_pickle/_safe_mode/vocabulary/<file>``)."""
    backend: str | None
    """The one backend it runs on; ``None``: Keras's configured backend."""
    imports_any_module: bool
    """Its deserializer imports any module a config names (tf-keras); else only Keras's own (Keras 3)."""
    reads_keras_modules_as_own: bool
    """A config's ``keras.*`` module is read as the dialect's package (tf-keras writes both spellings)."""
    dotted_class_names: bool
    """A dotted class name is resolved attribute by attribute from its module (tf-keras)."""
    op_layer_calls: bool
    """Its TensorFlow op layers (``TFOpLambda``, ``SlicingOpLambda``) name the function they call (tf-keras)."""

    def own_module(self, module: str) -> str:
        """``module`` as the deserializer reads it: ``keras.*`` as ``tf_keras.*`` where the dialect does so."""
        if self.reads_keras_modules_as_own and (module == "keras" or module.startswith("keras.")):
            return self.package + module.removeprefix("keras")
        return module


KERAS3 = Traits(
    name=DIALECT_KERAS3,
    title="Keras 3",
    keras="Keras",
    package="keras",
    vocabulary="keras3.json",
    backend=None,
    imports_any_module=False,
    reads_keras_modules_as_own=False,
    dotted_class_names=False,
    op_layer_calls=False,
)
TF_KERAS = Traits(
    name=DIALECT_TF_KERAS,
    title="tf-keras (Keras 2)",
    keras="tf-keras",
    package="tf_keras",
    vocabulary="tf_keras.json",
    backend="tensorflow",
    imports_any_module=True,
    reads_keras_modules_as_own=True,
    dotted_class_names=True,
    op_layer_calls=True,
)
BY_NAME = {traits.name: traits for traits in (KERAS3, TF_KERAS)}
PACKAGES = tuple(traits.package for traits in BY_NAME.values())
"""The packages of every dialect: what Keras itself defines."""


def of(name: Any) -> Traits:
    """The traits of the dialect a header names; Keras 3's where it names none (format versions 1 to 3, which
    only Keras 3 wrote) or one this version does not know (the schema refuses such a payload before it loads)."""
    return BY_NAME.get(name, KERAS3) if isinstance(name, str) else KERAS3


def is_keras_module(module: Any) -> bool:
    """Whether ``module`` is a dialect's package or inside one."""
    return isinstance(module, str) and module.split(".", 1)[0] in PACKAGES
