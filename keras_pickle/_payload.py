"""Keras objects to payloads and back: what ``__reduce_ex__`` and ``restore`` do."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import keras

from . import _backend, _compile, _construct, _custom_objects, _dump_checks, _rebuild, _records, _state
from ._census import Census
from ._layer_state import LayerState
from ._options import dump_options
from ._rebuild import Blueprint
from ._wire import arrays, schema
from ._wire.refs import unwrap
from .errors import KerasPickleError, KerasPicklingError, KerasUnpicklingError, UnrecoverableConfigError

KIND_LAYER, KIND_LOSS, KIND_METRIC, KIND_OPTIMIZER = (
    schema.KIND_LAYER,
    schema.KIND_LOSS,
    schema.KIND_METRIC,
    schema.KIND_OPTIMIZER,
)


@dataclasses.dataclass(frozen=True)
class CheckedConfig:
    config_json: str
    custom_objects: dict[str, Any]
    # Objects whose config is a placeholder for their recorded constructor call (see _construct).
    constructed: list[_construct.Constructed]
    compiled: _compile.CompileCapture


def snapshot(layer: Any) -> Blueprint:
    """Everything that travels for a layer or model: what pickling encodes and what deepcopy rebuilds from.

    One definition for both paths, so that an in-process copy carries exactly what a pickle carries.
    """
    _backend.sync_training_state(layer)
    census = Census(layer)
    checked = checked_config(layer, census)
    compiled = checked.compiled
    return Blueprint(
        config_json=checked.config_json,
        custom_objects=checked.custom_objects,
        state=_state.capture(census, skip=_construct.argument_variables(checked.constructed), held=compiled.held),
        dtype_policy=_rebuild.policy_json(layer),
        constructed=checked.constructed,
        compile_call=compiled.call,
        compile_objects=compiled.marked,
    )


def checked_config(layer: Any, census: Census | None = None) -> CheckedConfig:
    """The layer's config as JSON, the custom objects it names and the recorded constructor calls it
    stands for, after every dump-time check.

    Everything :func:`snapshot` does but reading the variables: ``check()`` runs exactly this.
    ``census``: the layer's, if the caller took one.
    """
    census = census or Census(layer)
    _dump_checks.check_constructor_recoverable(census)
    _dump_checks.check_lambdas_self_contained(census)
    with _records.collecting_constructed() as collected:
        config = _serialize(layer)
    constructed = _construct.of(collected.objects)
    compiled = _compile.capture(layer, _optimizer_config_json)  # refuses a compile() it could not replay
    custom_objects = _custom_objects.collect(config, census)
    for object_json in [*(held[2] for held in compiled.held), *compiled.marked.values()]:
        custom_objects.update(_custom_objects.collect(json.loads(object_json), census))
    return CheckedConfig(_rebuild.config_to_json(config, layer), custom_objects, constructed, compiled)


def _optimizer_config_json(optimizer: Any) -> str:
    return _rebuild.config_to_json(_serialize(optimizer), optimizer)


def layer_payload(layer: Any, protocol: int) -> tuple[dict, dict]:
    """The payload of a layer or model: config, every variable, custom objects."""
    taken = snapshot(layer)
    state = taken.state

    def encoded(values: list[tuple[str, Any]]) -> list:
        return [arrays.encode_array(path, a, protocol) for path, a in values]

    body = {
        "config": taken.config_json,
        "variables": encoded(state.variables),
        "optimizer_variables": encoded(state.optimizer_variables),
        "optimizer_built": state.optimizer_built,
        "layer_states": [(s.place, encoded(s.own_variables), s.assets) for s in state.layer_states],
        "custom_objects": _custom_objects.portable_mapping(taken.custom_objects),
        "dtype_policy": taken.dtype_policy,
        "metric_variables": encoded(state.metric_variables),
        "held_optimizers": [
            (h.path, h.config_json, h.built, h.targets, encoded(h.variables)) for h in state.held_optimizers
        ],
        "constructed": [
            (_custom_objects.portable(entry.cls, "the class"), entry.args, entry.kwargs) for entry in taken.constructed
        ],
        "compile_call": taken.compile_call,
        "compile_objects": taken.compile_objects,
    }
    header = _header(layer, KIND_LAYER, body)
    return header, body


def config_payload(obj: Any, kind: str) -> tuple[dict, dict]:
    """The config-only payload of ``obj`` (a Loss, or an allowed metric or optimizer): config, custom objects."""
    config = _serialize(obj)
    body = {
        "config": _rebuild.config_to_json(config, obj),
        "custom_objects": _custom_objects.portable_mapping(_custom_objects.collect(config, obj)),
    }
    header = _header(obj, kind, body)
    return header, body


def _header(obj: Any, kind: str, body: dict) -> dict:
    cls = type(obj)
    return schema.make_header(
        class_path=f"{cls.__module__}.{cls.__qualname__}",
        kind=kind,
        body=body,
        checksum=dump_options().checksum,
        keras_version=keras.__version__,
        backend=_backend.backend_name(),
    )


def object_from_payload(header: dict, body: dict, *, safe_mode: bool) -> Any:
    custom_objects = body.get("custom_objects") or {}
    if not isinstance(custom_objects, dict):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: custom_objects is not a dict.")
    custom_objects = {str(name): unwrap(obj) for name, obj in custom_objects.items()}
    if header.get("kind") != KIND_LAYER:
        return _rebuild.from_config(body["config"], custom_objects, safe_mode=safe_mode)
    blueprint = Blueprint(
        config_json=body["config"],
        custom_objects=custom_objects,
        state=decode_state(body, backend=header.get("backend")),
        dtype_policy=body.get("dtype_policy"),
        constructed=_construct.from_entries(body.get("constructed")),
        compile_call=body.get("compile_call"),
        compile_objects=body.get("compile_objects") or {},
    )
    return _rebuild.rebuild_with_state(blueprint, safe_mode=safe_mode)


def decode_state(body: dict, *, backend: str | None = None) -> _state.CapturedState:
    """The state in ``body``; ``backend`` is the one that wrote it (the header says)."""

    def decoded(entries: Any) -> list:
        return [arrays.decode_array(e) for e in entries]

    return _state.CapturedState(
        variables=decoded(body.get("variables", ())),
        optimizer_variables=decoded(body.get("optimizer_variables", ())),
        layer_states=[
            LayerState(
                place=place,
                own_variables=decoded(own),
                assets=[(str(path), bytes(content)) for path, content in assets],
            )
            for place, own, assets in body.get("layer_states", ())
        ],
        optimizer_built=bool(body.get("optimizer_built", True)),
        backend=backend,
        metric_variables=decoded(body.get("metric_variables", ())),
        held_optimizers=[
            _state.HeldOptimizer(
                path=path, config_json=config, built=built, targets=list(targets), variables=decoded(entries)
            )
            for path, config, built, targets, entries in body.get("held_optimizers", ())
        ],
    )


def _serialize(obj: Any) -> dict:
    try:
        return _rebuild.config_of(obj)
    except KerasPickleError:
        raise
    except NotImplementedError as e:
        raise UnrecoverableConfigError(
            f"Cannot pickle {type(obj).__name__}: Keras cannot produce its config ({e}). "
            "Add a get_config() method that returns its constructor arguments.",
            class_name=type(obj).__name__,
        ) from e
    except Exception as e:
        raise KerasPicklingError(
            f"Cannot pickle {type(obj).__name__}: serializing its config failed with {type(e).__name__}: {e}",
            original_error=e,
        ) from e
