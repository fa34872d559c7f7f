"""Payloads back to Keras objects: what ``restore`` runs after the body is checked and brought to the
current format version's shape (:mod:`keras_pickle._wire.upgrade`)."""

from __future__ import annotations

from typing import Any

from .. import _dialect
from .._keras3 import construct as _construct
from .._keras3 import state as _model_state
from .._keras3.layer_state import LayerState
from .._keras3.state import Blueprint
from .._options import load_options
from .._tfkeras import build as _tfkeras_build
from .._wire import arrays
from .._wire.refs import unwrap
from .._wire.schema import KIND_LAYER
from ..errors import KerasUnpicklingError
from . import build as _build


def object_from_payload(header: dict, body: dict, *, safe_mode: bool) -> Any:
    """The object a payload of the current format version holds (an older one, upgraded)."""
    custom_objects = body.get("custom_objects") or {}
    if not isinstance(custom_objects, dict):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: custom_objects is not a dict.")
    # The caller's custom objects (keras_pickle.loads(custom_objects=...)) resolve names the payload's own
    # table does not hold; the payload's entries, each judged in safe mode, name what the writer used.
    custom_objects = {
        **load_options().custom_objects,
        **{str(name): unwrap(obj) for name, obj in custom_objects.items()},
    }
    tf_keras = header["dialect"] == _dialect.TF_KERAS
    if header["kind"] != KIND_LAYER:
        if tf_keras:
            return _tfkeras_build.from_config(body["config"], custom_objects, safe_mode=safe_mode)
        return _build.from_config(body["config"], custom_objects, safe_mode=safe_mode)
    blueprint = Blueprint(
        config_json=body["config"],
        custom_objects=custom_objects,
        state=decode_state(body, backend=header["backend"]),
        dtype_policy=body["dtype_policy"],
        constructed=_construct.from_entries(body["constructed"]),
        compile_call=body["compile_call"],
        compile_objects=body["compile_objects"],
    )
    if tf_keras:
        return _tfkeras_build.rebuild_with_state(blueprint, safe_mode=safe_mode)
    return _build.rebuild_with_state(blueprint, safe_mode=safe_mode)


def decode_state(body: dict, *, backend: str | None = None) -> _model_state.CapturedState:
    """The state in a layer ``body`` of the current format version; ``backend`` is the one that wrote it
    (the header says)."""

    def decoded(entries: Any) -> list:
        return [arrays.decode_array(e) for e in entries]

    return _model_state.CapturedState(
        variables=decoded(body["variables"]),
        optimizer_variables=decoded(body["optimizer_variables"]),
        layer_states=[
            LayerState(
                place=place,
                own_variables=decoded(own),
                assets=[(str(path), bytes(content)) for path, content in assets],
            )
            for place, own, assets in body["layer_states"]
        ],
        optimizer_built=body["optimizer_built"],
        backend=backend,
        metric_variables=decoded(body["metric_variables"]),
        held_optimizers=[
            _model_state.HeldOptimizer(
                path=path, config_json=config, built=built, targets=list(targets), variables=decoded(entries)
            )
            for path, config, built, targets, entries in body["held_optimizers"]
        ],
    )
