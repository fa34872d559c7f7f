"""What both dialects' dump and load sides exchange: the state of a layer or model as numpy
snapshots (:class:`CapturedState`), and everything it is rebuilt from (:class:`Blueprint`).

Plain data, no Keras: each dialect (:mod:`keras_pickle._keras3`, :mod:`keras_pickle._tfkeras`) fills
and reads these, and the payload's body is their encoding (:mod:`keras_pickle._capture.encode`,
:mod:`keras_pickle._rebuild.decode`). What each piece holds is described in
:mod:`keras_pickle._keras3.state` (Keras 3) and :mod:`keras_pickle._tfkeras.state` (tf-keras).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import StateMismatchError


@dataclasses.dataclass
class LayerState:
    # The layer's place (a str), or a positional one naming its index in _flatten_layers()
    # (keras_pickle._wire.layout.positional_place).
    place: str
    own_variables: list[tuple[str, np.ndarray]]
    assets: list[tuple[str, bytes]]


@dataclasses.dataclass
class HeldOptimizer:
    """An optimizer a model holds as an attribute, other than ``model.optimizer``."""

    path: str
    config_json: str
    built: bool
    # Positions, in the model's variables, of those it was built for (its trainable variables).
    targets: list[int]
    variables: list[tuple[str, np.ndarray]]


@dataclasses.dataclass
class CapturedState:
    variables: list[tuple[str, np.ndarray]]
    optimizer_variables: list[tuple[str, np.ndarray]]
    layer_states: list[LayerState]
    # An unbuilt optimizer holds only iterations and learning rate; the
    # rebuilt one may already be built (compile_from_config builds it).
    optimizer_built: bool = True
    # The backend that wrote the payload (loading only); None: this process.
    backend: str | None = None
    metric_variables: list[tuple[str, np.ndarray]] = dataclasses.field(default_factory=list)
    held_optimizers: list[HeldOptimizer] = dataclasses.field(default_factory=list)


def assign_in_order(
    targets: list, values: list[tuple[str, Any]], *, owner: str, assign_one: Callable[[Any, str, Any, str], None]
) -> None:
    """Give saved ``values`` (``(key, value)`` pairs, in saved order) to ``targets`` position by position.

    The counts must agree (else :class:`~keras_pickle.StateMismatchError`: the config does not describe
    the object that was pickled); ``assign_one(variable, key, value, where)`` checks one value against its
    variable in its dialect's terms (name, dtype, shape) and assigns it, ``where`` naming it in errors.
    """
    if len(targets) != len(values):
        raise StateMismatchError(
            f"The payload holds {len(values)} variables for {owner}, but the object rebuilt "
            f"from its config has {len(targets)}. The config does not describe the object "
            "that was pickled: a custom layer or model whose get_config() omits a "
            "constructor argument, or whose build() depends on something the config does "
            "not record."
        )
    for position, (variable, (key, value)) in enumerate(zip(targets, values)):
        assign_one(variable, key, value, f"Variable #{position} '{key}' of {owner}")


def describe(obj: Any) -> str:
    return f"{type(obj).__name__} '{getattr(obj, 'name', '?')}'"


@dataclasses.dataclass(frozen=True)
class Blueprint:
    """Everything a layer or model is rebuilt from: what a payload's body decodes to, and what
    ``copy.deepcopy`` takes from the live object (``_capture.encode.snapshot``)."""

    config_json: str
    custom_objects: dict[str, Any]
    state: Any  # a CapturedState
    # The object's dtype policy as JSON, Keras's global policy while it is rebuilt; "": none recorded.
    dtype_policy: str = ""
    # Objects rebuilt from recorded constructor calls (_construct.Constructed), by placeholder index.
    constructed: list = dataclasses.field(default_factory=list)
    # A recorded compile() call to replay (_compile), and the configs of the optimizers it marks.
    compile_call: Any = None
    compile_objects: dict = dataclasses.field(default_factory=dict)
