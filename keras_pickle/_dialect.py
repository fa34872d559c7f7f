"""Which Keras an object or a payload belongs to: Keras 3 (``keras``) or tf-keras (Keras 2, ``tf_keras``).

The dump side and the load side are shared; where they need a dialect's own answer (how a model is
walked, serialized, rebuilt, what safe mode refuses in it) they ask :func:`of` or the payload's
header (its ``dialect``, which every header has once :mod:`keras_pickle._wire.upgrade` brought it to the
current format version) and go to :mod:`keras_pickle._keras3` or
:mod:`keras_pickle._tfkeras`. Nothing here imports a Keras: tf-keras is imported only when a payload
or an object of it is met (it imports TensorFlow).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ._wire.schema import DIALECT_KERAS3, DIALECT_NAMES, DIALECT_TF_KERAS
from .errors import DialectError

KERAS3, TF_KERAS = DIALECT_KERAS3, DIALECT_TF_KERAS
_PACKAGES = {KERAS3: "keras", TF_KERAS: "tf_keras"}


def of_class(cls: type) -> str:
    """The dialect whose base classes ``cls`` derives from: tf-keras if any class of its MRO is tf-keras's."""
    for klass in getattr(cls, "__mro__", (cls,)):
        module = getattr(klass, "__module__", None) or ""
        if module == "tf_keras" or module.startswith("tf_keras."):
            return TF_KERAS
    return KERAS3


def of(obj: Any) -> str:
    """The dialect of a Keras object (a layer, model, loss, metric, optimizer or callback)."""
    return of_class(type(obj))


def version(dialect: str) -> str | None:
    """The installed version of ``dialect``'s package, if it is imported."""
    module = sys.modules.get(_PACKAGES[dialect])
    return getattr(module, "__version__", None)


def backend(dialect: str) -> str:
    """The backend ``dialect`` runs on here: Keras 3's configured one; TensorFlow for tf-keras."""
    if dialect == TF_KERAS:
        return "tensorflow"
    return sys.modules["keras"].backend.backend()


def name(dialect: str) -> str:
    return DIALECT_NAMES.get(dialect, str(dialect))


def require(dialect: str, written_version: str) -> None:
    """Import ``dialect``'s package for a payload that holds one of its models, or raise
    :class:`DialectError` naming both sides: what wrote the payload and what this process has."""
    if dialect == KERAS3 or sys.modules.get(TF_KERAS_MODULE) is not None:
        return
    try:
        importlib.import_module(TF_KERAS_MODULE)
    except ImportError as e:
        keras_version = getattr(sys.modules.get("keras"), "__version__", "?")
        raise DialectError(
            f"This payload holds a {name(dialect)} model (tf-keras {written_version}), and this process has "
            f"Keras 3 ({keras_version}) but no tf-keras. keras_pickle rebuilds a model in the dialect that "
            f"wrote it and does not convert between them: pip install tf-keras=={written_version}, or pickle the "
            "model again from a Keras 3 process.",
            written=dialect,
            here=(KERAS3,),
        ) from e


TF_KERAS_MODULE = "tf_keras"
