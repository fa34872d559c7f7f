"""Classes and functions a payload names other than by import: by the name Keras registered them
under (``keras_pickle._format.registered``), or as defined inside a function of the writing
process (``keras_pickle._format.defined_here``)."""

from __future__ import annotations

import itertools
import os
import weakref
from typing import Any

import keras

from .._options import load_options
from .._safe_mode.decision import refusal
from .._wire import schema
from .._wire.refs import InertReference
from ..errors import KerasUnpicklingError, UnsafePayloadError
from .vetting import globals_policy


@schema.published(schema.REGISTERED)
def registered(name: Any) -> Any:
    """The class or function Keras has registered as ``name``: what :class:`ByRegisteredName` loads as.

    Part of the format (published as ``keras_pickle._format.registered``). In
    safe mode, an inert reference, and only to what safe mode lets a payload
    name (judged as the restricted reader judges a global).
    """
    obj = keras.saving.get_registered_object(name) if isinstance(name, str) else None
    if obj is None:
        raise KerasUnpicklingError(
            f"The payload names the class or function registered with Keras as {name!r:.200}, which is not "
            "registered in this process: import the module that registers it "
            "(@keras.saving.register_keras_serializable) before loading."
        )
    qualified = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"
    if not load_options().safe_mode:
        return obj
    reason = refusal(obj, globals_policy())
    if reason is None:
        return InertReference(obj, qualified)
    raise UnsafePayloadError(f"Safe mode refused {qualified}, registered as {name!r:.200}: {reason}.", what=qualified)


# --------------------------------------------------------------------------
# Classes and functions defined inside a function of this process
# --------------------------------------------------------------------------

LOCAL_CLASS_REMEDIES = (
    "Define it at module level, register it with @keras.saving.register_keras_serializable() (it then travels "
    "by its registered name), or send it with cloudpickle (loky, Dask and Ray do), which stores such a class by "
    "value."
)
"""What to do about a class or function defined inside a function that must load in another process."""

_defined_here: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_numbers = itertools.count()
_PROCESS = f"{os.getpid()}-{os.urandom(6).hex()}"


def token_for(obj: Any) -> str:
    """A name for ``obj`` (a class or function pickle cannot name) that :func:`defined_here` resolves in
    this process only, for as long as ``obj`` lives. Never the same in two processes."""
    for token, known in list(_defined_here.items()):
        if known is obj:
            return token
    token = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}@{_PROCESS}#{next(_numbers)}"
    _defined_here[token] = obj
    return token


@schema.published(schema.DEFINED_HERE)
def defined_here(token: Any) -> Any:
    """The class or function :func:`token_for` named ``token``, in the process that named it.

    Part of the format (published as ``keras_pickle._format.defined_here``). What
    scikeras and Keras's own pickling give a class defined inside a function: it
    round-trips within the process (scikit-learn's ``clone``, a copy through
    pickle), and anywhere else is a clear error. In safe mode, an inert reference,
    judged as the restricted reader judges a global.
    """
    obj = _defined_here.get(token) if isinstance(token, str) else None
    if obj is None:
        shown = str(token).partition("@")[0] if isinstance(token, str) else repr(token)[:200]
        raise KerasUnpicklingError(
            f"The payload names {shown:.200}, a class or function defined inside a function of the process that "
            f"wrote it, so it loads in that process only. {LOCAL_CLASS_REMEDIES}"
        )
    if not load_options().safe_mode:
        return obj
    qualified = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"
    # Only this process can name a token (it is never the same in two): the object is the payload's own.
    reason = refusal(obj, globals_policy(), carried=True)
    if reason is None:
        return InertReference(obj, qualified, carried=True)
    raise UnsafePayloadError(f"Safe mode refused {qualified}, defined in this process: {reason}.", what=qualified)
