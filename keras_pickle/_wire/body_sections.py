"""The structure of a body's sections that hold no arrays, checked before anything is decoded: the
recorded constructor and ``compile()`` calls, the custom-object table (the array sections: :mod:`.layout`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import limits
from ..errors import KerasUnpicklingError
from .layout import listed
from .reprs import bounded_repr


def check_recorded_calls(body: dict) -> None:
    """The structure of ``constructed``, ``compile_call`` and ``compile_objects`` (since format version 3)."""
    if "constructed" not in body:
        return
    constructed = listed(body, "constructed")
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
