"""A failure while a pickle stream is unpickled, inside a keras_pickle payload: which payload, which class.

An exception raised by the unpickler itself (not by keras_pickle's reconstructor) used to be
reported as "not a keras_pickle payload". When it happens inside one, it is not: a payload's
header is unpickled before its body, so it already sits in the unpickler's memo when the body
fails. :func:`payload_error` reads that memo (nothing is imported or called) and, when a header
is there whose payload has not been restored yet, returns the error to raise instead:

* :class:`~keras_pickle.CustomObjectLoadError` when the payload ships classes or functions by
  value (cloudpickle's reconstructors are in the memo after the header): it names the last
  class (else function) rebuilt after the header that its module does not define as itself,
  the module the loading process lacks (a ``ModuleNotFoundError``), both Keras versions and
  the remedy;
* otherwise a :class:`~keras_pickle.KerasUnpicklingError` naming the payload's class, both
  sides' versions and the cause.

``None``: no payload was being read; the data is not a keras_pickle payload (or the failure
came after every payload in it was restored).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import keras

from .._rebuild.load_by_value import Unloadable, missing_module
from .._wire import schema
from .._wire.reprs import as_text, shorten
from ..errors import CustomObjectLoadError, KerasUnpicklingError
from .sides import sides


def payload_error(unpickler: Any, restored: int, error: BaseException) -> KerasUnpicklingError | None:
    """The error to raise for ``error``, raised by ``unpickler`` after ``restored`` payloads loaded; or None."""
    memo = _memo(unpickler)
    headers = [(index, value) for index, value in memo if _is_header(value)]
    if len(headers) <= restored:
        return None
    index, header = headers[-1]
    after = [value for position, value in memo if position > index]
    missing = missing_module(error)
    payload = _payload_named(header)
    failure = f"{type(error).__name__}: {shorten(str(error), 300)}"
    if any(_is_cloudpickle_function(value) for value in after):
        shipped = [value for value in after if _shipped_by_value(value)]
        classes = [value for value in shipped if isinstance(value, type)]
        found = (classes or shipped or [None])[-1]
        name = f"{found.__module__}.{found.__qualname__}" if found is not None else None
        what = f"{name}, which it ships by value (cloudpickle)," if name else "a class or function it ships by value"
        return CustomObjectLoadError(
            f"Could not load {payload}: unpickling {what} failed with {failure}. "
            + _by_value_remedy(header, name, missing),
            name=name,
            missing_module=missing,
            original_error=error,
        )
    remedy = f" Make the module '{missing}' importable where the payload loads." if missing else ""
    return KerasUnpicklingError(
        f"Could not load {payload}: unpickling it failed with {failure}.{remedy}", original_error=error
    )


def unloadable_error(header: dict, unloadable: Unloadable) -> CustomObjectLoadError:
    """The error for a class or function the payload of ``header`` carries by value
    (``keras_pickle._format.by_value``) that failed to unpickle here: both sides and the remedy named."""
    missing = missing_module(unloadable.original_error)
    return CustomObjectLoadError(
        f"Could not load {_payload_named(header)}: unpickling {unloadable.named}, which it carries by "
        f"value (cloudpickle), failed with {unloadable.failure}. "
        + _by_value_remedy(header, unloadable.named, missing),
        name=unloadable.named,
        missing_module=missing,
        original_error=unloadable.original_error,
    )


def _payload_named(header: dict) -> str:
    """``"the keras_pickle payload of <class> (<both sides>)"``."""
    class_path = header.get("class")
    named = shorten(class_path, 300) if isinstance(class_path, str) else as_text(class_path)
    return f"the keras_pickle payload of {named} ({_both_sides(header)})"


def _both_sides(header: dict) -> str:
    described = sides(header)
    if described is not None:
        return described
    return f"written and loading on Keras {keras.__version__} ({as_text(header.get('backend'))})"


def _by_value_remedy(header: dict, name: str | None, missing: str | None) -> str:
    subject = name.rpartition(".")[2] if name else "it"
    written = as_text(header.get("keras_version"))
    move = f"Define {subject} in a module that both sides can import (it then travels by reference)"
    if missing and missing.split(".")[0] == "keras" and written != keras.__version__:
        return (
            f"A class shipped by value refers to the modules of the Keras that pickled it (Keras {written}), "
            f"and Keras {keras.__version__} has no module '{missing}'. Load it with Keras {written} or newer "
            f"(pip install 'keras>={written}')."
        )
    if missing:
        return f"Make the module '{missing}' importable where the payload loads, or: {move}."
    return f"{move}, or load it in an environment like the one that wrote it."


def _memo(unpickler: Any) -> list[tuple[int, Any]]:
    """The unpickler's memo as (index, value) pairs in index order; empty if it cannot be read."""
    try:
        memo = dict(unpickler.memo.copy())
    except Exception:
        return []
    return sorted(((index, value) for index, value in memo.items() if isinstance(index, int)), key=lambda x: x[0])


def _is_header(value: Any) -> bool:
    return type(value) is dict and value.get("format") == schema.FORMAT_NAME and "keras_version" in value


def _is_cloudpickle_function(value: Any) -> bool:
    """One of cloudpickle's reconstructors (vendored copies included), found by reference."""
    return callable(value) and "cloudpickle" in str(getattr(value, "__module__", "") or "")


def _shipped_by_value(value: Any) -> bool:
    """A class or Python function that its module does not define as itself: it was rebuilt by value."""
    if not isinstance(value, (type, types.FunctionType)) or _is_cloudpickle_function(value):
        return False
    if getattr(value, "__module__", None) == "builtins":
        return False  # the interpreter's own types (code, cell, function), not in builtins by name
    found: Any = sys.modules.get(getattr(value, "__module__", None) or "")
    for part in str(getattr(value, "__qualname__", "")).split("."):
        found = getattr(found, part, None)
    return found is not value
