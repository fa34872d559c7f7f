"""scikeras: keep keras_pickle's hooks, and do not pickle callbacks scikeras made.

Three things, all applied only while keras_pickle is installed:

* scikeras replaces ``keras.Model.__reduce__`` / ``__deepcopy__`` and the
  ``__reduce__`` of Loss, Metric and Optimizer when it is imported (config
  only, or a ``.keras`` zip). ``install()`` hands :func:`._imports.activate`
  its ``reapply``, which runs right after that import and puts keras_pickle's
  hooks back.
* The fitted ``model_`` comes first in the pickled state, so that an
  optimizer or metric instance given as a parameter, which the model was
  compiled with, pickles as that model's (full state, identity kept).
* Given callback *classes* (``callbacks=[EarlyStopping]``,
  ``callbacks__patience=2``, the scikeras way), a fitted estimator keeps the
  instances it created in ``_fit_callbacks`` / ``_predict_callbacks``; they
  would be refused like any callback. They are derived from the estimator's
  parameters, so the estimator's ``__getstate__`` leaves them out and
  ``__setstate__`` derives them again (``_initialize_callbacks()``), exactly
  as scikeras does at the start of every ``fit``. When any of them is an
  instance the user passed, they are pickled as they are: refused by
  default, or with their complete state under ``install(allow=("callbacks",))``.
* A parameter that is a function or class of the main script (``model=build_model`` with
  ``def build_model`` in the script or notebook, also inside a list such as ``metrics=[...]``)
  travels by value, as keras_pickle carries the main script's Keras classes: pickle stores
  functions by reference (``__main__.build_model``), which no other process can resolve, so a
  fitted search or estimator would load only in a rerun of the same script. Loading prefers the
  loading process's own ``build_model`` where its main script defines one; safe mode runs the
  carried code only with ``allow_by_value=True``.
"""

from __future__ import annotations

import types
from types import ModuleType
from typing import Any

import keras

from .._capture.main_script import ByValue, of_main_script

_MARK = "__keras_pickle__"
_MISSING = object()
_DERIVED = ("_fit_callbacks", "_predict_callbacks")
_PARAMS = ("callbacks", "fit__callbacks", "predict__callbacks")
_REDERIVE = "_keras_pickle_rederive_callbacks"

_patched: dict[str, Any] = {}  # name -> what BaseWrapper had before
_base: list[type] = []


def _ours(function):
    setattr(function, _MARK, True)
    return function


def _original(name: str):
    saved = _patched.get(name, _MISSING)
    if saved is not _MISSING:
        return saved
    for klass in _base[0].__mro__[1:]:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return getattr(object, name)


def _callback_ids(value: Any, found: set[int], depth: int = 0) -> set[int]:
    if isinstance(value, keras.callbacks.Callback):
        found.add(id(value))
    elif depth < 4 and isinstance(value, (list, tuple)):
        for item in value:
            _callback_ids(item, found, depth + 1)
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            _callback_ids(item, found, depth + 1)
    return found


class _ByValue(ByValue):
    """Pickled by value; copied (``copy.deepcopy`` of an estimator goes through ``__getstate__`` too) as the
    function or class itself, as ``copy`` treats functions and classes."""

    __slots__ = ()

    def __deepcopy__(self, memo: dict) -> Any:
        return self.target

    def __copy__(self) -> Any:
        return self.target


def _main_script_code(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, type)) and of_main_script(value)


def _by_value(value: Any) -> Any:
    """``value`` with each function or class of the main script, itself or one level inside a list, tuple or
    dict (``metrics=[...]``), wrapped to travel by value."""
    if _main_script_code(value):
        return _ByValue(value)
    if type(value) in (list, tuple) and any(_main_script_code(item) for item in value):
        return type(value)(_ByValue(item) if _main_script_code(item) else item for item in value)
    if type(value) is dict and any(_main_script_code(item) for item in value.values()):
        return {key: _ByValue(item) if _main_script_code(item) else item for key, item in value.items()}
    return value


@_ours
def __getstate__(self):
    state = _original("__getstate__")(self)
    if isinstance(state, dict) and "model_" in state:
        # The fitted model first: an optimizer or metric instance among the parameters is the
        # model's own, and pickles as "that model's" only after the model (see keras_pickle._protocol.written_models).
        state = {"model_": state["model_"], **state}
    if isinstance(state, dict):
        state = {key: _by_value(value) for key, value in state.items()}
    if not isinstance(state, dict) or not any(key in state for key in _DERIVED):
        return state
    passed: set[int] = set()
    for key in _PARAMS:
        _callback_ids(state.get(key), passed)
    made: set[int] = set()
    for key in _DERIVED:
        _callback_ids(state.get(key), made)
    if made & passed:
        return state
    state = {key: value for key, value in state.items() if key not in _DERIVED}
    state[_REDERIVE] = True
    return state


@_ours
def __setstate__(self, state):
    if isinstance(state, dict) and _REDERIVE in state:
        state = dict(state)
        del state[_REDERIVE]
        _original("__setstate__")(self, state)
        self._initialize_callbacks()
        return
    _original("__setstate__")(self, state)


def patch_wrappers(module: ModuleType) -> None:
    base = getattr(module, "BaseWrapper", None)
    if base is None or getattr(base.__dict__.get("__getstate__"), _MARK, False):
        return
    _base[:] = [base]
    for name, function in (("__getstate__", __getstate__), ("__setstate__", __setstate__)):
        _patched[name] = base.__dict__.get(name, _MISSING)
        setattr(base, name, function)


def unpatch_wrappers(module: ModuleType) -> None:
    base = getattr(module, "BaseWrapper", None)
    if base is None or not getattr(base.__dict__.get("__getstate__"), _MARK, False):
        return
    for name, original in _patched.items():
        if original is _MISSING:
            delattr(base, name)
        else:
            setattr(base, name, original)
    _patched.clear()
