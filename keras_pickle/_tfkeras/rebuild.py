"""A tf-keras object's config, and the object rebuilt from it with every saved value.

The config is tf-keras's own (``tf_keras.saving.serialize_keras_object``: class, config, build
config, compile config), with one change: the compile config names the optimizer the model trains
with, serialized, where tf-keras keeps what ``compile()`` was given (``"adam"`` would come back with
the default learning rate and lose an assigned one). Rebuilding runs tf-keras's own deserializer
(which builds the model from its build config and compiles it), then gives the model its state
(:mod:`.state`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from .._blueprint import Blueprint
from ..errors import UnrecoverableConfigError
from . import classes
from . import state as _state


def config_of(obj: Any) -> dict:
    """``obj``'s full tf-keras config; a compiled model's compile config names its actual optimizer, and a
    built layer's build config the input shape it was built for (see :func:`_build_config`)."""
    saving = classes.tf_keras().saving
    config = saving.serialize_keras_object(obj)
    if isinstance(config, dict) and not config.get("build_config") and _has_weights(obj):
        config["build_config"] = _build_config(obj)
    compile_config = config.get("compile_config") if isinstance(config, dict) else None
    optimizer = getattr(obj, "optimizer", None)
    if isinstance(compile_config, dict) and classes.is_optimizer(optimizer):
        config["compile_config"] = {**compile_config, "optimizer": saving.serialize_keras_object(optimizer)}
    return config


def _has_weights(obj: Any) -> bool:
    try:
        return bool(getattr(obj, "weights", None))
    except ValueError:  # an unbuilt Sequential refuses to list its weights
        return False


def _build_config(layer: Any) -> dict:
    """The build config tf-keras omits for a layer whose ``build()`` does not call ``super().build()``: the
    input shape of its first call (``_saved_model_inputs_spec``). Refuses a layer that holds variables but
    was never called on data (built by a direct ``build()`` call, or a model never built whose constructor
    made them), whose input shape nothing recorded."""
    shape = getattr(layer, "_build_input_shape", None)
    spec = getattr(layer, "_saved_model_inputs_spec", None)
    if shape is None and spec is not None:
        shape = tf_nest().map_structure(lambda s: list(s.shape.as_list()), spec)
    if shape is None:
        raise UnrecoverableConfigError(
            f"Cannot pickle {type(layer).__name__} '{layer.name}': it holds variables, but tf-keras recorded no "
            "input shape to build it with again: it was never called on data (its variables were made by its "
            "constructor or by a direct build() call), so a rebuild from its config could not be relied on to "
            "recreate them. Call it on data before pickling it (copy.deepcopy needs nothing), or, if its build() "
            "is called directly, call super().build(input_shape) at the end of that build().",
            class_name=type(layer).__name__,
        )
    return {"input_shape": list(shape) if isinstance(shape, tuple) else shape}


def tf_nest() -> Any:
    return sys.modules["tensorflow"].nest


@contextlib.contextmanager
def safe_mode_scope(safe_mode: bool) -> Iterator[None]:
    """Within, when ``safe_mode``: tf-keras's own safe mode is on (it refuses Lambda layers' bytecode)."""
    if not safe_mode:
        yield
        return
    from_lib = classes.tf_keras().src.saving.serialization_lib
    with from_lib.SafeModeScope(True):
        yield


def from_config(config_json: str, custom_objects: dict[str, Any], *, safe_mode: bool) -> Any:
    """The object ``config_json`` describes, built and compiled as tf-keras's deserializer does."""
    saving = classes.tf_keras().saving
    with saving.custom_object_scope(custom_objects), safe_mode_scope(safe_mode):
        return saving.deserialize_keras_object(
            json.loads(config_json), custom_objects=custom_objects, safe_mode=safe_mode
        )


def rebuild_with_state(blueprint: Blueprint, *, safe_mode: bool) -> Any:
    """The object rebuilt from its config, then given every saved value: variables, random generators,
    optimizer (built for the rebuilt model's trainable variables when the original's was)."""
    obj = from_config(blueprint.config_json, blueprint.custom_objects, safe_mode=safe_mode)
    _state.apply_to_model(obj, blueprint.state)
    _state.apply_to_optimizer(obj, blueprint.state)
    return obj
