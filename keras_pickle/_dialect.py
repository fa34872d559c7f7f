"""Which Keras an object or a payload belongs to: Keras 3 (``keras``) or tf-keras (Keras 2, ``tf_keras``),
and :class:`Dialect`, what keras_pickle asks of either.

An object's dialect is read off its classes (:func:`of`), a payload's off its header's ``dialect``
(which every header has once :mod:`keras_pickle._wire.upgrade` brought it to the current format
version). The shared layers never ask which Keras they hold: they are handed a :class:`Dialect`
(:mod:`keras_pickle._protocol.dialects` builds one for each) and call its functions. Nothing here
imports a Keras: tf-keras is imported only when a payload or an object of it is met (it imports
TensorFlow).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Callable
from typing import Any

from ._wire import dialect_traits
from ._wire.schema import DIALECT_KERAS3, DIALECT_TF_KERAS
from .errors import DialectError

KERAS3, TF_KERAS = DIALECT_KERAS3, DIALECT_TF_KERAS
TF_KERAS_MODULE = dialect_traits.TF_KERAS.package


@dataclasses.dataclass(frozen=True)
class CopyPlan:
    """What an attribute-by-attribute deep copy (:mod:`keras_pickle._protocol.attribute_copy`) does around an
    object's attributes, for the object's dialect."""

    first: list
    """What the object owns besides its layers that is copied before its attributes (through the same memo)."""
    scope: Callable[[], contextlib.AbstractContextManager]
    """Entered around copying the attributes."""
    finish: Callable[[Any], None]
    """``(copy) -> None``: run on the assembled copy."""


@dataclasses.dataclass(frozen=True)
class Dialect:
    """The same functions for each Keras: how an object's config is written, what travels for it (its
    blueprint), how it is rebuilt, where its custom objects are found, how safe mode resolves its
    configs' names. Each function that needs the dialect's other functions receives the dialect."""

    name: str
    """The header's ``dialect``: :data:`KERAS3` or :data:`TF_KERAS`."""
    config_of: Callable[[Any], dict]
    """An object's config as it travels (``(obj) -> dict``)."""
    snapshot: Callable[..., Any]
    """``(obj, dialect, *, copied_now, on_device) -> Blueprint``: everything that travels for a layer or model."""
    rebuild: Callable[..., Any]
    """``(blueprint, *, safe_mode) -> object``: a layer or model with every saved value."""
    from_config: Callable[..., Any]
    """``(config_json, custom_objects, *, safe_mode) -> object``: an object from its config alone."""
    live_layers: Callable[[Any], tuple[list, Any]]
    """``(obj or census) -> (layers, root)``: where the custom objects a config names are found."""
    registered_object: Callable[[str], Any]
    """``(key) -> object or None``: what the dialect's registry holds under ``key``."""
    resolver: Callable[[dict, dict], Any]
    """``(payload's custom objects, caller's) -> candidates``: safe mode's view of the deserializer."""
    safe_mode_scope: Callable[[], contextlib.AbstractContextManager]
    """The dialect's own safe mode, on for this thread within."""
    registries: Callable[[], list[dict]]
    """Where the deserializer looks names up beyond the payload's and the caller's custom objects."""
    adapt_body: Callable[[dict, dict], dict]
    """``(header, body) -> body``: a payload from a newer version of the dialect, adapted to this one."""
    copy_plan: Callable[[Any, dict], CopyPlan]
    """``(obj, memo) -> CopyPlan``: what a deep copy that copies ``obj`` attribute by attribute adds."""
    protocol_bases: Callable[[], dict[str, type]]
    """The base classes ``install()`` gives the pickle protocol, by role (``layer``, ``model``, ``loss``,
    ``optimizer``, ``metric``, ``callback``...): none while the dialect's package is not imported."""
    records_calls: bool
    """Whether ``install()`` records constructor and ``compile()`` calls of its objects, so that its
    metrics and optimizers travel with their state (Keras 3; tf-keras's travel with their model)."""


def of_class(cls: type) -> str:
    """The dialect whose base classes ``cls`` derives from: tf-keras if any class of its MRO is tf-keras's."""
    for klass in getattr(cls, "__mro__", (cls,)):
        module = getattr(klass, "__module__", None) or ""
        if module == TF_KERAS_MODULE or module.startswith(TF_KERAS_MODULE + "."):
            return TF_KERAS
    return KERAS3


def of(obj: Any) -> str:
    """The dialect of a Keras object (a layer, model, loss, metric, optimizer or callback)."""
    return of_class(type(obj))


def version(dialect: str) -> str | None:
    """The installed version of ``dialect``'s package, if it is imported."""
    module = sys.modules.get(dialect_traits.BY_NAME[dialect].package)
    return getattr(module, "__version__", None)


def backend(dialect: str) -> str:
    """The backend ``dialect`` runs on here: Keras 3's configured one; TensorFlow for tf-keras."""
    return dialect_traits.BY_NAME[dialect].backend or sys.modules["keras"].backend.backend()


def name(dialect: str) -> str:
    return dialect_traits.BY_NAME[dialect].title if dialect in dialect_traits.BY_NAME else str(dialect)


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
