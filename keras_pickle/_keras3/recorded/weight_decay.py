"""What ``Optimizer.exclude_from_weight_decay()`` sets, which the optimizer's config omits, as it travels.

``exclude_from_weight_decay(var_list=..., var_names=...)`` keeps a set of variable keys (ids) and a
compiled name pattern on the optimizer; ``get_config()`` records neither, so a copy rebuilt from the
config would decay the variables the original excludes, and train differently without a word.

They travel as :data:`KEY` in the serialized optimizer inside a compiled model's compile config
(``compile_config["optimizer"]``, or its ``inner_optimizer`` for a ``LossScaleOptimizer``):
``{"pattern": <the name pattern's text or None>, "trainable_positions": [<index>, ...]}``, each
excluded variable named by its position in the model's ``trainable_variables`` (the order the
optimizer is built in), never by id. Keras ignores a serialized object's keys it does not know; the
rebuild takes :data:`KEY` out before Keras deserializes the compile config
(:func:`take_from_compile_config`) and gives the settings to the rebuilt model's optimizer
(:func:`apply`). A standalone optimizer copied in-process keeps its settings with its variables
mapped through the copy's memo (:func:`copy_settings`).
"""

from __future__ import annotations

import re
from typing import Any

import keras

from ...errors import KerasPicklingError, KerasUnpicklingError

KEY = "keras_pickle_exclude_from_weight_decay"
MAX_PATTERN_CHARS = 10_000


def settings_of(optimizer: Any) -> tuple[str | None, list[Any]]:
    """``(pattern text or None, excluded variable keys)`` that ``exclude_from_weight_decay()`` set on ``optimizer``."""
    pattern = getattr(optimizer, "_exclude_from_weight_decay_pattern", None)
    keys = list(getattr(optimizer, "_exclude_from_weight_decay", None) or ())
    return (pattern.pattern if pattern is not None else None), keys


def has_settings(optimizer: Any) -> bool:
    pattern, keys = settings_of(optimizer)
    return pattern is not None or bool(keys)


def _carrier(optimizer: Any) -> tuple[Any, tuple[str, ...]]:
    """The optimizer whose settings travel and where its serialized dict sits in ``optimizer``'s:
    ``optimizer`` itself, or the optimizer a ``LossScaleOptimizer`` wraps."""
    inner = getattr(optimizer, "inner_optimizer", None)
    if not has_settings(optimizer) and isinstance(inner, keras.optimizers.Optimizer):
        return inner, ("config", "inner_optimizer")
    return optimizer, ()


def annotate_compile_config(config: dict, model: Any) -> None:
    """Record in ``config`` (``model``'s serialized config, changed in place) what ``exclude_from_weight_decay()``
    set on ``model.optimizer``, if anything. Raises :class:`KerasPicklingError` for an excluded variable that is
    not one of the model's trainable variables (nothing could name it in the rebuilt model)."""
    optimizer = getattr(model, "optimizer", None)
    compile_config = config.get("compile_config") if isinstance(config, dict) else None
    if not isinstance(optimizer, keras.optimizers.Optimizer) or not isinstance(compile_config, dict):
        return
    carrier, where = _carrier(optimizer)
    pattern, keys = settings_of(carrier)
    if pattern is None and not keys:
        return
    positions = {carrier._var_key(v): position for position, v in enumerate(model.trainable_variables)}
    unknown = [key for key in keys if key not in positions]
    if unknown:
        raise KerasPicklingError(
            f"Cannot pickle {type(model).__name__} '{model.name}': its optimizer's "
            f"exclude_from_weight_decay(var_list=...) names {len(unknown)} variable(s) that are not trainable "
            "variables of the model, which nothing could name in the rebuilt model. Exclude them by name instead "
            "(exclude_from_weight_decay(var_names=[...])), or pass only the model's own trainable variables."
        )
    serialized = compile_config.get("optimizer")
    if not isinstance(serialized, dict):  # compiled with a name ("adamw"): the optimizer it made, serialized
        serialized = compile_config["optimizer"] = keras.saving.serialize_keras_object(optimizer)
    target = serialized
    for step in where:
        target = target[step]
    target[KEY] = {"pattern": pattern, "trainable_positions": sorted(positions[key] for key in keys)}


def take_from_compile_config(compile_config: Any) -> tuple[tuple[str, ...], str | None, list[int]] | None:
    """``(where, pattern, trainable positions)`` recorded in a compile config (:func:`annotate_compile_config`),
    removed from it; None if none is. ``where``: ``()`` for the optimizer, ``("inner_optimizer",)`` for the one
    a ``LossScaleOptimizer`` wraps. Raises :class:`KerasUnpicklingError` for a malformed record."""
    serialized = compile_config.get("optimizer") if isinstance(compile_config, dict) else None
    if not isinstance(serialized, dict):
        return None
    if KEY in serialized:
        return (), *_checked(serialized.pop(KEY))
    inner = serialized.get("config", {}).get("inner_optimizer") if isinstance(serialized.get("config"), dict) else None
    if isinstance(inner, dict) and KEY in inner:
        return ("inner_optimizer",), *_checked(inner.pop(KEY))
    return None


def _checked(record: Any) -> tuple[str | None, list[int]]:
    if not (isinstance(record, dict) and set(record) == {"pattern", "trainable_positions"}):
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: {KEY} is not a dict of pattern and positions.")
    pattern, positions = record["pattern"], record["trainable_positions"]
    if not (pattern is None or (isinstance(pattern, str) and len(pattern) <= MAX_PATTERN_CHARS)):
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: {KEY} holds an invalid name pattern.")
    if not (isinstance(positions, list) and all(type(p) is int and p >= 0 for p in positions)):
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: {KEY} holds invalid variable positions.")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: {KEY} holds an invalid name pattern ({e})."
            ) from e
    return pattern, positions


def refusal(optimizer: Any) -> str | None:
    """Why ``optimizer`` cannot travel by its config alone (outside a compiled model's compile config, where
    :func:`annotate_compile_config` carries its settings): the settings ``exclude_from_weight_decay()`` made,
    which its config omits; None if it made none."""
    carrier, _where = _carrier(optimizer)
    pattern, keys = settings_of(carrier)
    if pattern is None and not keys:
        return None
    what = " and ".join(
        part
        for part in (
            f"the name pattern {pattern!r}" if pattern else "",
            f"{len(keys)} variable(s) of var_list" if keys else "",
        )
        if part
    )
    return (
        f"exclude_from_weight_decay() set {what} on it, which its config omits, so a copy rebuilt from its config "
        "would decay the variables it excludes."
    )


def apply(model: Any, taken: tuple[tuple[str, ...], str | None, list[int]] | None) -> None:
    """Give the rebuilt ``model``'s optimizer (or the one it wraps) the settings :func:`take_from_compile_config`
    took, the variables named by their position in ``model.trainable_variables``."""
    if taken is None:
        return
    where, pattern, positions = taken
    optimizer = getattr(model, "optimizer", None)
    for step in where:
        optimizer = getattr(optimizer, step, None)
    variables = list(model.trainable_variables)
    if not isinstance(optimizer, keras.optimizers.Optimizer) or any(p >= len(variables) for p in positions):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: it excludes trainable variables {positions} of {type(model).__name__} "
            f"'{model.name}' from weight decay, but the rebuilt model has {len(variables)} trainable variables "
            f"and {'an' if optimizer is not None else 'no'} optimizer there."
        )
    _set(optimizer, pattern, [optimizer._var_key(variables[p]) for p in positions])


def copy_settings(original: Any, twin: Any, memo: dict, variables: Any = ()) -> None:
    """Give ``twin`` (a copy of the optimizer ``original``) its settings: each excluded variable that the
    original was built for, or that is among ``variables`` (its model's), as its copy in ``memo`` where it
    was copied; keys of other variables stay as they are (the copy excludes the same variables)."""
    pattern, keys = settings_of(original)
    if pattern is None and not keys:
        return
    known = [*(getattr(original, "_trainable_variables", None) or ()), *variables]
    built_for = {original._var_key(v): v for v in known}
    mapped = [twin._var_key(memo.get(id(built_for[key]), built_for[key])) if key in built_for else key for key in keys]
    _set(twin, pattern, mapped)


def _set(optimizer: Any, pattern: str | None, keys: list[Any]) -> None:
    """What ``exclude_from_weight_decay()`` sets, set on a possibly built optimizer (which that method refuses)."""
    optimizer._exclude_from_weight_decay = set(keys)
    optimizer._exclude_from_weight_decay_pattern = re.compile(pattern) if pattern is not None else None
    optimizer._exclude_from_weight_decay_cache = {}
