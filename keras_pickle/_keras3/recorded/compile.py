"""How a rebuilt model is compiled again, as the original was.

Keras's compile config records what reached ``Model.compile``. That is all
for a model that does not override ``compile()``. A model that does (the
keras.io GAN: ``compile(d_optimizer, g_optimizer, loss_fn)``; KerasHub tasks)
records only what its ``compile()`` passed on to ``super().compile()``, and
Keras's own loader then skips compiling it with a warning. Here:

* a model whose ``compile()`` call keras_pickle recorded
  (:mod:`keras_pickle._keras3.recorded.records`) is compiled by calling its ``compile()``
  with the same arguments. Each Keras object among them that has a config
  (optimizers, losses, metrics, KerasHub samplers) is replaced by a marker
  (:data:`MARKER` and a key) and comes back as a fresh object of the same
  config; an optimizer's key is where the model holds it, and its state is
  loaded afterwards. Anything else travels as itself in the pickle;
* a model that overrides ``compile_from_config()`` gets its own method;
* otherwise, if the compile config binds to its ``compile()``, that is
  called with it (a KerasHub task compiled before ``install()``);
* otherwise dumps refuses the model, saying what to do.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import keras
from keras.src.trainers.trainer import Trainer

from ...errors import KerasUnpicklingError, UnrecoverableConfigError
from .. import convert as _convert
from . import compile_objects as _compile_objects
from . import records as _records

MARKER = "keras_pickle:compile_object:"
"""Prefix of the string that stands for a Keras object in a recorded ``compile()`` call, before its key."""


@dataclasses.dataclass(frozen=True)
class CompileCapture:
    # (args, kwargs) of the recorded compile() call, optimizers replaced by markers; None: the compile config.
    call: tuple[tuple, dict] | None
    # (optimizer, path, config JSON) of every optimizer the model holds other than model.optimizer.
    held: list[tuple[Any, str, str]]
    # key -> config JSON of each object a marker stands for (an optimizer's key: its path in the model).
    marked: dict[str, str]


NOTHING = CompileCapture(call=None, held=[], marked={})


def has_custom_compile(model: Any) -> bool:
    return type(model).compile is not Trainer.compile


def _has_custom_compile_from_config(model: Any) -> bool:
    return type(model).compile_from_config is not Trainer.compile_from_config


def capture(model: Any, serialize: Any) -> CompileCapture:
    """What it takes to compile a rebuilt ``model`` as ``model`` is; ``serialize(optimizer)`` is its config JSON.

    Raises :class:`UnrecoverableConfigError` for a model with a custom
    ``compile()`` whose compile call was not recorded and cannot be replayed.
    """
    if not (isinstance(model, keras.Model) and getattr(model, "compiled", False)):
        return NOTHING
    parts = _records.owned_parts(model)
    held = [
        (part, path, serialize(part))
        for part, path in parts
        if isinstance(part, keras.optimizers.Optimizer) and not path.startswith("optimizer")
    ]
    if not has_custom_compile(model) or _has_custom_compile_from_config(model):
        return CompileCapture(call=None, held=held, marked={})
    recorded = _records.compile_call(model)
    if recorded is None:
        _check_config_replays(model)
        return CompileCapture(call=None, held=held, marked={})
    path_of = {id(part): path for part, path in parts}
    marked: dict[str, str] = {}
    key_of: dict[int, str] = {}

    def mark(value: Any) -> Any:
        if isinstance(value, keras.optimizers.Optimizer):
            path = path_of.get(id(value))
            if path is None:
                raise UnrecoverableConfigError(
                    f"Cannot pickle {type(model).__name__}: its compile() received a "
                    f"{type(value).__name__} that the model does not hold afterwards (as model.optimizer or "
                    "an attribute), so its state could not travel with the model.",
                    class_name=type(model).__name__,
                )
            marked[path] = serialize(value)
            return MARKER + path
        if _has_config(value):
            _check_rebuilds(value, model)
            if id(value) not in key_of:
                config = _config_json(value)
                if config is None:
                    return value
                key_of[id(value)] = key = f"argument{len(key_of)}"
                marked[key] = config
            return MARKER + key_of[id(value)]
        return _map(value, mark)

    args, kwargs = recorded
    call = (tuple(mark(a) for a in args), {key: mark(v) for key, v in kwargs.items()})
    return CompileCapture(call=call, held=held, marked=marked)


def _check_rebuilds(value: Any, model: Any) -> None:
    """Refuse a loss, metric or schedule given to a model's own ``compile()`` that its config would not
    rebuild: it travels as its config (its recorded arguments stand only in the model's compile config)."""
    if _compile_objects.records_arguments(type(value)) and not _compile_objects.config_rebuilds(value):
        cls = type(value).__name__
        raise UnrecoverableConfigError(
            f"{cls} '{getattr(value, 'name', cls)}' cannot be rebuilt from its config, and "
            f"{type(model).__name__}.compile(), which received it, is the model's own: keras_pickle rebuilds what "
            "a custom compile() received from configs (its constructor arguments travel only in a call to "
            f"Model.compile). Give {cls} a get_config() returning exactly its constructor arguments and accept "
            "**kwargs in __init__, passing them to super().__init__(**kwargs).",
            class_name=cls,
        )


def _has_config(value: Any) -> bool:
    """A Keras object (not a layer: a layer in compile() arguments is part of a model) with a config."""
    if isinstance(value, (type, keras.Layer)) or not callable(getattr(value, "get_config", None)):
        return False
    return callable(getattr(type(value), "from_config", None))


def _config_json(value: Any) -> str | None:
    """``value``'s Keras serialization as JSON, or None if Keras cannot serialize it."""
    try:
        return json.dumps(keras.saving.serialize_keras_object(value))
    except Exception:
        return None


def _check_config_replays(model: Any) -> None:
    config = model.get_compile_config() or {}
    try:
        inspect.signature(type(model).compile).bind(model, **config)
    except TypeError as e:
        cls = type(model).__name__
        raise UnrecoverableConfigError(
            f"Cannot pickle {cls}: it overrides compile(), and keras_pickle did not record its compile() call "
            f"(it records calls made after keras_pickle.install()); Keras's compile config holds only what "
            f"reached Model.compile, which {cls}.compile() does not accept ({e}). Either call "
            "keras_pickle.install() before compiling the model, or define get_compile_config() and "
            "compile_from_config(config) on the class.",
            class_name=cls,
        ) from e


def compile_rebuilt(
    model: Any, compile_config: dict | None, call: Any, marked: Any, custom_objects: dict, written_backend: Any
) -> None:
    """Compile ``model`` (rebuilt, state loaded) as the original was (see the module docstring)."""
    with keras.saving.custom_object_scope(custom_objects):
        if call is not None:
            args, kwargs = _replayed_call(call, marked, custom_objects)
            type(model).compile(model, *args, **kwargs)
        elif compile_config:
            compile_config = _convert.portable_compile_config(compile_config, written_backend)
            if has_custom_compile(model) and not _has_custom_compile_from_config(model):
                config = keras.saving.deserialize_keras_object(compile_config)
                type(model).compile(model, **config)
                if getattr(model, "optimizer", None) is not None and model.built:
                    model.optimizer.build(model.trainable_variables)
            else:
                model.compile_from_config(compile_config)
        else:
            return
    model.compiled = True


def _replayed_call(call: Any, marked: Any, custom_objects: dict) -> tuple[tuple, dict]:
    if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], tuple) and isinstance(call[1], dict)):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: compile_call is not (args, kwargs).")
    if not (isinstance(marked, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in marked.items())):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: compile_objects is not a dict of configs.")
    fresh: dict[str, Any] = {}

    def unmark(value: Any) -> Any:
        if isinstance(value, str) and value.startswith(MARKER):
            key = value[len(MARKER) :]
            if key not in marked:
                raise KerasUnpicklingError(f"Corrupt keras_pickle payload: no compile() object config for {key!r}.")
            if key not in fresh:
                config = _convert.portable_config(json.loads(marked[key]))
                fresh[key] = keras.saving.deserialize_keras_object(config, custom_objects=custom_objects)
            return fresh[key]
        return _map(value, unmark)

    args, kwargs = call
    return tuple(unmark(a) for a in args), {key: unmark(v) for key, v in kwargs.items()}


def _map(value: Any, function: Any) -> Any:
    """``value`` with ``function`` applied to the items of a list, tuple or dict (not to ``value`` itself)."""
    if type(value) is list:
        return [function(item) for item in value]
    if type(value) is tuple:
        return tuple(function(item) for item in value)
    if type(value) is dict:
        return {key: function(item) for key, item in value.items()}
    return value
