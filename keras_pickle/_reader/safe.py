"""The restricted unpickler behind ``keras_pickle.loads(..., safe_mode=True)``.

A pickle can call any importable callable. Safe mode resolves a global only
if it is one of:

* keras_pickle's reconstructors (``keras_pickle._format.restore``, and for
  objects pickled under ``install(allow=...)``, ``keras_pickle._allow.
  restore_with_state`` / ``restore_callback``, which check their input);
* numpy's array, dtype and scalar reconstruction functions as numpy's own
  pickles call them (an empty array whose data ``BUILD`` brings from the
  stream, a scalar from exactly its bytes; never an object array, never
  memory numpy leaves uninitialized);
* ``_codecs.encode`` with the latin-1 codec (how protocols 0-2 spell
  ``bytes``; any other codec would import its module);
* a class deriving from one of the classes the caller allows (keras_pickle's
  loader passes Keras's bases: layer, model, loss, metric, optimizer,
  initializer, regularizer, constraint, learning-rate schedule, callback,
  dtype policy), or a plain Python function, from a module that is already
  imported and is not part of the standard library.

This module imports no Keras: the allowed bases come from the caller.

Keras classes and custom objects are handed to the stream as *inert
references*: the unpickler cannot call them, instantiate them or read their
attributes; only keras_pickle's reconstructor unwraps them into the
``custom_objects`` it gives Keras. Nothing is ever imported: names are looked
up in the ``__dict__`` of modules already in ``sys.modules`` (a module's lazy
``__getattr__`` never runs).

The ``BUILD`` opcode (``__setstate__``, or an update of ``__dict__``) may only
complete a numpy array or dtype, as numpy's own pickles do: on anything else
(the model a reconstructor returned, an inert reference, an allowed function)
it would let the stream change an object after keras_pickle validated it.
CPython's C unpickler offers no hook for that opcode, so safe mode runs the
pure-Python unpickler (``pickle._Unpickler``); the streams it reads are small
(weights are single buffers), which keeps the cost to milliseconds.
"""

from __future__ import annotations

import inspect
import pickle
import sys
import types
from typing import Any

import numpy as np

from .._wire.refs import InertReference
from .._wire.reprs import bounded_repr
from ..errors import UnsafePayloadError
from .allowlist import CALLABLE_GLOBALS, GlobalsPolicy, is_stdlib, refusal


def looks_like_keras_native(head: bytes) -> bool:
    """Keras's own ``__reduce__`` pickles call ``Model._unpickle_model``;
    scikeras's replacement calls ``scikeras._saving_utils.unpack_keras_model``."""
    return b"_unpickle_model" in head or b"unpack_keras_model" in head


KERAS_NATIVE_HINT = (
    " This looks like Keras's own pickle format (or scikeras's), not keras_pickle's. If you trust its source, "
    "convert it once: keras_pickle.convert(data, custom_objects={...}) (the classes and functions it needs, as "
    "keras.saving.load_model takes them) returns a keras_pickle payload that keras_pickle.loads reads in safe mode."
)


def _already_imported(module: str, name: str, qualified: str) -> Any:
    """An allowed callable, from the namespace of a module in sys.modules only
    (numpy 2 keeps ``numpy.core`` names as aliases of ``numpy._core``)."""
    for candidate in (module, module.replace("numpy.core", "numpy._core", 1)):
        loaded = sys.modules.get(candidate)
        found = vars(loaded).get(name) if isinstance(loaded, types.ModuleType) else None
        if found is not None:
            return _CHECKED_CALLABLES.get((module.replace("numpy.core", "numpy._core", 1), name), found)
    raise UnsafePayloadError(
        f"Safe mode refused global {qualified}: its module is not imported, and safe mode never imports modules.",
        what=qualified,
    )


def resolve_as_defined(module: str, name: str) -> Any:
    """The class or function that ``module`` defines under the qualified name ``name``; else refused.

    Only a module already in ``sys.modules``, looked up statically (a lazy ``__getattr__`` never
    runs); a dotted ``name`` descends through classes only, never through another module
    (``keras_pickle._reader.safe`` + ``inspect.os.system`` is refused); and the object found must
    say it is defined there under that name (its ``__module__`` is that module, or the same
    module object as the main script's ``__main__`` / ``__mp_main__``, and its ``__qualname__`` is
    ``name``), so an alias one module keeps of another's object never resolves.
    """
    qualified = f"{module}.{name}"
    loaded = sys.modules.get(module)
    if not isinstance(loaded, types.ModuleType):
        raise UnsafePayloadError(
            f"Safe mode refused global {qualified}: module '{module}' is not imported, and "
            "safe mode never imports modules. Import it first if you trust it, or load "
            "with safe_mode=False.",
            what=qualified,
        )
    target: Any = loaded
    for part in name.split("."):
        if target is not loaded and not isinstance(target, type):
            raise UnsafePayloadError(
                f"Safe mode refused global {qualified}: it reaches {part!r} through a "
                f"{type(target).__name__}, and a global resolves only through the classes its module defines.",
                what=qualified,
            )
        target = inspect.getattr_static(target, part, None)
        if target is None:
            raise UnsafePayloadError(f"Safe mode refused global {qualified}: no such attribute.", what=qualified)
    defining = getattr(target, "__module__", None)
    same_module = isinstance(defining, str) and sys.modules.get(defining) is loaded
    if not (same_module and getattr(target, "__qualname__", None) == name):
        raise UnsafePayloadError(
            f"Safe mode refused global {qualified}: the object found there is "
            f"{bounded_repr(defining)}.{bounded_repr(getattr(target, '__qualname__', None))}, defined elsewhere "
            "(a global resolves only to what its module defines under that name).",
            what=qualified,
        )
    return target


# --------------------------------------------------------------------------
# Allowed callables that check their arguments
# --------------------------------------------------------------------------


class _NdarrayType:
    """What ``numpy.ndarray`` resolves to: a token for ``_reconstruct``'s subtype, not a constructor.

    ``ndarray(shape, dtype)`` would allocate whatever the stream asks for
    (zero-filled for object arrays); numpy's own pickles only pass the class
    to ``_reconstruct``.
    """

    __slots__ = ()

    def __call__(self, *args, **kwargs):
        raise UnsafePayloadError(
            "Safe mode refused a call of numpy.ndarray while unpickling: numpy's own pickles "
            "only name it as numpy.core.multiarray._reconstruct's subtype.",
            what="numpy.ndarray",
        )

    def __repr__(self) -> str:
        return "<numpy.ndarray, for _reconstruct only>"


_NDARRAY = _NdarrayType()


def _checked_reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    """numpy's ``_reconstruct`` as numpy's pickles call it: an empty plain ndarray, shape ``(0,)``.

    numpy pickles an array as ``_reconstruct(ndarray, (0,), b"b")`` followed
    by ``BUILD`` with the real shape, dtype and data (whose size bounds the
    allocation: numpy checks the data's length against the shape). Anything
    else is refused before numpy allocates: an array of any other shape is
    uninitialized memory, and a stream may leave out the ``BUILD``.
    """
    if subtype is not _NDARRAY:
        raise UnsafePayloadError(
            f"Safe mode refused numpy _reconstruct of {bounded_repr(subtype)}: only numpy.ndarray.",
            what="numpy.core.multiarray._reconstruct",
        )
    try:
        dims = [int(d) for d in (shape if isinstance(shape, tuple) else (shape,))]
        dtype = np.dtype(dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise UnsafePayloadError(
            f"Safe mode refused numpy _reconstruct with shape {bounded_repr(shape)} and dtype "
            f"{bounded_repr(dtype)}: {type(e).__name__}.",
            what="numpy.core.multiarray._reconstruct",
        ) from e
    if dtype.hasobject or dims != [0]:
        # Any other shape is memory numpy leaves uninitialized (a freed secret, heap addresses) or allocates
        # at the stream's word, filled by no BUILD: numpy's pickles pass (0,), and BUILD brings the data.
        raise UnsafePayloadError(
            f"Safe mode refused numpy _reconstruct of a {dtype} array of shape {bounded_repr(shape)}: "
            "numpy's own pickles start from an empty array, shape (0,), of a plain dtype, whose data BUILD "
            "then brings from the stream.",
            what="numpy.core.multiarray._reconstruct",
        )
    _check_plain_dtype(dtype, "_reconstruct")
    return np.ndarray(tuple(dims), dtype)  # what _reconstruct(ndarray, shape, dtype) does


def _latin1_encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """``_codecs.encode`` as protocols 0-2 use it for ``bytes``: latin-1 only (other codecs import modules)."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str) or errors != "strict":
        raise UnsafePayloadError(
            f"Safe mode refused _codecs.encode with codec {bounded_repr(encoding)}: pickles spell bytes "
            "with latin1 only, and another codec would import its module.",
            what="_codecs.encode",
        )
    return text.encode("latin-1")


def _check_plain_dtype(dtype: Any, what: str) -> None:
    """Refuse a dtype that numpy would not build from its own description: numpy's ``__setstate__`` of a
    dtype checks neither overlapping fields nor flags, and an object field laid over raw bytes, or one
    whose flags say it holds no objects, is a pointer chosen by the payload. Python objects are refused."""

    def rebuilt() -> list:
        found = []
        for build in (lambda: np.dtype(dtype.descr if dtype.fields else dtype.str), lambda: np.dtype(dtype.type)):
            try:
                found.append(build())
            except Exception:  # noqa: BLE001  (overlapping fields, a type numpy cannot rebuild by itself)
                pass
        return found

    same = [d for d in rebuilt() if d == dtype and d.flags == dtype.flags and d.itemsize == dtype.itemsize]
    if not same or same[0].hasobject or dtype.hasobject:
        raise UnsafePayloadError(
            f"Safe mode refused a numpy dtype made by {what}: keras_pickle payloads hold dtypes numpy builds from "
            "their own description (no overlapping fields, no Python objects, numpy's own flags).",
            what=f"numpy dtype ({what})",
        )


def _checked_frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's ``_frombuffer`` (protocol 5 arrays) for a plain dtype only, over a buffer numpy's pickles give it
    (bytes the stream holds, or an out-of-band buffer the caller passed): never over an array the stream made,
    whose data a later BUILD could free."""
    if not isinstance(buffer, (bytes, bytearray, memoryview, pickle.PickleBuffer)):
        raise UnsafePayloadError(
            f"Safe mode refused numpy _frombuffer over a {type(buffer).__name__}: numpy's pickles read bytes "
            "or an out-of-band buffer.",
            what="numpy._core.numeric._frombuffer",
        )
    if not isinstance(dtype, np.dtype):
        raise UnsafePayloadError(
            f"Safe mode refused numpy _frombuffer with dtype {bounded_repr(dtype)}: not a numpy dtype.",
            what="numpy._core.numeric._frombuffer",
        )
    _check_plain_dtype(dtype, "_frombuffer")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def _checked_scalar(dtype: Any, *obj: Any) -> Any:
    """numpy's ``scalar(dtype, data)`` as numpy pickles a scalar: a plain dtype and exactly its
    ``itemsize`` bytes of data, so that what is allocated is what the payload holds (``scalar(dtype)``
    alone allocates ``itemsize`` zeroed bytes, as many as a dtype's description asks)."""
    if not isinstance(dtype, np.dtype) or len(obj) != 1 or not isinstance(obj[0], bytes):
        raise UnsafePayloadError(
            f"Safe mode refused numpy scalar({bounded_repr(dtype)}, ...) with {len(obj)} more argument(s): "
            "numpy pickles a scalar as scalar(dtype, data), data being the scalar's bytes.",
            what="numpy.core.multiarray.scalar",
        )
    _check_plain_dtype(dtype, "scalar")
    if len(obj[0]) != dtype.itemsize:
        raise UnsafePayloadError(
            f"Safe mode refused numpy scalar of dtype {bounded_repr(str(dtype))} from {len(obj[0]):,} bytes: "
            f"a scalar of that dtype holds {dtype.itemsize:,}.",
            what="numpy.core.multiarray.scalar",
        )
    return _NUMPY_SCALAR(dtype, obj[0])


_NUMPY_SCALAR = vars(np._core.multiarray if hasattr(np, "_core") else np.core.multiarray)["scalar"]


_CHECKED_CALLABLES = {
    ("numpy._core.numeric", "_frombuffer"): _checked_frombuffer,
    ("numpy._core.multiarray", "_reconstruct"): _checked_reconstruct,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy._core.multiarray", "scalar"): _checked_scalar,
    ("_codecs", "encode"): _latin1_encode,
}

# What BUILD may complete: what numpy's own pickles complete.
_BUILDABLE = (np.ndarray, np.dtype)


_FLAT_KEY_TYPES = (str, bytes, int, float, bool, type(None))


def _check_keys(keys: list) -> None:
    """Refuse a dict key or set item whose hash could cost more than its size: a flat value or a tuple of them."""
    for key in keys:
        if isinstance(key, _FLAT_KEY_TYPES) or (
            type(key) is tuple and all(isinstance(item, _FLAT_KEY_TYPES) for item in key)
        ):
            continue
        raise UnsafePayloadError(
            f"Safe mode refused a {type(key).__name__} as a dict key or set item while unpickling: "
            "keras_pickle payloads use strings and numbers, and hashing nested structures can take "
            "time exponential in the size of the stream.",
            what="dict key",
        )


class SafeUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, resolving only what the module docstring lists and BUILD-ing only numpy objects.

    ``policy`` says which classes and functions the stream may name (as inert references).
    """

    def __init__(self, file, *, policy: GlobalsPolicy, buffers=None):
        super().__init__(file, buffers=buffers)
        self._policy = policy

    def _load_build(self) -> None:
        target = self.stack[-2] if len(self.stack) >= 2 else None
        if not isinstance(target, _BUILDABLE):
            raise UnsafePayloadError(
                f"Safe mode refused to set the state of a {type(target).__module__}.{type(target).__qualname__} "
                "while unpickling (BUILD): only numpy arrays and dtypes are completed that way, and "
                "a keras_pickle payload never changes an object after its reconstructor made it.",
                what="BUILD",
            )
        if isinstance(target, np.ndarray) and not (target.shape == (0,) and target.base is None):
            # An array BUILT again frees the data a view made of it still points at (memory then reused).
            raise UnsafePayloadError(
                "Safe mode refused to set the state of a numpy array that is not the empty one numpy's pickles "
                "start from (BUILD of a built array): it would free data another value may still point at.",
                what="BUILD",
            )
        pickle._Unpickler.load_build(self)
        built = target.dtype if isinstance(target, np.ndarray) else target
        _check_plain_dtype(built, "BUILD")

    # Dict keys and set items are hashed on insertion, and hashing a tuple
    # hashes its items: a tuple nested in itself 40 times through memo
    # references (a 200-byte stream) would take hours. Payloads only ever
    # use flat keys.
    def _load_setitem(self) -> None:
        _check_keys(self.stack[-2:-1])
        pickle._Unpickler.load_setitem(self)

    def _load_setitems(self) -> None:
        _check_keys(self.stack[0::2])  # the items since the mark
        pickle._Unpickler.load_setitems(self)

    def _load_dict(self) -> None:
        _check_keys(self.stack[0::2])
        pickle._Unpickler.load_dict(self)

    def _load_additems(self) -> None:
        _check_keys(self.stack)
        pickle._Unpickler.load_additems(self)

    def _load_frozenset(self) -> None:
        _check_keys(self.stack)
        pickle._Unpickler.load_frozenset(self)

    dispatch = {
        **pickle._Unpickler.dispatch,
        pickle.BUILD[0]: _load_build,
        pickle.SETITEM[0]: _load_setitem,
        pickle.SETITEMS[0]: _load_setitems,
        pickle.DICT[0]: _load_dict,
        pickle.ADDITEMS[0]: _load_additems,
        pickle.FROZENSET[0]: _load_frozenset,
    }

    def find_class(self, module: str, name: str) -> Any:
        qualified = f"{module}.{name}"
        if (module, name) in CALLABLE_GLOBALS:
            return _already_imported(module, name, qualified)
        if is_stdlib(module):
            raise UnsafePayloadError(
                f"Safe mode refused global {qualified}: the payload asks for a standard-library "
                "callable, which a keras_pickle payload never does. Do not load this data "
                "unless you trust its source.",
                what=qualified,
            )
        target = resolve_as_defined(module, name)
        reason = refusal(target, self._policy)
        if reason is not None:
            raise UnsafePayloadError(f"Safe mode refused global {qualified}: {reason}.", what=qualified)
        return InertReference(target, qualified)

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePayloadError(
            "Safe mode refused a persistent id: keras_pickle payloads never use them.",
            what="persistent_load",
        )
