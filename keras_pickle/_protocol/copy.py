"""In-process copies: ``copy.deepcopy`` and ``copy.copy`` of Keras objects.

A copy never leaves the process, so it needs no serialization: the object is
rebuilt from its config with the live custom objects, and every variable is
created straight from the original's value. The copy shares no variable with the
original. The ``memo`` is honoured and filled: after copying a model, the
memo maps each of its layers, variables and its optimizer to their copies, so
``deepcopy({"model": m, "layer": m.layers[0]})`` stays consistent.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import keras

from .._blueprint import describe
from .._capture import config as _config
from .._capture import custom_objects as _custom_objects
from .._keras3.recorded import construct as _construct
from .._keras3.recorded import records as _records
from .._keras3.recorded import weight_decay as _weight_decay
from .._rebuild import assign_state as _rebuild_state
from .._rebuild import from_blueprint as _from_blueprint
from ..errors import KerasPickleError, KerasPicklingError, StateMismatchError
from . import attribute_copy as _attribute_copy
from . import dialects as _dialects


def _rebuild_twin(obj: Any) -> Any:
    """A Keras 3 metric, loss or optimizer rebuilt from its config (tf-keras's travel with their model)."""
    config = _config.config_of(obj)
    custom_objects = _custom_objects.collect(config, obj, _dialects.KERAS3)
    return _from_blueprint.from_config(
        _config.config_to_json(config, obj),
        custom_objects,
        safe_mode=False,
        expected_variables=len(getattr(obj, "variables", ())),
    )


def copy_layer(layer: Any, memo: dict) -> Any:
    """An independent copy of a layer or model, with every variable equal to the original's.

    Rebuilt from its config and given every value (what a pickle carries, without serializing), or,
    where that rebuild cannot reproduce it, copied attribute by attribute (see :func:`_rebuilt_or_copied`).
    """
    return _rebuilt_or_copied(layer, memo, _rebuilt_copy)


def _rebuilt_or_copied(obj: Any, memo: dict, rebuild: Callable[[Any, dict], Any]) -> Any:
    """``rebuild(obj, memo)``; where it fails (the config cannot reproduce ``obj``: an inline lambda in
    it, a model never built, a config that does not describe the object, a compile-time container with
    no config), ``obj`` copied attribute by attribute, as ``copy.deepcopy`` copies it without keras_pickle
    (:mod:`.attribute_copy`). Raises :class:`KerasPicklingError` naming both causes only when both fail.
    """
    try:
        return rebuild(obj, memo)
    except Exception as rebuild_error:
        memo.pop(id(obj), None)
        try:
            return _attribute_copy.copy_attributes(obj, memo)
        except Exception as copy_error:
            memo.pop(id(obj), None)
            part = str(copy_error)
            if isinstance(copy_error, KerasPicklingError) and part.startswith(_CANNOT):
                # A part failed both ways: that part, with its two causes; the same causes made this rebuild fail.
                raise KerasPicklingError(
                    f"{_CANNOT}{describe(obj)}: a part of it cannot be copied: {part.removeprefix(_CANNOT)}",
                    original_error=copy_error,
                ) from copy_error
            raise KerasPicklingError(
                f"Cannot deep-copy {describe(obj)}: rebuilding it from its config failed "
                f"({_gist(rebuild_error)}), and copying its attributes failed ({_gist(copy_error)}).",
                original_error=copy_error,
            ) from copy_error


_CANNOT = "Cannot deep-copy "


def _gist(error: BaseException, limit: int = 400) -> str:
    """``"Type: message"`` in a copy's terms, its middle cut where long (never a keras_pickle error's: its remedy
    would go). Keras puts the whole config first and
    the cause last ("Exception encountered: ..."): the cause alone. An error raised on the way to a pickle
    ("Cannot pickle X", pickle's "cannot pickle 'lock' object") is said of the copy that raised it."""
    text = str(error).rpartition("Exception encountered: ")[2]
    text = _PICKLE_WORDS.sub(lambda found: f"{found.group(1)}annot copy", " ".join(text.split()))
    text = _ENCODED.sub("...", text)  # a lambda's bytecode, as Keras's config spells it
    if len(text) > limit and not isinstance(error, KerasPickleError):  # keras_pickle's own end in their remedy
        text = f"{text[: limit // 3]} [...] {text[-(2 * limit) // 3 :]}"
    return f"{type(error).__name__}: {text}"


_PICKLE_WORDS = re.compile(r"\b([Cc])annot pickle")
_ENCODED = re.compile(r"(?:[A-Za-z0-9+/=]|\\n){60,}")


def _rebuilt_copy(layer: Any, memo: dict) -> Any:
    dialect = _dialects.of(layer)
    taken = dialect.snapshot(layer, dialect, copied_now=True, on_device=True)
    if taken.constructed or taken.compile_call is not None:
        # Arguments of recorded constructor and compile() calls are copied with the memo: a model
        # given to the constructor is copied once, wherever else the copied structure holds it.
        constructed = [
            _construct.Constructed(entry.cls, deepcopy(entry.args, memo), deepcopy(entry.kwargs, memo))
            for entry in taken.constructed
        ]
        taken = dataclasses.replace(taken, constructed=constructed, compile_call=deepcopy(taken.compile_call, memo))
    twin = dialect.rebuild(taken, safe_mode=False)
    memo[id(layer)] = twin
    _record_parts(layer, twin, memo)
    return twin


def _record_parts(original: Any, twin: Any, memo: dict) -> None:
    pairs = zip(original._flatten_layers(include_self=False), twin._flatten_layers(include_self=False))
    for a, b in pairs:
        if type(a) is type(b):
            memo.setdefault(id(a), b)
    for a, b in zip(original.variables, twin.variables):
        memo.setdefault(id(a), b)
    for part, path in _records.owned_parts(original):
        twin_part = _records.resolve_part(twin, path)
        if twin_part is not None and type(twin_part) is type(part):
            memo.setdefault(id(part), twin_part)
            for a, b in zip(part.variables, twin_part.variables):
                memo.setdefault(id(a), b)
            if isinstance(part, keras.optimizers.Optimizer):  # what its config omits (the model's is carried too)
                _weight_decay.copy_settings(part, twin_part, memo, original.variables)


def copy_metric(metric: Any, memo: dict) -> Any:
    """A metric with the same config and the same accumulated state (copied attribute by attribute where
    its config cannot rebuild it: a compiled model's metrics container, see :func:`_rebuilt_or_copied`)."""
    return _rebuilt_or_copied(metric, memo, _rebuilt_metric)


def _rebuilt_metric(metric: Any, memo: dict) -> Any:
    twin = _rebuild_twin(metric)
    memo[id(metric)] = twin
    _assign_all(metric, twin)
    return twin


def copy_loss(loss: Any, memo: dict) -> Any:
    """The loss its pickle payload rebuilds (its config; a user class's own reducer where it has one), or,
    where that fails (a compiled model's loss container has no config), copied attribute by attribute."""
    return _rebuilt_or_copied(loss, memo, _reduced_copy)


def _reduced_copy(obj: Any, memo: dict) -> Any:
    function, arguments, *rest = obj.__reduce_ex__(4)
    if rest and any(part is not None for part in rest):
        raise TypeError(f"{type(obj).__name__}.__reduce_ex__ returned state beyond a constructor call")
    twin = function(*deepcopy(arguments, memo))
    memo[id(obj)] = twin
    return twin


def copy_optimizer(optimizer: Any, memo: dict) -> Any:
    """An optimizer with the same config; if built, the same iterations and slots; the same settings of
    ``exclude_from_weight_decay()`` (:func:`keras_pickle._keras3.recorded.weight_decay.copy_settings`).

    The copy is built for the same variables, or for their copies when they
    were copied earlier in the same ``deepcopy`` call.
    """
    try:
        twin = _rebuild_twin(optimizer)
    except Exception as e:  # its attributes cannot be copied either (TensorFlow's strategy is a singleton)
        raise KerasPicklingError(
            f"Cannot deep-copy {describe(optimizer)}: rebuilding it from its config failed ({_gist(e)}). Give the "
            "class at fault a get_config(); or construct it after keras_pickle.install() and deep-copy the model "
            "the optimizer is compiled with (its constructor arguments travel with that model).",
            original_error=e,
        ) from e
    memo[id(optimizer)] = twin
    if optimizer.built:
        targets = getattr(optimizer, "_trainable_variables", None) or []
        twin.build([memo.get(id(v), v) for v in targets])
    _assign_all(optimizer, twin)
    for original, copied in (
        (optimizer, twin),
        (getattr(optimizer, "inner_optimizer", None), getattr(twin, "inner_optimizer", None)),
    ):
        if original is not None and copied is not None:
            _weight_decay.copy_settings(original, copied, memo)
    return twin


def copy_plain(obj: Any, memo: dict) -> Any:
    """What ``copy.deepcopy`` does for an object without custom hooks."""
    cls = type(obj)
    twin = cls.__new__(cls)
    memo[id(obj)] = twin
    state = deepcopy(obj.__dict__, memo)
    twin.__dict__.update(state)
    return twin


def shallow_copy_plain(obj: Any) -> Any:
    """What ``copy.copy`` does for an object without custom hooks."""
    cls = type(obj)
    twin = cls.__new__(cls)
    twin.__dict__.update(obj.__dict__)
    return twin


def _assign_all(original: Any, twin: Any) -> None:
    try:
        _rebuild_state.assign_in_order(
            list(twin.variables),
            [(v.path, v.value) for v in original.variables],
            owner=f"{type(original).__name__} '{getattr(original, 'name', '?')}'",
        )
    except StateMismatchError as e:
        raise StateMismatchError(f"Cannot deep-copy: {e}", path=e.path) from e
