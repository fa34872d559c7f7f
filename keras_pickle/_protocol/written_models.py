"""Which models the pickling operation in progress has already written.

A built optimizer (or a metric given to ``compile()``) pickles as "that
model's optimizer" (``keras_pickle._format.part_of``) only when its model was
pickled before it in the same pickle: then the reference costs a memo lookup,
and loading gives back the very optimizer the restored model holds. Alone,
it is refused, as RFC 286 asks. The operation is identified as
:func:`keras_pickle._pickling_context.operation_key` says; only the latest
one per thread is remembered.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from .._pickling_context import operation_key

_state = threading.local()


def _models_of_current_operation() -> dict[int, weakref.ref]:
    operation = operation_key()
    if getattr(_state, "operation", None) != operation:
        _state.operation = operation
        _state.models = {}
    return _state.models


def note_pickled(model: Any) -> None:
    """Record that ``model`` is being written by the pickling operation in progress."""
    _models_of_current_operation()[id(model)] = weakref.ref(model)


def pickled_before(model: Any) -> bool:
    """Whether ``model`` was written earlier by the pickling operation in progress."""
    ref = _models_of_current_operation().get(id(model))
    return ref is not None and ref() is model
