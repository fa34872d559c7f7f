"""A config and its state back into an object: deferred variables, a linear-time Sequential,
the graph from recorded specs, compiling, then every saved value."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import keras
import numpy as np
from keras.src.models.functional import Functional
from keras.src.saving import object_registration, serialization_lib

from .._keras3 import convert as _convert
from .._keras3 import deferred as _deferred
from .._keras3 import graph as _graph
from .._keras3.census import Census
from .._keras3.recorded import compile as _compile
from .._keras3.recorded import construct as _construct
from .._keras3.recorded import records as _records
from .._keras3.recorded import weight_decay as _weight_decay
from .._keras3.state import Blueprint
from .._safe_mode import judge_names
from ..errors import KerasPickleError, KerasUnpicklingError
from . import assign_state as _rebuild_state


@contextlib.contextmanager
def _global_policy(policy_text: str):
    """Within: Keras's global dtype policy (per thread) is the one ``policy_text`` serializes.

    A model built under a global mixed policy takes it from there, not from
    its config (Functional does not record it; Sequential ignores it), and
    so does its compile, which wraps the optimizer in a LossScaleOptimizer
    under ``mixed_float16``. Rebuilt under the loading process's policy, it
    would come back float32 with a different optimizer. ``""`` records none:
    the loading process's policy stays.
    """
    if not policy_text:
        yield
        return
    try:
        config = json.loads(policy_text)
        if not isinstance(config, dict) or config.get("module") not in ("keras", "keras.dtype_policies"):
            raise ValueError("not a built-in Keras dtype policy")
        policy = keras.dtype_policies.deserialize(config)
    except Exception as e:
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: its dtype policy cannot be read ({type(e).__name__}: {e}).",
            original_error=e,
        ) from e
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def rebuild_with_state(blueprint: Blueprint, *, safe_mode: bool) -> Any:
    """Rebuild an object from its blueprint: config (and recorded constructor calls), then state.

    Everything happens under the object's own dtype policy (``dtype_policy``,
    from :func:`policy_json`) as Keras's global policy: see
    :func:`_global_policy`.

    Variables are first created *deferred* (:mod:`keras_pickle._keras3.deferred`:
    Keras records their initializers without running them) and then created
    directly from the saved values: no initializer runs for a value that is
    about to be overwritten, and no variable is written twice. If a layer
    cannot be built that way, the object is rebuilt the ordinary way. The
    model is compiled afterwards (:mod:`keras_pickle._keras3.recorded.compile`); its optimizer
    is built only if the original's was, with its slots deferred in the same
    way, then the optimizer state loaded.
    """
    with _global_policy(blueprint.dtype_policy):
        return _rebuild_with_state(blueprint, safe_mode=safe_mode)


def _rebuild_with_state(blueprint: Blueprint, *, safe_mode: bool) -> Any:
    state, constructed = blueprint.state, blueprint.constructed
    expected = len(state.variables)

    def custom_objects(wire: bool) -> dict[str, Any]:
        return _construct.constructing_custom_objects(blueprint.custom_objects, constructed, wire=wire)

    decoded = json.loads(blueprint.config_json)
    compile_config = decoded.get("compile_config") if isinstance(decoded, dict) else None
    unconsumed = [decoded]

    def config() -> Any:
        # Keras's deserializer consumes the config it is given: the first attempt takes the one
        # decoded above, a retry decodes it anew.
        return unconsumed.pop() if unconsumed else json.loads(blueprint.config_json)

    skip = _construct.argument_variables(constructed)
    bounded = _deferred.bounded_allocation(_carried_values(state)) if safe_mode else contextlib.nullcontext()
    with bounded:  # safe mode: Keras allocates no more than the payload carries
        obj, deferred, census = _built(config, custom_objects, state, skip, safe_mode=safe_mode, expected=expected)
        _rebuild_state.apply_to_layers(census, state, skip=skip)
        _deferred.initialize_leftovers(deferred)
    if compile_config or blueprint.compile_call is not None:
        weight_decay = _weight_decay.take_from_compile_config(compile_config)
        with _optimizer_left_unbuilt(obj):
            _compile.compile_rebuilt(
                obj,
                compile_config,
                blueprint.compile_call,
                blueprint.compile_objects,
                custom_objects(False),  # a loss or metric may stand for its recorded constructor call
                state.backend,
            )
        _weight_decay.apply(obj, weight_decay)
    # Compiling adds no layer nor model variable: the census still describes the model.
    _rebuild_state.apply_to_optimizer(census, state)
    _rebuild_state.apply_to_held_optimizers(census, state, _records.resolve_part)
    _rebuild_state.apply_to_metrics(census, state)
    return obj


def _carried_values(state: Any) -> int:
    """How many values the state carries: its variables and its layers' own variables (any array type)."""
    arrays = [array for _, array in state.variables]
    arrays += [array for layer in state.layer_states for _, array in layer.own_variables]
    return sum(math.prod(np.shape(array)) for array in arrays)


def _built(config, custom_objects, state, skip, *, safe_mode: bool, expected: int) -> tuple[Any, list, Census]:
    """The object built from its config, its deferred variables and its census: nodes from recorded specs,
    verified against the payload, else traced as Keras does (both with variables deferred), else built the
    ordinary way, initializers included."""
    for wire in (True, False):
        try:
            obj, deferred = _from_config_deferred(
                config(), custom_objects(wire), safe_mode=safe_mode, expected=expected, wire=wire
            )
        except KerasPickleError:
            raise
        except Exception:
            continue
        census = Census(obj)
        if not wire or _rebuild_state.fits(census, state, skip=skip):
            return obj, deferred, census
    obj = from_config(config(), custom_objects(False), safe_mode=safe_mode, expected_variables=expected, compile=False)
    return obj, [], Census(obj)


@contextlib.contextmanager
def _optimizer_left_unbuilt(model: Any):
    """Within: ``compile_from_config`` leaves the optimizer unbuilt.

    Keras builds the optimizer there when the model is built, running every
    slot's initializer. The model passes for unbuilt meanwhile. If the
    original's optimizer was built, :func:`_rebuild_state.apply_to_optimizer` builds
    this one afterwards with its slots deferred; if not, the first training
    step builds the optimizer of both alike (and a LossScaleOptimizer's loss
    scale).
    """
    if not getattr(model, "built", False):
        yield
        return
    model.built = False
    try:
        yield
    finally:
        model.built = True


def _from_config_deferred(config, custom_objects, *, safe_mode, expected, wire=False) -> tuple[Any, list]:
    with _deferred.deferred_variables() as deferred:
        obj = from_config(
            config, custom_objects, safe_mode=safe_mode, expected_variables=expected, compile=False, wire=wire
        )
    return obj, deferred


def from_config(
    config_json: str | dict,
    custom_objects: dict[str, Any],
    *,
    safe_mode: bool,
    expected_variables: int = 0,
    compile: bool = True,
    wire: bool = False,
) -> Any:
    """Build a fresh object from a JSON config, or from one decoded, which this consumes.

    A JSON config is decoded anew on every call: Keras's deserializer consumes
    the dict it is given. ``expected_variables`` is how many variables the
    original had; see :func:`_build_sublayers`. ``compile=False`` skips the
    compile config. ``wire=True`` creates a plain Functional's or Sequential's
    nodes from the specs its config records (:mod:`keras_pickle._keras3.graph`).
    """
    config = json.loads(config_json) if isinstance(config_json, str) else config_json
    if safe_mode:  # judged by name before Keras resolves or imports anything for it
        judge_names(config)
    if not compile and isinstance(config, dict):
        config.pop("compile_config", None)
    elif isinstance(config, dict) and config.get("compile_config"):
        config["compile_config"] = _convert.portable_config(config["compile_config"])
    if _convert.is_optimizer_config(config):
        config = _convert.portable_config(config)
    with (
        serialization_lib.ObjectSharingScope(),
        keras.saving.custom_object_scope(custom_objects),
    ):
        if _is_plain_sequential(config, custom_objects):
            obj = _sequential_from_config(config, custom_objects, safe_mode=safe_mode, wire=wire)
        elif wire and _is_plain_functional(config, custom_objects) and _graph.has_specs(config):
            with serialization_lib.SafeModeScope(safe_mode):
                obj = _graph.functional_from_config(config["config"], custom_objects)
            if config.get("compile_config"):
                obj.compile_from_config(config["compile_config"])
                obj.compiled = True
        else:
            obj = serialization_lib.deserialize_keras_object(config, custom_objects=custom_objects, safe_mode=safe_mode)
        if len(getattr(obj, "variables", ())) < expected_variables:
            _build_sublayers(obj)
    return obj


def _is_plain_sequential(config: Any, custom_objects: dict[str, Any]) -> bool:
    return (
        isinstance(config, dict)
        and config.get("class_name") == "Sequential"
        and config.get("module") in ("keras", "keras.models", "keras.src.models.sequential")
        and _names_keras_own(config, keras.Sequential, custom_objects)
        and isinstance(config.get("config"), dict)
        and "layers" in config["config"]
    )


def _is_plain_functional(config: Any, custom_objects: dict[str, Any]) -> bool:
    return (
        isinstance(config, dict)
        and config.get("class_name") == "Functional"
        and config.get("module") in ("keras", "keras.models", "keras.src.models.functional")
        and _names_keras_own(config, Functional, custom_objects)
        and isinstance(config.get("config"), dict)
        and "layers" in config["config"]
    )


def _names_keras_own(config: dict, cls: type, custom_objects: dict[str, Any]) -> bool:
    """Whether Keras resolves the ``registered_name`` of a config of one of its own modules to ``cls``.

    A process that pickled a model through scikeras has Keras's ``Functional`` and ``Sequential``
    registered as ``">Functional"`` (scikeras registers the class of each model it packs), and
    every config written there says so. Keras resolves such a name to a custom object registered
    under it, else, by module and class name, to its own class.
    """
    registered = config.get("registered_name")
    if registered is None or registered == cls.__name__:
        return True
    if not isinstance(registered, str):
        return False
    found = object_registration.get_registered_object(registered, custom_objects)
    return found is None or found is cls


def _sequential_from_config(
    config: dict, custom_objects: dict[str, Any], *, safe_mode: bool, wire: bool = False
) -> keras.Sequential:
    """``Sequential.from_config`` in linear time.

    Keras's version adds layers one by one and re-traces the whole stack after
    every ``add`` (quadratic in depth). Here every layer is added without a
    rebuild and the stack is traced once; the result is the same model. Then,
    as ``deserialize_keras_object`` does, the build and compile configs apply.
    """
    inner = config["config"]
    model = keras.Sequential(name=inner["name"])
    for layer_config in inner["layers"]:
        layer = serialization_lib.deserialize_keras_object(
            layer_config, custom_objects=custom_objects, safe_mode=safe_mode
        )
        model.add(layer, rebuild=False)
    if (model.layers or model._layers) and not (wire and _graph.build_sequential(model, inner["layers"])):
        model._maybe_rebuild()
    build_input_shape = inner.get("build_input_shape")
    if not model._functional and isinstance(build_input_shape, (tuple, list)) and build_input_shape:
        model.build(build_input_shape)
    build_config = config.get("build_config")
    if build_config and not model.built:
        model.build_from_config(build_config)
        model.built = True
    compile_config = config.get("compile_config")
    if compile_config:
        model.compile_from_config(compile_config)
        model.compiled = True
    return model


def _build_sublayers(layer: Any) -> None:
    """Build the sublayers a default ``build()`` leaves unbuilt.

    A custom layer that creates sublayers in ``__init__`` but has no
    ``build()`` gets built only when first called; Keras's
    ``build_from_config`` marks it built without creating those variables. A
    symbolic call on the recorded input shape creates them, as the original's
    first call did.
    """
    shapes = getattr(layer, "_build_shapes_dict", None) or {}
    if isinstance(layer, keras.Model) or len(shapes) != 1:
        return
    (shape,) = shapes.values()
    if not isinstance(shape, (list, tuple)):
        return
    dtype = layer.dtype_policy.compute_dtype
    layer(keras.KerasTensor(tuple(shape), dtype=dtype))
