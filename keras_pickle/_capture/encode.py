"""Keras objects to payloads: what ``__reduce_ex__`` writes and ``copy.deepcopy`` copies."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .. import _dialect
from .._dialect import Dialect
from .._keras3 import backend as _backend
from .._keras3.census import Census
from .._keras3.recorded import compile as _compile
from .._keras3.recorded import compile_objects as _compile_objects
from .._keras3.recorded import construct as _construct
from .._keras3.recorded import records as _records
from .._keras3.recorded import weight_decay as _weight_decay
from .._keras3.state import Blueprint
from .._options import dump_options
from .._pickling_context import array_store
from .._tfkeras import state as _tfkeras_state
from .._wire import arrays, layout, schema
from ..errors import KerasPickleError, KerasPicklingError, PickleRefusedError, UnrecoverableConfigError
from . import checks as _dump_checks
from . import config as _config
from . import custom_objects as _custom_objects
from . import gather_state as _capture_state
from .array_store import wire_data

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


def snapshot(layer: Any, dialect: Dialect, *, copied_now: bool = False, on_device: bool = False) -> Blueprint:
    """Everything that travels for a Keras 3 layer or model: what pickling encodes and what deepcopy
    rebuilds from (``Dialect.snapshot``; ``dialect`` is Keras 3's).

    One definition for both paths, so that an in-process copy carries exactly what a pickle carries.
    ``copied_now``: the caller copies every value before it returns (a deep copy, an in-band pickle),
    so values may share memory with the live variables instead of being snapshots. ``on_device``: an
    in-process copy, whose values stay backend tensors on their device (no host round trip).
    """
    _backend.sync_training_state(layer)
    census = Census(layer)
    checked = checked_config(layer, dialect, census, in_process=on_device)
    compiled = checked.compiled
    return Blueprint(
        config_json=checked.config_json,
        custom_objects=checked.custom_objects,
        state=_capture_state.capture(
            census,
            skip=_construct.argument_variables(checked.constructed),
            held=compiled.held,
            snapshot=not copied_now,
            on_device=on_device,
        ),
        dtype_policy=_config.policy_json(layer),
        constructed=checked.constructed,
        compile_call=compiled.call,
        compile_objects=compiled.marked,
    )


def tf_keras_snapshot(layer: Any, dialect: Dialect, *, copied_now: bool = False, on_device: bool = False) -> Blueprint:
    """What travels for a tf-keras layer or model (``Dialect.snapshot``; ``dialect`` is tf-keras's): its
    config, the custom objects it names, its state (:mod:`keras_pickle._tfkeras.state`, always read as
    snapshots). tf-keras records no constructor or ``compile()`` calls."""
    config = _serialize(layer, dialect)
    return Blueprint(
        config_json=_config.config_to_json(config, layer),
        custom_objects=_custom_objects.collect(config, layer, dialect),
        state=_tfkeras_state.capture(layer),
        dtype_policy="",  # tf-keras layers record their own policies in their configs
    )


def checked_config(
    layer: Any, dialect: Dialect, census: Census | None = None, *, in_process: bool = False
) -> CheckedConfig:
    """The layer's config as JSON, the custom objects it names and the recorded constructor calls it
    stands for, after every dump-time check.

    Everything :func:`snapshot` does but reading the variables: ``check()`` runs exactly this.
    ``census``: the layer's, if the caller took one. ``in_process``: for an in-process copy, which
    copies what an optimizer's config omits from the original (:func:`_optimizer_config_json`).
    """
    census = census or Census(layer)
    _dump_checks.check_constructor_recoverable(census)
    _dump_checks.check_lambdas_self_contained(census)
    with _records.collecting_constructed() as collected:
        config = _serialize(layer, dialect)
    constructed = _construct.of(collected.objects)
    serialize = _plain_optimizer_config_json if in_process else _optimizer_config_json
    compiled = _compile.capture(layer, lambda optimizer: serialize(optimizer, dialect))  # refuses what it cannot replay
    custom_objects = _custom_objects.collect(config, census, dialect)
    for object_json in [*(held[2] for held in compiled.held), *compiled.marked.values()]:
        custom_objects.update(_custom_objects.collect(json.loads(object_json), census, dialect))
    return CheckedConfig(_config.config_to_json(config, layer), custom_objects, constructed, compiled)


def _optimizer_config_json(optimizer: Any, dialect: Dialect) -> str:
    """The config of an optimizer a model holds besides ``model.optimizer``, or passes to its own ``compile()``:
    refused where it has settings its config omits (:func:`keras_pickle._keras3.recorded.weight_decay.refusal`)."""
    why = _weight_decay.refusal(optimizer)
    if why is not None:
        raise KerasPicklingError(
            f"Cannot pickle the {type(optimizer).__name__} '{optimizer.name}' a model holds besides model.optimizer "
            f"(or passes to its own compile()): {why} keras_pickle carries these settings for model.optimizer only. "
            "copy.deepcopy of the model keeps them."
        )
    return _plain_optimizer_config_json(optimizer, dialect)


def _plain_optimizer_config_json(optimizer: Any, dialect: Dialect) -> str:
    return _config.config_to_json(_serialize(optimizer, dialect), optimizer)


def layer_payload(layer: Any, protocol: int, dialect: Dialect) -> tuple[dict, dict]:
    """The payload of a layer or model: config, every variable, custom objects.

    Protocols 0-4 copy each value into bytes here, and ``keras_pickle.dumps`` without a
    ``buffer_callback`` into the stream: values need not be snapshots then. Plain ``pickle.dumps``
    under protocol 5 may hand its buffers out of band, so they are.
    """
    store = array_store()  # joblib: each weight as a numpy array it writes once and lets workers map
    # joblib's store gets a snapshot of a weight only when it changed (array_store.wire_data)
    taken = dialect.snapshot(layer, dialect, copied_now=protocol < 5 or dump_options().in_band or store is not None)
    state = taken.state

    def encoded(values: list[tuple[str, Any]]) -> list:
        if store is not None:
            return [arrays.encode_array(path, a, protocol, data=wire_data(store, layer, path, a)) for path, a in values]
        return [arrays.encode_array(path, a, protocol) for path, a in values]

    fields = {
        "config": taken.config_json,
        "optimizer_built": state.optimizer_built,
        "custom_objects": _custom_objects.portable_mapping(taken.custom_objects),
        "dtype_policy": taken.dtype_policy,
        "constructed": [(_custom_objects.portable(entry.cls), entry.args, entry.kwargs) for entry in taken.constructed],
        "compile_call": taken.compile_call,
        "compile_objects": taken.compile_objects,
        **layout.encode(state, encoded),
    }
    body = {field: fields[field] for field in layout.LAYER_BODY_FIELDS}
    header = _header(layer, KIND_LAYER, body, protocol, dialect)
    return header, body


def config_payload(obj: Any, kind: str, protocol: int, dialect: Dialect) -> tuple[dict, dict]:
    """The config-only payload of ``obj`` (a Loss, or an allowed metric or optimizer): config, custom objects.

    Refuses an optimizer with settings its config omits (:func:`keras_pickle._keras3.recorded.weight_decay.refusal`),
    and a loss, metric or schedule that its config cannot rebuild
    (:func:`keras_pickle._keras3.recorded.compile_objects.standalone_refusal`): no payload is written that would
    fail to load.
    """
    why = _compile_objects.standalone_refusal(obj)
    if why is not None:
        raise PickleRefusedError(why, obj_type=type(obj))
    if kind == KIND_OPTIMIZER:
        why = _weight_decay.refusal(obj)
        if why is not None:
            raise PickleRefusedError(
                f"Refusing to pickle {type(obj).__name__} '{obj.name}': {why} Pickle the compiled model instead "
                "(it carries them for model.optimizer), or call exclude_from_weight_decay() where it is loaded.",
                obj_type=type(obj),
            )
    config = _serialize(obj, dialect)
    body = {
        "config": _config.config_to_json(config, obj),
        "custom_objects": _custom_objects.portable_mapping(_custom_objects.collect(config, obj, dialect)),
    }
    header = _header(obj, kind, body, protocol, dialect)
    return header, body


def _header(obj: Any, kind: str, body: dict, protocol: int, dialect: Dialect) -> dict:
    cls = type(obj)
    return schema.make_header(
        class_path=f"{cls.__module__}.{cls.__qualname__}",
        kind=kind,
        body=body,
        checksum=dump_options().wants_checksum(protocol),
        dialect=dialect.name,
        keras_version=_dialect.version(dialect.name),
        backend=_dialect.backend(dialect.name),
    )


def _serialize(obj: Any, dialect: Dialect) -> dict:
    try:
        return dialect.config_of(obj)
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
