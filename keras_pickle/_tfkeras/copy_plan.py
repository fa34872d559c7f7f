"""What an attribute-by-attribute deep copy of a tf-keras object does around its attributes (``Dialect.copy_plan``).

A tf-keras model's optimizer does not deep-copy (its distribution strategy refuses a second instance): the copy's
optimizer is rebuilt from its config, put in the deep copy's memo, and given the original's iterations and slots,
built for the copy's trainable variables, once the model's copy is assembled.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from .._blueprint import CapturedState
from .._dialect import CopyPlan
from . import classes as _classes
from . import rebuild as _rebuild
from . import state as _state
from . import walk as _walk


def plan(obj: Any, memo: dict, *, custom_objects_of: Callable[[dict, Any], dict]) -> CopyPlan:
    """The copy plan of a tf-keras layer or model (``memo``: the deep copy's). ``custom_objects_of(config,
    optimizer)``: the custom objects an optimizer's config names (the dump side's collector)."""
    give_optimizer_state = _optimizer(obj, memo, custom_objects_of)
    return CopyPlan(first=[], scope=contextlib.nullcontext, finish=give_optimizer_state or (lambda twin: None))


def _optimizer(model: Any, memo: dict, custom_objects_of: Callable[[dict, Any], dict]) -> Callable[[Any], None] | None:
    optimizer = _walk.optimizer_of(model)
    if not _classes.is_optimizer(optimizer) or _classes.is_legacy_optimizer(optimizer):
        return None
    config = _rebuild.config_of(optimizer)
    memo[id(optimizer)] = _rebuild.from_config(
        json.dumps(config), custom_objects_of(config, optimizer), safe_mode=False
    )
    state = CapturedState(
        variables=[],
        optimizer_variables=[(key, _state.read(v)) for key, v in _walk.keyed(list(optimizer.variables))],
        layer_states=[],
        optimizer_built=bool(getattr(optimizer, "_built", False)),
    )
    return lambda twin: _state.apply_to_optimizer(twin, state)
