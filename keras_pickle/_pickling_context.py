"""What a reducer can learn about the pickling operation that called it.

``pickle`` passes a reducer nothing but the protocol. Three questions still
need an answer: is cloudpickle the pickler (it writes classes that no import
can reach by value, where plain pickle fails), which operation is this
(:mod:`keras_pickle._protocol.written_models`), and does the pickler store numpy
arrays its own way (joblib: :func:`array_store`). Both are read off the call stack: a
pure-Python pickler (joblib's, dill's, ``pickle._Pickler``) or a pickler
subclass with Python methods (cloudpickle's ``Pickler.dump``) has a frame
whose ``self`` is the pickler; the C pickler's ``pickle.dumps`` and
``Pickler.dump`` call reducers straight from the caller's frame.
"""

from __future__ import annotations

import copyreg
import pickle
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

import numpy as np

_PICKLERS = (pickle.Pickler, pickle._Pickler)
_MAX_FRAMES = 64


def _first_outside_keras_pickle() -> FrameType | None:
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("keras_pickle."):
        frame = frame.f_back
    return frame


def _pickler_from(frame: FrameType | None) -> Any:
    depth = 0
    while frame is not None and depth < _MAX_FRAMES:
        if "self" in frame.f_code.co_varnames:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, _PICKLERS):
                return candidate
        frame = frame.f_back
        depth += 1
    return None


def current_pickler() -> Any:
    """The pickler object running the reducer that calls this, if one is visible on the stack."""
    return _pickler_from(_first_outside_keras_pickle())


def cloudpickle_is_pickling() -> bool:
    """Whether the reducer that calls this runs under cloudpickle (``cloudpickle.dumps``, Dask) or a
    vendored copy of it (loky's ``joblib.externals.cloudpickle``, ``ray.cloudpickle``)."""
    pickler = current_pickler()
    return pickler is not None and any("cloudpickle" in klass.__module__ for klass in type(pickler).__mro__)


def operation_key() -> tuple:
    """An identity for the pickling operation running the reducer that calls this (see the module docstring)."""
    frame = _first_outside_keras_pickle()
    pickler = _pickler_from(frame)
    if pickler is not None:
        return ("pickler", id(pickler))
    return ("frame", id(frame), getattr(frame, "f_lasti", -1))


def array_store() -> Any:
    """What stores numpy arrays its own way in the pickling operation running the caller, if anything.

    The reducer a pickler's ``dispatch_table`` (the standard pickle hook) maps ``numpy.ndarray`` to, as
    joblib's loky and multiprocessing backends register one that writes a large array to a file once and
    lets workers memory-map it; or the pickler itself, when it is ``joblib.dump``'s
    ``joblib.numpy_pickle.NumpyPickler`` (which writes arrays raw, compressed on request, memory-mapped by
    ``joblib.load(mmap_mode=...)``). ``None`` for every other pickler: plain pickle, cloudpickle, Dask, Ray.
    """
    pickler = current_pickler()
    if pickler is None:
        return None
    table = getattr(pickler, "dispatch_table", None)
    reducer = table.get(np.ndarray) if isinstance(table, Mapping) else None
    if reducer is not None and reducer is not copyreg.dispatch_table.get(np.ndarray):
        return reducer
    numpy_pickle = sys.modules.get("joblib.numpy_pickle")
    if numpy_pickle is not None and isinstance(pickler, getattr(numpy_pickle, "NumpyPickler", ())):
        return pickler
    return None
