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
* What the object's dialect adds is its copy plan (``Dialect.copy_plan``), asked once per object: Keras 3
  (:mod:`keras_pickle._keras3.copy_plan`) records for the copy what keras_pickle records beside the original
  (constructor and ``compile()`` arguments, copied through the same memo) and retracks it; tf-keras
  (:mod:`keras_pickle._tfkeras.copy_plan`) rebuilds a model's optimizer from its config (tf-keras's optimizers do
  not deep-copy) and gives it the original's iterations and slots, built for the copy's trainable variables.
"""

from __future__ import annotations

import types
from copy import deepcopy
from typing import Any

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
    plan = _dialects.of(obj).copy_plan(obj, memo)
    deepcopy([*_direct_layers(obj), *plan.first], memo)
    deepcopy(_variables(obj), memo)
    with plan.scope():
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
    plan.finish(twin)
    return twin


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
