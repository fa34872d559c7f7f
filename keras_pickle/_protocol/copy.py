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
from copy import deepcopy
from typing import Any

from .. import _dialect
from .._capture import config as _config
from .._capture import custom_objects as _custom_objects
from .._capture import payload as _capture_payload
from .._keras3 import construct as _construct
from .._keras3 import records as _records
from .._rebuild import build as _build
from .._rebuild import state as _rebuild_state
from .._tfkeras import build as _tfkeras_build
from ..errors import StateMismatchError


def _rebuild_twin(obj: Any) -> Any:
    config = _config.config_of(obj)
    custom_objects = _custom_objects.collect(config, obj)
    return _build.from_config(
        _config.config_to_json(config, obj),
        custom_objects,
        safe_mode=False,
        expected_variables=len(getattr(obj, "variables", ())),
    )


def copy_layer(layer: Any, memo: dict) -> Any:
    taken = _capture_payload.snapshot(layer, copied_now=True, on_device=True)
    if taken.constructed or taken.compile_call is not None:
        # Arguments of recorded constructor and compile() calls are copied with the memo: a model
        # given to the constructor is copied once, wherever else the copied structure holds it.
        constructed = [
            _construct.Constructed(entry.cls, deepcopy(entry.args, memo), deepcopy(entry.kwargs, memo))
            for entry in taken.constructed
        ]
        taken = dataclasses.replace(taken, constructed=constructed, compile_call=deepcopy(taken.compile_call, memo))
    if _dialect.of(layer) == _dialect.TF_KERAS:
        twin = _tfkeras_build.rebuild_with_state(taken, safe_mode=False)
    else:
        twin = _build.rebuild_with_state(taken, safe_mode=False)
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


def copy_metric(metric: Any, memo: dict) -> Any:
    """A metric with the same config and the same accumulated state."""
    twin = _rebuild_twin(metric)
    memo[id(metric)] = twin
    _assign_all(metric, twin)
    return twin


def copy_optimizer(optimizer: Any, memo: dict) -> Any:
    """An optimizer with the same config; if built, the same iterations and slots.

    The copy is built for the same variables, or for their copies when they
    were copied earlier in the same ``deepcopy`` call.
    """
    twin = _rebuild_twin(optimizer)
    memo[id(optimizer)] = twin
    if optimizer.built:
        targets = getattr(optimizer, "_trainable_variables", None) or []
        twin.build([memo.get(id(v), v) for v in targets])
    _assign_all(optimizer, twin)
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
