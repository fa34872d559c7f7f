"""The structure of a payload body's sections, checked before anything is decoded: the array sections
(variables, optimizer and metric variables, layer states and their assets, held optimizers), the recorded
constructor and ``compile()`` calls, the custom-object table. :mod:`.schema` runs them in order."""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Iterable
from typing import Any

from .. import limits
from ..errors import KerasUnpicklingError
from .reprs import bounded_repr

_POSITIONAL_PLACE = re.compile(r"#(0|[1-9][0-9]{0,17})/")


def positional_place(position: int) -> str:
    """The ``layer_states`` place that names a layer by its position in Keras's ``_flatten_layers()`` order
    of the rebuilt object: ``#<position>/``. No layer's own place ends with ``/``."""
    return f"#{position}/"


def place_position(place: str) -> int | None:
    """The position a :func:`positional_place` names; ``None`` for any other place."""
    match = _POSITIONAL_PLACE.fullmatch(place)
    return int(match.group(1)) if match else None


def sequence(body: dict, key: str) -> list:
    """The list ``body[key]`` (an absent key: empty); a tuple or anything else is not what dumps writes."""
    value = body.get(key, [])
    if not isinstance(value, list):
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: {key} is a {type(value).__name__}, not a list.")
    return value


def checked_arrays(body: dict, place_type: type) -> Iterable[tuple[object, str]]:
    """Every array entry of the body with its section, the structure around it checked; each
    ``layer_states`` place is a ``place_type`` (an ``int``, at least 0, or a ``str``)."""
    for section in ("variables", "optimizer_variables", "metric_variables"):
        for entry in sequence(body, section):
            yield entry, section
    for state in sequence(body, "layer_states"):
        if not (
            isinstance(state, tuple)
            and len(state) == 3
            and isinstance(state[0], place_type)
            and not isinstance(state[0], bool)
            and (place_type is str or state[0] >= 0)
            and isinstance(state[1], (list, tuple))
            and isinstance(state[2], (list, tuple))
        ):
            raise KerasUnpicklingError(
                "Corrupt keras_pickle payload: a layer_states entry is not a (place, variables, assets) tuple."
            )
        for asset in state[2]:
            if not (isinstance(asset, tuple) and len(asset) == 2 and isinstance(asset[0], str)):
                raise KerasUnpicklingError("Corrupt keras_pickle payload: an asset is not a (path, content) tuple.")
            if not isinstance(asset[1], (bytes, bytearray, memoryview, pickle.PickleBuffer)):
                raise KerasUnpicklingError(
                    f"Corrupt keras_pickle payload: asset {asset[0]!r} holds a {type(asset[1]).__name__}, not bytes."
                )
        for entry in state[1]:
            yield entry, "layer_states"
    for held in sequence(body, "held_optimizers"):
        if not (
            isinstance(held, tuple)
            and len(held) == 5
            and isinstance(held[0], str)
            and isinstance(held[1], str)
            and isinstance(held[2], bool)
            and isinstance(held[3], list)
            and all(isinstance(position, int) and not isinstance(position, bool) for position in held[3])
            and isinstance(held[4], list)
        ):
            raise KerasUnpicklingError(
                "Corrupt keras_pickle payload: a held_optimizers entry is not "
                "(path, config, built, targets, variables)."
            )
        size = len(held[1])
        limits.check_limit("MAX_CONFIG_BYTES", size, f"an optimizer config has {size:,} characters")
        for entry in held[4]:
            yield entry, "held_optimizers"


def check_recorded_calls(body: dict) -> None:
    """The structure of ``constructed``, ``compile_call`` and ``compile_objects`` (since format version 3)."""
    if "constructed" not in body:
        return
    constructed = sequence(body, "constructed")
    limits.check_limit("MAX_LAYERS", len(constructed), "its body lists more constructed objects")
    for entry in constructed:
        if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[1], tuple)):
            raise KerasUnpicklingError(
                "Corrupt keras_pickle payload: a constructed entry is not (class, args, kwargs)."
            )
        if not (isinstance(entry[2], dict) and all(isinstance(key, str) for key in entry[2])):
            raise KerasUnpicklingError("Corrupt keras_pickle payload: constructed keyword arguments are not a dict.")
    call = body["compile_call"]
    if call is not None and not (
        isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], tuple) and isinstance(call[1], dict)
    ):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: compile_call is not (args, kwargs).")
    optimizers = body["compile_objects"]
    if not (
        isinstance(optimizers, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in optimizers.items())
    ):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: compile_objects is not a dict of configs.")


def check_custom_objects(body: dict, is_custom_object: Callable[[Any], bool]) -> None:
    custom_objects = body.get("custom_objects", {})
    if not isinstance(custom_objects, dict):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: custom_objects is not a dict.")
    for key, value in custom_objects.items():
        if not isinstance(key, str):
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: custom object key {bounded_repr(key)} is not a string."
            )
        if not is_custom_object(value):
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: custom object {key!r} is a {type(value).__name__}, "
                "not a class or function."
            )
