"""Losses, metrics and learning-rate schedules that travel through their recorded constructor arguments.

Keras rebuilds a ``Loss``, ``Metric`` or ``LearningRateSchedule`` as ``cls(**config)``. A user subclass
breaks that in two ways keras.io's own examples show:

* its constructor takes no ``**kwargs`` (the guide's ``CustomMSE(regularization_factor=0.1,
  name="custom_mse")``), and ``Loss.get_config`` writes ``reduction`` and ``dtype``: loading fails with
  ``TypeError``;
* it defines no ``get_config``: a schedule's raises ``NotImplementedError`` (keras.io's ``WarmUpCosine``),
  a loss's or metric's writes only the base class's fields, so an argument like
  ``regularization_factor=0.5`` would come back as its default.

While ``install()`` is in effect, constructing such a subclass (one outside Keras whose ``from_config``
is Keras's) records its arguments, as :mod:`keras_pickle._keras3.recorded.records` does for layers. Within a dump
its config is then the placeholder ``{"name", "keras_pickle_constructed": i}`` whenever its constructor
is the class's own but its ``get_config`` is Keras's, or its config does not bind to its constructor,
and the object is rebuilt by calling its class with the recorded arguments
(:mod:`keras_pickle._keras3.recorded.construct`). An object
constructed before ``install()`` that would not rebuild is refused at ``dumps`` (:func:`refusal`), its
class named first.
"""

from __future__ import annotations

import functools
import inspect
import types
import weakref
from collections.abc import Iterator
from typing import Any

import keras

from . import records as _records
from .records import CONSTRUCTED_KEY


@functools.lru_cache(maxsize=1)
def bases() -> tuple[type, ...]:
    """The Keras classes whose user subclasses record their arguments."""
    return (keras.losses.Loss, keras.metrics.Metric, keras.optimizers.schedules.LearningRateSchedule)


def _is_keras_class(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module == "keras" or module.startswith(("keras.", "keras_pickle."))


_recording: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def records_arguments(cls: type) -> bool:
    """Whether constructing ``cls`` records its arguments: a user subclass rebuilt by Keras's ``cls(**config)``."""
    known = _recording.get(cls)
    if known is None:
        from_config = getattr(cls.from_config, "__func__", None)
        known = _recording[cls] = (
            not _is_keras_class(cls)
            and issubclass(cls, bases())
            and from_config is not None
            and _is_keras_class(_defining_class(cls, "from_config"))
        )
    return known


def _defining_class(cls: type, name: str) -> type:
    return next(klass for klass in cls.__mro__ if name in vars(klass))


def _config_complete(cls: type) -> bool:
    """Whether ``cls``'s config can hold its constructor's arguments: a user class defines ``get_config``, or
    the constructor is Keras's own (``zoo``'s ``CustomMSE`` defines ``call`` only). A user constructor with a
    Keras ``get_config`` (keras.io's ``CustomMSE(regularization_factor)``) writes none of its arguments."""
    return not _is_keras_class(_defining_class(cls, "get_config")) or _is_keras_class(_defining_class(cls, "__init__"))


def recording_new(base: type) -> staticmethod:
    """The ``__new__`` ``install()`` gives ``base`` (one of :func:`bases`, which has none of its own)."""

    def __new__(cls, *args, **kwargs):
        obj = super(base, cls).__new__(cls)
        if type(obj) is cls and records_arguments(cls):
            _records.remember_arguments(obj, args, kwargs)
            object.__setattr__(obj, "get_config", types.MethodType(_config_or_placeholder, obj))
        return obj

    hook = staticmethod(__new__)
    hook.__keras_pickle__ = True
    return hook


def passthrough_new(base: type) -> staticmethod:
    """A ``__new__`` that records nothing, for ``uninstall()`` to leave on ``base`` instead of the hook."""

    def __new__(cls, *args, **kwargs):
        return super(base, cls).__new__(cls)

    return staticmethod(__new__)


def _config_or_placeholder(self: Any) -> dict:
    """``self``'s config; within a dump, the placeholder where the config could not rebuild ``self``."""
    if not _records.collecting() or _records.init_arguments(self) is None:
        return type(self).get_config(self)
    if config_rebuilds(self):
        return type(self).get_config(self)
    placeholder: dict[str, Any] = {CONSTRUCTED_KEY: _records.constructed_index(self)}
    name = getattr(self, "name", None)
    return {"name": name, **placeholder} if isinstance(name, str) else placeholder


def config_rebuilds(obj: Any) -> bool:
    """Whether the config holds the constructor's arguments and ``type(obj)(**obj.get_config())`` binds."""
    cls = type(obj)
    if not _config_complete(cls):
        return False
    try:
        config = cls.get_config(obj)
        inspect.signature(cls.__init__).bind(None, **config)
    except Exception:
        return False
    return True


def refusal(obj: Any) -> str | None:
    """Why ``obj`` (a compile object constructed before ``install()``) would not load, or None if it would."""
    if _records.init_arguments(obj) is not None:
        return None
    lost = _config_failure(obj)
    if lost is None:
        return None
    return (
        f"{_named(obj)} cannot be rebuilt from its config: {lost}. "
        "Call keras_pickle.install() before constructing it (its constructor arguments then travel with it), "
        f"or {_REMEDY.format(cls=type(obj).__name__)}."
    )


def standalone_refusal(obj: Any) -> str | None:
    """Why ``obj``, pickled alone (not inside a model), would not load, or None if it would.

    A config-only payload carries no recorded constructor call: a loss or metric that only its
    recorded arguments could rebuild travels inside the model compiled with it, not alone.
    """
    lost = _config_failure(obj)
    if lost is None:
        return None
    return (
        f"{_named(obj)} cannot be pickled alone: {lost}. Pickle the model compiled with it instead (its "
        f"constructor arguments travel in the model's payload), or {_REMEDY.format(cls=type(obj).__name__)}."
    )


_REMEDY = (
    "give {cls} a get_config() returning exactly its constructor arguments and accept **kwargs in __init__, "
    "passing them to super().__init__(**kwargs)"
)


def _config_failure(obj: Any) -> str | None:
    """How rebuilding ``obj`` from its config (``cls(**config)``) would fail, for a user subclass Keras
    rebuilds that way; None when it would not fail."""
    cls = type(obj)
    if not records_arguments(cls):
        return None
    try:
        config = cls.get_config(obj)
    except Exception as e:
        return f"its get_config() raises {type(e).__name__}: {e}".rstrip(": ")
    try:
        signature = inspect.signature(cls.__init__)
        bound = signature.bind(None, **config)
    except TypeError as e:
        return f"Keras rebuilds it as {cls.__name__}(**config), which its constructor refuses ({e})"
    except ValueError:  # no signature to read
        return None
    if _config_complete(cls):
        return None
    # Its constructor is its own, its get_config Keras's: an argument the config omits comes back as
    # its default. Lost where it was passed (or, unrecorded, may have been).
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    omitted = [
        name
        for name, parameter in list(signature.parameters.items())[1:]
        if name not in bound.arguments and parameter.kind not in variadic
    ]
    recorded = _records.init_arguments(obj)
    if recorded is not None:
        args, kwargs = recorded
        try:
            passed = signature.bind(None, *args, **kwargs).arguments
        except TypeError:
            passed = {name: None for name in omitted}
        omitted = [name for name in omitted if name in passed]
    if not omitted:
        return None
    return f"its get_config() is Keras's, which does not hold {', '.join(omitted)} (it would come back as its default)"


def _named(obj: Any) -> str:
    name = getattr(obj, "name", None)
    return f"{type(obj).__name__} '{name}'" if isinstance(name, str) else type(obj).__name__


def of_model(model: Any) -> Iterator[Any]:
    """Every loss, metric and learning-rate schedule ``model``'s compile config will serialize, each once."""
    config = getattr(model, "_compile_config", None)
    seen: set[int] = set()
    stack = [getattr(config, "config", None)]
    optimizer = getattr(model, "optimizer", None)
    for candidate in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        stack.append(getattr(candidate, "_learning_rate", None))
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, bases()):
            yield value
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
