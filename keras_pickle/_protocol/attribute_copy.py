"""The copy ``copy.deepcopy`` makes of a layer or model that has no hooks: attribute by attribute.

An in-process copy has the original at hand. Where a rebuild from the config cannot reproduce a
layer or model (an inline lambda as regularizer, initializer or constraint; a subclassed model never
built that owns variables; a layer built by a direct ``build()`` call),
:func:`keras_pickle._protocol.copy.copy_layer` copies it as ``copy.deepcopy`` copies an object without
hooks: a new instance of its class (``cls.__new__(cls)``, no constructor call) whose attributes are
deep copies of the original's, made through the caller's memo. Backend variables deep-copy themselves
with their values, so every variable of the copy equals the original's and none is shared; functions
and classes (inline lambdas included) are shared, as ``deepcopy`` never copies them.

Contract, beyond ``deepcopy``'s own:

* The layers the object holds directly, and the optimizer and metrics a Keras 3 model owns, are
  copied first (each by its own ``__deepcopy__``, which records its variables in the memo), then the
  object's variables, then the rest: an optimizer among the attributes is built for the copy's
  variables, never the original's.
* Keras 3's tracked containers (``TrackedList``, ``TrackedDict``...) are filled with Keras's tracking
  off, as the stores they feed are copied as they are; the copy's tracker then knows its own objects.
* Keras 3's ``Layer.__new__`` gives each instance a ``build()`` and ``quantize()`` closing over that
  instance: the copy keeps the ones its own ``__new__`` made.
* The functions a model compiled for itself (``train_function``, ``test_function``,
  ``predict_function``, ``train_tf_function``) close over the original: the copy starts without them
  and makes its own on first use, as after ``compile()``.
* A tf-keras model's optimizer (tf-keras's optimizers do not deep-copy) is rebuilt from its config and
  given the original's iterations and slots, built for the copy's trainable variables.
* What keras_pickle records beside a Keras 3 object (constructor and ``compile()`` arguments, the
  optimizer and metrics it owns: :mod:`keras_pickle._keras3.recorded.records`) is recorded for the copy, with
  the arguments copied through the same memo.
"""

from __future__ import annotations

import contextlib
import json
import types
from collections.abc import Callable
from copy import deepcopy
from typing import Any

from keras.src.utils import tracking

from .._blueprint import CapturedState
from .._capture import custom_objects as _custom_objects
from .._keras3.recorded import records as _records
from .._tfkeras import classes as _tfkeras_classes
from .._tfkeras import rebuild as _tfkeras_rebuild
from .._tfkeras import state as _tfkeras_state
from .._tfkeras import walk as _tfkeras_walk
from . import dialects as _dialects

COMPILED_FUNCTIONS = ("train_function", "test_function", "predict_function", "train_tf_function")
"""Attributes holding functions a model compiled for itself; a copy starts with them unset (``None``)."""


def copy_attributes(obj: Any, memo: dict) -> Any:
    """A new ``type(obj)`` whose attributes are deep copies of ``obj``'s (see the module); ``memo`` maps
    ``id(obj)`` to it before any attribute is copied, so cycles and shared parts stay consistent."""
    cls = type(obj)
    twin = cls.__new__(cls)
    memo[id(obj)] = twin
    own = _state_of(obj)
    fresh = dict(vars(twin))
    keras3 = _dialects.of(obj) is _dialects.KERAS3
    parts = [part for part, _path in _records.owned_parts(obj)] if keras3 else []
    give_optimizer_state = None if keras3 else _tf_keras_optimizer(obj, memo)
    deepcopy([*_direct_layers(obj), *parts], memo)
    deepcopy(_variables(obj), memo)
    with tracking.DotNotTrackScope() if keras3 else contextlib.nullcontext():
        state = deepcopy({k: v for k, v in own.items() if k not in fresh or not _closure(fresh[k])}, memo)
    for name in COMPILED_FUNCTIONS:
        if name in state:
            state[name] = None
    kept = {k: v for k, v in fresh.items() if k in own and _closure(v)}
    vars(twin).clear()
    setstate = getattr(twin, "__setstate__", None)
    if setstate is not None:
        setstate(state)
    else:
        vars(twin).update(state)
    vars(twin).update(kept)
    if keras3:
        _records.copy_records(obj, twin, memo)
        _retrack(twin)
    if give_optimizer_state is not None:
        give_optimizer_state(twin)
    return twin


def _tf_keras_optimizer(model: Any, memo: dict) -> Callable[[Any], None] | None:
    """For a tf-keras model compiled with a ``tf_keras.optimizers`` optimizer: its copy, rebuilt from its
    config, put in ``memo`` (tf-keras's optimizers do not deep-copy: their distribution strategy refuses a
    second instance), and what gives it the original's state once the model's copy is assembled: built
    for the copy's trainable variables when the original was, every value (iterations, slots) in order."""
    optimizer = _tfkeras_walk.optimizer_of(model)
    if not _tfkeras_classes.is_optimizer(optimizer) or _tfkeras_classes.is_legacy_optimizer(optimizer):
        return None
    config = _tfkeras_rebuild.config_of(optimizer)
    custom_objects = _custom_objects.collect(config, optimizer, _dialects.TF_KERAS)
    memo[id(optimizer)] = _tfkeras_rebuild.from_config(json.dumps(config), custom_objects, safe_mode=False)
    state = CapturedState(
        variables=[],
        optimizer_variables=[
            (key, _tfkeras_state.read(v)) for key, v in _tfkeras_walk.keyed(list(optimizer.variables))
        ],
        layer_states=[],
        optimizer_built=bool(getattr(optimizer, "_built", False)),
    )
    return lambda twin: _tfkeras_state.apply_to_optimizer(twin, state)


def _retrack(twin: Any) -> None:
    """Point the copy's Keras 3 tracker at what its stores hold: the copied ``stored_ids`` are the
    original's objects' ids, which would let the copy track one of its own objects twice."""
    tracker = vars(twin).get("_tracker")
    if isinstance(tracker, tracking.Tracker):
        tracker.stored_ids = {name: {id(value) for value in store} for name, (_test, store) in tracker.config.items()}


def _state_of(obj: Any) -> dict:
    """What ``copy.deepcopy`` copies of ``obj``: ``__getstate__()`` (tf-keras leaves out its thread-locals
    and locks there, which its ``__setstate__`` makes anew), as a new dict."""
    state = obj.__getstate__()
    if not isinstance(state, dict):
        raise TypeError(f"{type(obj).__name__}.__getstate__() returned {type(state).__name__}, not a dict")
    return dict(state)


def _closure(value: Any) -> bool:
    return isinstance(value, types.FunctionType) and bool(value.__closure__)


def _direct_layers(obj: Any) -> list[Any]:
    flatten = getattr(obj, "_flatten_layers", None)
    if flatten is None:
        return []
    try:
        return list(flatten(include_self=False, recursive=False))
    except Exception:  # a half-initialised object: its attributes are copied as they are
        return []


def _variables(obj: Any) -> list[Any]:
    try:
        return list(getattr(obj, "variables", None) or [])
    except Exception:  # an unbuilt Sequential refuses to list its weights
        return []
