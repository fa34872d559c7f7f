"""What an attribute-by-attribute deep copy of a Keras 3 object does around its attributes (``Dialect.copy_plan``).

:mod:`keras_pickle._protocol.attribute_copy` copies the attributes; this module says what Keras 3 adds: the
optimizer and metrics a model owns are copied first, tracked containers are filled with Keras's tracking off, and
the copy gets the records keras_pickle keeps beside the original and a tracker that knows the copy's own objects.
"""

from __future__ import annotations

from typing import Any

from keras.src.utils import tracking

from .._dialect import CopyPlan
from .recorded import records as _records


def plan(obj: Any, memo: dict) -> CopyPlan:
    """The copy plan of a Keras 3 layer, model, optimizer or metric (``memo``: the deep copy's)."""

    def finish(twin: Any) -> None:
        _records.copy_records(obj, twin, memo)
        _retrack(twin)

    return CopyPlan(
        first=[part for part, _path in _records.owned_parts(obj)], scope=tracking.DotNotTrackScope, finish=finish
    )


def _retrack(twin: Any) -> None:
    """Point the copy's tracker at what its stores hold: the copied ``stored_ids`` are the original's objects'
    ids, which would let the copy track one of its own objects twice."""
    tracker = vars(twin).get("_tracker")
    if isinstance(tracker, tracking.Tracker):
        tracker.stored_ids = {name: {id(value) for value in store} for name, (_test, store) in tracker.config.items()}
