"""Weights handed to a pickler that stores numpy arrays its own way (joblib), as numpy arrays.

joblib writes a large numpy argument to a file once per ``Parallel`` call and lets its workers
memory-map it; ``joblib.dump`` writes arrays raw and ``joblib.load(mmap_mode=...)`` maps them. It
knows an array it has written by the array object's identity. So each weight is handed over as a
read-only snapshot that stays the same object from one task's pickle to the next for as long as the
weight's value does not change, and becomes a new object (a new file) as soon as it does: a task
sees the state at its dispatch, never a later one.

The snapshots are kept per store (joblib's reducer lives as long as its pool), for arrays of at least
:data:`MIN_BYTES` (joblib keeps smaller ones in the task's pickle anyway).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

MIN_BYTES = 1 << 16
"""Below this, an array is not kept between pickles (joblib's memory-mapping threshold is 1 MB by default)."""

_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # store -> {(id(owner), key): (ref, array)}
_lock = threading.Lock()


def wire_data(store: Any, owner: Any, key: str, value: np.ndarray) -> np.ndarray:
    """The bytes of ``value`` (a snapshot of weight ``key`` of ``owner``) as a read-only, C-contiguous uint8
    array: the very array handed to ``store`` for this weight before when the bytes are unchanged.

    ``value`` must be a snapshot (:func:`keras_pickle._keras3.backend.to_numpy`: nothing changes it later).
    Unchanged is decided without reading the bytes where the snapshot is the memory handed over before
    (TensorFlow's copy-on-write reads and JAX's immutable arrays on the CPU are views of the variable's
    buffer, and the kept array holds that buffer, so a variable assigned since has another one); else by
    comparing the bytes (a PyTorch clone, a transfer from a device).
    """
    flat = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
    if flat.nbytes < MIN_BYTES:
        return _read_only(flat)
    try:
        kept = _kept.setdefault(store, {})
    except TypeError:  # a store that cannot be weakly referenced: nothing is kept
        return _read_only(flat)
    with _lock:
        entry = kept.get((id(owner), key))
        same_owner = entry is not None and entry[0]() is owner
        if same_owner and (_same_memory(entry[1], flat) or np.array_equal(entry[1], flat)):
            return entry[1]
        handed = _read_only(flat)  # a snapshot already: handed over as it is, never copied again
        kept[(id(owner), key)] = (weakref.ref(owner), handed)
        return handed


def _same_memory(kept: np.ndarray, flat: np.ndarray) -> bool:
    """Whether ``flat`` is the memory ``kept`` (alive, so no other array can start at its address) views."""
    return kept.nbytes == flat.nbytes and kept.ctypes.data == flat.ctypes.data


def _read_only(array: np.ndarray) -> np.ndarray:
    array = array.view()
    array.flags.writeable = False
    return array
