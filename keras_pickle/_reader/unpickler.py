"""The restricted unpickler behind ``keras_pickle.loads(..., safe_mode=True)``.

A pickle can call any importable callable. :class:`SafeUnpickler` resolves a global only as safe
mode's policy says (:mod:`keras_pickle._safe_mode`, the rules with their reasons): a callable of
:data:`~keras_pickle._safe_mode.rules.CALLABLE_GLOBALS`, handed to the stream as its checked version
(keras_pickle's reconstructors, numpy's array, dtype and scalar reconstruction, latin-1
``_codecs.encode``); otherwise what the name resolves to as its module defines it
(:func:`~keras_pickle._safe_mode.resolution.resolve_as_defined`: already imported, never imported here),
if :func:`~keras_pickle._safe_mode.decision.refusal` allows it, handed to the stream as an *inert
reference*: the unpickler cannot call it, instantiate it or read its attributes; only keras_pickle's
reconstructor unwraps it into the ``custom_objects`` it gives Keras. The Keras-aware policy
(Keras's bases, what it vouches for) is passed in: this module imports no Keras.

What this module adds is what the stream may do beyond naming: the ``BUILD`` opcode
(``__setstate__``, or an update of ``__dict__``) may only complete the empty numpy array or a dtype
numpy's own pickles start from: on anything else (the model a reconstructor returned, an inert
reference, an allowed function) it would let the stream change an object after keras_pickle
validated it. CPython's C unpickler offers no hook for that opcode, so safe mode runs the
pure-Python unpickler (``pickle._Unpickler``); the streams it reads are small (weights are single
buffers), which keeps the cost to milliseconds. Dict keys and set items are flat values, and
persistent ids are refused.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from .._safe_mode.calls import allowed_call, check_plain_dtype
from .._safe_mode.decision import GlobalsPolicy, is_stdlib, refusal
from .._safe_mode.resolution import resolve_as_defined
from .._safe_mode.rules import CALLABLE_GLOBALS
from .._wire.refs import InertReference
from ..errors import UnsafePayloadError

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
    """The pure-Python unpickler, resolving globals as safe mode's policy says and BUILD-ing only numpy objects.

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
        check_plain_dtype(built, "BUILD")

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
            return allowed_call(module, name)
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
