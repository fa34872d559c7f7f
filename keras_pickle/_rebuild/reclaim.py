"""A model rebuilt from memory-mapped weights frees the previous one's memory first (joblib workers).

A joblib worker (loky, ``multiprocessing``) receives a task's model as weights that joblib wrote to
a file once and memory-maps, and rebuilds it. The model of the worker's previous task is by then
usually garbage that only a collection of the older generations frees: Keras's layers, nodes and
trackers refer to each other. Until then the next model is allocated beside it, so the worker grows
by one model's state per task, and the backend keeps what it allocated once it is freed (TensorFlow
pools it). loky measures each worker's resident memory after its tasks and restarts a worker that
grew by more than 300 MB since its first task, which costs importing the backend again: seconds
per restart, for a model whose rebuild takes milliseconds.

So before a rebuild from mapped weights, if a model rebuilt that way earlier is still alive, the
garbage is collected: the young generations first (a fraction of a millisecond), everything when
that did not free it (a quarter of a second with TensorFlow imported). A model still alive after
that is held by the program and is not looked at again; and once a full collection has freed none
of them (a program that keeps every model it loads), later rebuilds collect only the young
generations, so such a program does not pay a full collection per load. Nothing happens for any
other payload, nor in a process that never loaded one from mapped weights.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

_rebuilt_from_mapped: weakref.WeakSet = weakref.WeakSet()
"""Models rebuilt from mapped weights that no collection has yet found held."""

_full_collection_frees = True
"""Whether the last full collection freed a model rebuilt from mapped weights (see the module docstring)."""


def has_mapped_weights(entries: Iterable[Any]) -> bool:
    """Whether a body's ``variables`` entries (``(path, dtype, shape, data)``) hold memory-mapped data."""
    return any(isinstance(entry, tuple) and len(entry) == 4 and isinstance(entry[3], np.memmap) for entry in entries)


def before_rebuild() -> None:
    """Collect the garbage of the models rebuilt earlier from mapped weights, if any is still alive."""
    global _full_collection_frees
    if not _rebuilt_from_mapped:
        return
    gc.collect(1)
    if _rebuilt_from_mapped and _full_collection_frees:
        alive = len(_rebuilt_from_mapped)
        gc.collect()
        _full_collection_frees = len(_rebuilt_from_mapped) < alive
    _rebuilt_from_mapped.clear()  # what survived is held by the program


def rebuilt(obj: Any) -> None:
    """Remember ``obj``, rebuilt from mapped weights, for :func:`before_rebuild`."""
    try:
        _rebuilt_from_mapped.add(obj)
    except TypeError:  # not weakly referenceable: nothing to watch
        pass
