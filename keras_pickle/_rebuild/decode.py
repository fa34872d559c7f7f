"""Payloads back to Keras objects: what ``restore`` runs after the body is checked and brought to the
current format version's shape (:mod:`keras_pickle._wire.upgrade`)."""

from __future__ import annotations

from typing import Any

from .._blueprint import Blueprint, CapturedState, HeldOptimizer, LayerState
from .._dialect import Dialect
from .._keras3.recorded import construct as _construct
from .._options import load_options
from .._wire import arrays, layout
from .._wire.refs import unwrap
from .._wire.schema import KIND_LAYER
from ..errors import KerasUnpicklingError


def object_from_payload(header: dict, body: dict, dialect: Dialect, *, safe_mode: bool) -> Any:
    """The object a payload of the current format version holds (an older one, upgraded), rebuilt by
    ``dialect``, the header's."""
    custom_objects = body.get("custom_objects") or {}
    if not isinstance(custom_objects, dict):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: custom_objects is not a dict.")
    # The caller's custom objects (keras_pickle.loads(custom_objects=...)) resolve names the payload's own
    # table does not hold; the payload's entries, each judged in safe mode, name what the writer used.
    custom_objects = {
        **load_options().custom_objects,
        **{str(name): unwrap(obj) for name, obj in custom_objects.items()},
    }
    if header["kind"] != KIND_LAYER:
        return dialect.from_config(body["config"], custom_objects, safe_mode=safe_mode)
    blueprint = Blueprint(
        config_json=body["config"],
        custom_objects=custom_objects,
        state=decode_state(body, backend=header["backend"]),
        dtype_policy=body["dtype_policy"],
        constructed=_construct.from_entries(body["constructed"]),
        compile_call=body["compile_call"],
        compile_objects=body["compile_objects"],
    )
    return dialect.rebuild(blueprint, safe_mode=safe_mode)


def decode_state(body: dict, *, backend: str | None = None) -> CapturedState:
    """The state in a layer ``body`` of the current format version; ``backend`` is the one that wrote it
    (the header says)."""

    def decoded(entries: Any) -> list:
        return [arrays.decode_array(e) for e in entries]

    sections = layout.decode(body, decoded, {"layer_states": LayerState, "held_optimizers": HeldOptimizer})
    return CapturedState(**sections, optimizer_built=body["optimizer_built"], backend=backend)
