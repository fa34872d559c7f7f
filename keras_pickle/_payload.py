"""Keras objects to payloads and back: what ``__reduce_ex__`` and ``restore`` do."""

from __future__ import annotations

import builtins
import dataclasses
import dis
import inspect
import types
from typing import Any

import keras
from keras.src.models.functional import Functional

from . import _backend, _custom_objects, _rebuild, _state
from ._options import dump_options
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
class LayerSnapshot:
    """Everything that travels for a layer or model: what pickling encodes and what deepcopy rebuilds from.

    One definition for both paths, so that an in-process copy carries exactly what a pickle carries.
    """

    config_json: str
    custom_objects: dict[str, Any]
    state: _state.CapturedState
    dtype_policy: str


def snapshot(layer: Any) -> LayerSnapshot:
    """The layer's config, custom objects, every piece of state and its dtype policy, checked for rebuilding."""
    _backend.sync_training_state(layer)
    config_json, custom_objects = checked_config(layer)
    return LayerSnapshot(
        config_json=config_json,
        custom_objects=custom_objects,
        state=_state.capture(layer),
        dtype_policy=_rebuild.policy_json(layer),
    )


def checked_config(layer: Any) -> tuple[str, dict[str, Any]]:
    """The layer's config as JSON and the custom objects it names, after every dump-time check.

    Everything :func:`snapshot` does but reading the variables: ``check()`` runs exactly this.
    """
    check_constructor_recoverable(layer)
    check_lambdas_self_contained(layer)
    config = _serialize(layer)
    return _rebuild.config_to_json(config, layer), _custom_objects.collect(config, [layer])


def layer_payload(layer: Any, protocol: int) -> tuple[dict, dict]:
    """The payload of a layer or model: config, every variable, custom objects."""
    taken = snapshot(layer)
    state = taken.state
    body = {
        "config": taken.config_json,
        "variables": [arrays.encode_array(path, a, protocol) for path, a in state.variables],
        "optimizer_variables": [arrays.encode_array(path, a, protocol) for path, a in state.optimizer_variables],
        "optimizer_built": state.optimizer_built,
        "layer_states": [
            (
                s.index,
                [arrays.encode_array(key, a, protocol) for key, a in s.own_variables],
                s.assets,
            )
            for s in state.layer_states
        ],
        "custom_objects": taken.custom_objects,
        "dtype_policy": taken.dtype_policy,
    }
    header = _header(layer, KIND_LAYER, body)
    return header, body


def config_payload(obj: Any, kind: str) -> tuple[dict, dict]:
    """The config-only payload of ``obj`` (a Loss, or an allowed metric or optimizer): config, custom objects."""
    config = _serialize(obj)
    body = {
        "config": _rebuild.config_to_json(config, obj),
        "custom_objects": _custom_objects.collect(config, [obj]),
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
    return _rebuild.rebuild_with_state(
        body["config"],
        custom_objects,
        decode_state(body, backend=header.get("backend")),
        safe_mode=safe_mode,
        dtype_policy=body.get("dtype_policy"),
    )


def decode_state(body: dict, *, backend: str | None = None) -> _state.CapturedState:
    """The state in ``body``; ``backend`` is the one that wrote it (the header says)."""
    return _state.CapturedState(
        variables=[arrays.decode_array(e) for e in body.get("variables", ())],
        optimizer_variables=[arrays.decode_array(e) for e in body.get("optimizer_variables", ())],
        layer_states=[
            _state.LayerState(
                index=index,
                own_variables=[arrays.decode_array(e) for e in own],
                assets=[(str(path), bytes(content)) for path, content in assets],
            )
            for index, own, assets in body.get("layer_states", ())
        ],
        optimizer_built=bool(body.get("optimizer_built", True)),
        backend=backend,
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


# --------------------------------------------------------------------------
# Constructor arguments that a config would lose
# --------------------------------------------------------------------------


def check_constructor_recoverable(obj: Any) -> None:
    """Refuse, at dump time, an object whose config cannot rebuild it.

    ``keras.Model.__new__`` drops constructor arguments, so a Model subclass
    without ``get_config()`` is recorded with its *default* arguments; Keras
    would later fail with a confusing variable-count error, or worse, rebuild
    a different model. Layers rebuilt from a config are checked: the object
    itself and, recursively, the layers a Functional / Sequential config lists.
    Sublayers created by a constructor are rebuilt by that constructor.
    """
    stack = [obj]
    while stack:
        layer = stack.pop()
        if isinstance(layer, (keras.Sequential, Functional)):
            stack.extend(layer.layers)
        if type(layer).__module__.startswith("keras."):
            continue
        if getattr(type(layer).get_config, "_is_default", False):
            _check_auto_config(layer)
        if type(layer).from_config.__func__.__module__.startswith("keras."):
            _check_config_fits_constructor(layer)


def _check_config_fits_constructor(layer: Any) -> None:
    """Keras's default from_config is ``cls(**config)``: the config must bind."""
    cls = type(layer)
    try:
        config = layer.get_config()
    except Exception:
        return  # Reported with its own message when the config is serialized.
    if isinstance(layer, Functional) and "layers" in config:
        return  # Revived by Keras's functional reconstruction, not cls(**config).
    try:
        inspect.signature(cls.__init__).bind(None, **config)
    except TypeError as e:
        raise UnrecoverableConfigError(
            f"Cannot pickle {cls.__name__}: Keras rebuilds it as {cls.__name__}(**config), but "
            f"its constructor does not accept its own config ({e}; config keys: "
            f"{', '.join(config)}). Accept **kwargs in __init__ and pass them to "
            "super().__init__(**kwargs), make get_config() return exactly the constructor "
            "arguments, or define a from_config() classmethod.",
            class_name=cls.__name__,
        ) from e


def _check_auto_config(layer: Any) -> None:
    cls = type(layer)
    hint = (
        f"Add a get_config() to {cls.__name__} that returns its constructor arguments, e.g.\n\n"
        "    def get_config(self):\n"
        '        return {**super().get_config(), "units": self.units}\n\n'
        "(and a from_config() classmethod if an argument is not a plain value)."
    )
    auto = getattr(layer, "_auto_config", None)
    if auto is None:
        required = [
            name
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self"
            and p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        if required:
            raise UnrecoverableConfigError(
                f"Cannot pickle {cls.__name__}: it has no get_config(), and Keras could not "
                f"record its constructor arguments ({', '.join(required)}). {hint}",
                class_name=cls.__name__,
            )
        return
    if not isinstance(layer, keras.Model):
        return  # Layer.__new__ records the real arguments.
    recorded = dict(auto.config)
    differing = []
    for name, default in recorded.items():
        if name in layer.__dict__:
            try:
                same = bool(layer.__dict__[name] == default)
            except Exception:
                same = False
            if not same:
                differing.append(f"{name}={layer.__dict__[name]!r}")
    if differing:
        raise UnrecoverableConfigError(
            f"Cannot pickle {cls.__name__}: it has no get_config(), and Keras records only the "
            f"default constructor arguments of Model subclasses, so this instance "
            f"({', '.join(differing)}) would come back rebuilt with the defaults "
            f"({', '.join(f'{k}={v!r}' for k, v in recorded.items())}). {hint}",
            class_name=cls.__name__,
        )


# --------------------------------------------------------------------------
# Lambda layers whose code needs its module
# --------------------------------------------------------------------------

_GLOBAL_LOADS = frozenset(("LOAD_GLOBAL", "LOAD_NAME"))


def check_lambdas_self_contained(obj: Any) -> None:
    """Refuse, at dump time, a Lambda layer whose Python lambda reads a module global.

    Keras stores a lambda as its bytecode and rebuilds it with Keras's own
    globals, so ``lambda x: ops.relu(x)`` pickles and then fails to load with
    ``NameError: name 'ops' is not defined``. Builtins are fine; so is a named
    module-level function (Keras stores it by name).
    """
    layers = obj._flatten_layers(include_self=True, recursive=True) if hasattr(obj, "_flatten_layers") else [obj]
    for layer in layers:
        function = getattr(layer, "function", None) if isinstance(layer, keras.layers.Lambda) else None
        if not (isinstance(function, types.LambdaType) and function.__name__ == "<lambda>"):
            continue
        names = sorted(name for name in _global_names(function.__code__) if name not in vars(builtins))
        if names:
            shown = ", ".join(repr(name) for name in names)
            raise KerasPicklingError(
                f"Cannot pickle Lambda layer '{layer.name}': its lambda reads the global name(s) {shown} "
                f"of module {function.__module__}, and Keras stores a lambda as bytecode without its "
                "globals, so loading it would fail with NameError. Define the function at module level "
                "(Keras then stores it by name; register it with @keras.saving.register_keras_serializable() "
                "if it is in __main__), or write a custom layer."
            )


def _global_names(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_LOADS}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _global_names(constant)
    return names
