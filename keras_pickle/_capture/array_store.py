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
    """The bytes of ``value`` (weight ``key`` of ``owner``, as :func:`keras_pickle._keras3.backend.to_numpy`
    reads it) as a read-only, C-contiguous uint8 array: the very array handed to ``store`` for this weight
    before when the bytes are unchanged, else a snapshot that nothing changes later.

    ``value`` is a snapshot where it is read-only (TensorFlow's copy-on-write reads, JAX's immutable arrays);
    a writable one may be the live variable's memory (a PyTorch view, read with ``snapshot=False``), so it is
    copied when it is handed over afresh, and only then: an unchanged weight costs one comparison per
    pickle, not a copy. Unchanged is decided without reading the bytes where ``value`` is the memory handed
    over before (a read-only snapshot viewing the variable's buffer, which the kept array holds, so a
    variable assigned since has another one); else by comparing the bytes.
    """
    flat = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
    if flat.nbytes < MIN_BYTES:
        return _snapshot(flat)
    try:
        kept = _kept.setdefault(store, {})
    except TypeError:  # a store that cannot be weakly referenced: nothing is kept
        return _read_only(flat)
    with _lock:
        entry = kept.get((id(owner), key))
        same_owner = entry is not None and entry[0]() is owner
        if same_owner and (_same_memory(entry[1], flat) or np.array_equal(entry[1], flat)):
            return entry[1]
        handed = _snapshot(flat)
        kept[(id(owner), key)] = (weakref.ref(owner), handed)
        return handed


def _same_memory(kept: np.ndarray, flat: np.ndarray) -> bool:
    """Whether ``flat`` is the memory ``kept`` (alive, so no other array can start at its address) views."""
    return kept.nbytes == flat.nbytes and kept.ctypes.data == flat.ctypes.data


def _snapshot(flat: np.ndarray) -> np.ndarray:
    """``flat`` as a read-only array that nothing changes later: a read-only snapshot as it is, a writable
    array (possibly the live variable's memory) copied."""
    return _read_only(np.array(flat, copy=True) if flat.flags.writeable else flat)


def _read_only(array: np.ndarray) -> np.ndarray:
    array = array.view()
    array.flags.writeable = False
    return array
