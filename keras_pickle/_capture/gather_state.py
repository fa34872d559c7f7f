"""Capturing every piece of state a Keras layer or model holds, as numpy snapshots (see
:mod:`keras_pickle._keras3.state` for what each piece is)."""

from __future__ import annotations

from typing import Any

from .._keras3 import backend as _backend
from .._keras3 import layer_state as _layer_state
from .._keras3 import survey as _survey
from .._keras3.census import census_of
from .._keras3.state import CapturedState, HeldOptimizer, metric_variables, optimizer_of
from ..errors import StateMismatchError


def capture(
    obj: Any,
    *,
    skip: set[int] = frozenset(),
    held: list[tuple[Any, str, str]] = (),
    snapshot: bool = True,
    on_device: bool = False,
) -> CapturedState:
    """Every piece of ``obj``'s state, as numpy snapshots: training or assigning ``obj`` later never changes them.

    ``obj``: a layer or model, or its :class:`~keras_pickle._keras3.census.Census` (read, never walked again).

    ``skip``: ``id()`` of variables that travel elsewhere (those of layers given
    to a recorded constructor, :mod:`keras_pickle._keras3.recorded.construct`). ``held``:
    ``(optimizer, path, config_json)`` of the optimizers the model holds besides
    ``model.optimizer``. ``snapshot=False``: the values are copied before the caller returns, so they
    may share memory with the live variables (:func:`~keras_pickle._keras3.backend.to_numpy`).
    ``on_device=True`` (an in-process copy, which assigns every value before it returns): each value
    is the backend's tensor where it lives (:func:`~keras_pickle._keras3.backend.device_value`),
    never moved to the host.
    """

    def read(value: Any) -> Any:
        if on_device:
            return _backend.device_value(value)
        return _backend.to_numpy(value, snapshot=snapshot)

    census = census_of(obj)
    obj = census.root
    references = census.references
    optimizer = optimizer_of(obj)
    optimizer_variables = []
    if optimizer is not None:
        optimizer_keys = _survey.optimizer_variable_keys(optimizer, references)
        optimizer_variables = [(key, read(v)) for key, v in zip(optimizer_keys, optimizer.variables)]
    return CapturedState(
        variables=[(key, read(v)) for v, key in references if id(v) not in skip],
        optimizer_variables=optimizer_variables,
        layer_states=_layer_state.capture(census),
        optimizer_built=bool(getattr(optimizer, "built", False)),
        metric_variables=[(key, read(v)) for key, v in metric_variables(census)],
        held_optimizers=[_capture_held(part, path, config, references, read) for part, path, config in held],
    )


def _capture_held(
    optimizer: Any, path: str, config_json: str, references: list[tuple[Any, str]], read: Any
) -> HeldOptimizer:
    position_of = {id(v): position for position, (v, _key) in enumerate(references)}
    targets = []
    for v in getattr(optimizer, "_trainable_variables", None) or []:
        if id(v) not in position_of:
            raise StateMismatchError(
                f"Cannot pickle: optimizer '{path}' was built for variable '{v.path}', which is not a variable "
                "of the model that holds it, so it could not be built again for the rebuilt model.",
                path=path,
            )
        targets.append(position_of[id(v)])
    keys = _survey.optimizer_variable_keys(optimizer, references)
    return HeldOptimizer(
        path=path,
        config_json=config_json,
        built=bool(optimizer.built),
        targets=targets,
        variables=[(key, read(v)) for key, v in zip(keys, optimizer.variables)],
    )
