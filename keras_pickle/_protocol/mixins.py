"""The pickle protocol for Keras classes: one mixin per kind of Keras object.

Each mixin is usable on its own (``class MyModel(LayerPickleMixin,
keras.Model)``); ``install()`` (:mod:`keras_pickle._protocol.install`) copies the mixins' protocol methods onto
Keras's own base classes so that ``pickle``, ``copy``, joblib, cloudpickle
and friends use keras_pickle for every Keras object.

A class that defines its own ``__reduce__`` / ``__reduce_ex__`` keeps it:
keras_pickle only supplies the protocol where Keras's would apply.
"""

from __future__ import annotations

import copyreg
import pickle
from collections.abc import Callable
from typing import Any

from .._capture import encode as _capture_encode
from .._keras3.recorded import compile_metrics as _compile_metrics
from .._keras3.recorded import records as _records
from ..errors import PickleRefusedError
from . import copy as _copy
from . import dialects as _dialects
from . import opt_in as _opt_in
from . import written_models as _written_models
from .reconstruct import part_of, restore

PROTOCOL_ATTRS = ("__reduce_ex__", "__reduce__", "__deepcopy__", "__copy__")
_MARK = "__keras_pickle__"


def _ours(function: Callable) -> Callable:
    setattr(function, _MARK, True)
    return function


def _user_reducer(obj: Any) -> Callable[[int], Any] | None:
    """The pickling hook a user class below the Keras base defines, if any."""
    for cls in type(obj).__mro__:
        hooks = [cls.__dict__.get(name) for name in ("__reduce_ex__", "__reduce__")]
        if any(getattr(hook, _MARK, False) for hook in hooks):
            return None
        if cls.__module__.startswith(("keras.", "builtins")) or not any(hooks):
            continue
        reduce_ex, reduce = hooks
        if reduce_ex is not None:
            return lambda protocol: reduce_ex(obj, protocol)
        return lambda protocol: reduce(obj)
    return None


def reduced_here(obj: Any) -> bool:
    """Whether ``pickle`` reduces ``obj`` with keras_pickle's own reducer: its class has one of the mixins' marked
    ``__reduce_ex__``, defines no pickling hook of its own below the Keras base, and ``copyreg`` names no reducer
    for it."""
    return (
        getattr(getattr(type(obj), "__reduce_ex__", None), _MARK, False)
        and _user_reducer(obj) is None
        and type(obj) not in copyreg.dispatch_table
    )


class LayerPickleMixin:
    """Pickle a layer or model as a keras_pickle payload; copy it in-process.

    ``pickle`` stores config, every variable (weights, optimizer state, RNG
    seed state, lookup tables and vocabularies) and the custom objects the
    config needs. ``copy.deepcopy`` and ``copy.copy`` both return an
    independent copy that shares no variable with the original.
    """

    @_ours
    def __reduce_ex__(self, protocol):
        custom = _user_reducer(self)
        if custom is not None:
            return custom(protocol)
        return _reduce_layer(self, protocol)

    @_ours
    def __reduce__(self):
        # Never consults user hooks: a user __reduce__ may call super().__reduce__().
        return _reduce_layer(self, pickle.DEFAULT_PROTOCOL)

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_layer(self, memo)

    @_ours
    def __copy__(self):
        return _copy.copy_layer(self, {})


def _reduce_layer(layer: Any, protocol: int) -> tuple:
    reduced = restore, _capture_encode.layer_payload(layer, protocol, _dialects.of(layer))
    _written_models.note_pickled(layer)
    # Its optimizer and metrics, pickled after it in the same stream, come back as its own: recorded now
    # as well as at compile(), so that a model compiled before install() is no exception.
    _records.record_owned_parts(layer)
    return reduced


class LossPickleMixin:
    """Pickle a (stateless) loss as its config plus the custom objects it names; ``copy.deepcopy`` rebuilds
    it the same way, or copies it attribute by attribute where its config cannot rebuild it."""

    @_ours
    def __reduce_ex__(self, protocol):
        custom = _user_reducer(self)
        if custom is not None:
            return custom(protocol)
        return restore, _capture_encode.config_payload(self, _capture_encode.KIND_LOSS, protocol, _dialects.of(self))

    @_ours
    def __reduce__(self):
        return self.__reduce_ex__(pickle.DEFAULT_PROTOCOL)

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_loss(self, memo)


def _opt_in_covers(kind: str, obj: Any) -> bool:
    """Whether ``install(allow=(kind,))`` can pickle ``obj``: every kind for Keras 3; callbacks for tf-keras,
    whose metrics and optimizers are carried by the model they belong to."""
    return kind == "callbacks" or _dialects.of(obj).records_calls


def carried_whole(kind: str, obj: Any, owned: tuple[Any, str]) -> bool:
    """Whether the payload of ``obj``'s model (``owned``: ``(model, path)``) carries ``obj`` with all its state.

    Everything a model owns, a compile metric's running totals included once the model's compile metrics are
    built (:func:`keras_pickle._keras3.recorded.compile_metrics.carried`). A compile metric the model has not built
    yet (compiled, never fitted or evaluated) travels as the model's only while it holds nothing a fresh one
    would not."""
    if not (kind == "metrics" and owned[1].startswith("compile_metrics[")) or _opt_in.holds_no_state(kind, obj):
        return True
    carried = {id(variable) for _key, variable in _compile_metrics.carried(owned[0])}
    return all(id(variable) in carried for variable in obj.variables)


def _refusal(why: str, instead: tuple[str, ...], kind: str) -> tuple[Callable, Callable]:
    """``__reduce_ex__`` / ``__reduce__`` that refuse with ``why`` on the first line, then each remedy of
    ``instead`` (and what a model that holds it, or ``allow=``, changes) on a line of its own.

    Under ``install(allow=(kind,))`` they pickle the object with its complete
    state instead (see :func:`._opt_in.allowed_reduce`). The hooks are closures, not
    methods reading class attributes, because ``install()`` copies them onto
    Keras classes that lack those attributes.
    """

    def refuse(obj):
        cls = type(obj)
        opt_in = f"Or opt in: keras_pickle.install(allow=({kind!r},)) pickles {kind} with their complete state."
        if not _opt_in_covers(kind, obj):
            opt_in = ""
        elif kind == "optimizers":
            opt_in = "" if getattr(obj, "built", False) else opt_in.replace(" with", " that are not built yet, with")
        name = _opt_in.public_name(cls)
        owned = _records.owner(obj)
        remedies = [
            *instead,
            f"If a model holds it, pickle that model before it in the same pickle (pickle.dumps((model, "
            f"{kind[:-1]}))), and it comes back as that model's, with the model's state.",
        ]
        if owned is not None and not carried_whole(kind, obj, owned):
            remedies = [
                f"It is {type(owned[0]).__name__} '{owned[0].name}''s {owned[1]}, which holds totals while the "
                "model has not built its compile metrics (it was never fitted or evaluated), so the model's own "
                "pickle cannot carry them.",
                "If they do not matter, call metric.reset_state() first and it travels as that model's "
                f"(pickle.dumps((model, {kind[:-1]}))).",
            ]
        elif owned is not None:
            remedies = [
                f"It belongs to {type(owned[0]).__name__} '{owned[0].name}' (its {owned[1]}): pickle that model "
                f"before it in the same pickle, e.g. pickle.dumps((model, {kind[:-1]})), and it comes back as "
                "that model's, with the model's state."
            ]
        lines = [f"Refusing to pickle {name}: {why}", *(f"  {remedy}" for remedy in [*remedies, opt_in] if remedy)]
        return PickleRefusedError("\n".join(lines), obj_type=cls)

    def reduce(obj, protocol):
        # An explicit opt-in wins (the object alone, with its complete state), except for a built
        # optimizer, which allow= never covers; then "its model's" if that model went first; else no.
        allowed = _opt_in.allows(kind, obj) and _opt_in_covers(kind, obj)
        if allowed and not (kind == "optimizers" and getattr(obj, "built", False)):
            return _opt_in.allowed_reduce(obj, kind, protocol)
        owned = _records.owner(obj)
        if owned is not None and _written_models.pickled_before(owned[0]) and carried_whole(kind, obj, owned):
            return part_of, owned
        if allowed:
            return _opt_in.allowed_reduce(obj, kind, protocol)
        if _opt_in_covers(kind, obj) and _opt_in.holds_no_state(kind, obj):
            return _opt_in.stateless_reduce(obj, kind, protocol)  # nothing to lose: its config, faithfully
        raise refuse(obj)

    @_ours
    def __reduce_ex__(self, protocol):
        custom = _user_reducer(self)
        if custom is not None:
            return custom(protocol)
        return reduce(self, protocol)

    @_ours
    def __reduce__(self):
        return reduce(self, pickle.DEFAULT_PROTOCOL)

    return __reduce_ex__, __reduce__


class OptimizerPickleMixin:
    """Refuse to pickle an optimizer; copy it with its iterations and slots.

    ``copy.copy`` and ``copy.deepcopy`` both return an optimizer with its own
    variables: one that shared them would corrupt both.
    """

    __reduce_ex__, __reduce__ = _refusal(
        why="an optimizer's state (its iterations and one slot per model weight) belongs to "
        "the variables of the model it trains and would not survive pickling on its own.",
        instead=(
            "Pickle the compiled model instead: it carries its optimizer with the full optimizer state.",
            "Or pass the class and its config: (type(optimizer), optimizer.get_config()); scikeras: "
            "optimizer='adam', optimizer__learning_rate=0.01. An optimizer that was never built pickles by its config.",
        ),
        kind="optimizers",
    )

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_optimizer(self, memo)

    @_ours
    def __copy__(self):
        return _copy.copy_optimizer(self, {})


class MetricPickleMixin:
    """Refuse to pickle a metric; copy it with its accumulated state.

    ``copy.copy`` and ``copy.deepcopy`` both return a metric with its own
    variables.
    """

    __reduce_ex__, __reduce__ = _refusal(
        why="a metric's accumulated state (its variables) is not part of its config and would be silently reset.",
        instead=(
            "Pickle the compiled model: it carries its metrics, with their totals once it was fitted.",
            "Or send the value: float(metric.result()).",
            "Or pass the class and its config: (type(metric), metric.get_config()).",
        ),
        kind="metrics",
    )

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_metric(self, memo)

    @_ours
    def __copy__(self):
        return _copy.copy_metric(self, {})


class CallbackPickleMixin:
    """Refuse to pickle a callback; copy it attribute by attribute.

    ``copy.deepcopy`` copies every attribute deeply; ``copy.copy`` is the
    usual shallow copy.
    """

    __reduce_ex__, __reduce__ = _refusal(
        why="a callback's runtime state (the model it is attached to, counters, open "
        "writers) is not part of any config and would not survive.",
        instead=(
            "Pass the class and its arguments and create the callback where it runs, "
            "e.g. functools.partial(keras.callbacks.EarlyStopping, patience=3).",
        ),
        kind="callbacks",
    )

    @_ours
    def __deepcopy__(self, memo):
        return _copy.copy_plain(self, memo)

    @_ours
    def __copy__(self):
        return _copy.shallow_copy_plain(self)
