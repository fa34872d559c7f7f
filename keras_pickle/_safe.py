"""The restricted unpickler behind ``keras_pickle.loads(..., safe_mode=True)``.

A pickle can call any importable callable. Safe mode resolves a global only
if it is one of:

* keras_pickle's reconstructors (``keras_pickle._format.restore``, and for
  objects pickled under ``install(allow=...)``, ``keras_pickle._allow.
  restore_with_state`` / ``restore_callback``, which check their input);
* numpy's array, dtype and scalar reconstruction functions;
* ``_codecs.encode`` (how protocols 0-2 spell ``bytes``);
* a class deriving from a Keras base class (layer, model, loss, metric,
  optimizer, initializer, regularizer, constraint, learning-rate schedule,
  callback), or a plain Python function, from a module that is already
  imported and is not part of the standard library.

Keras classes and custom objects are handed to the stream as *inert
references*: the unpickler cannot call them, instantiate them or read their
attributes; only keras_pickle's reconstructor unwraps them into the
``custom_objects`` it gives Keras. Nothing is ever imported.
"""

from __future__ import annotations

import pickle
import sys
import types
from typing import Any

from .errors import UnsafePayloadError

_CALLABLE_GLOBALS = {
    ("keras_pickle._format", "restore"),
    # Objects pickled under install(allow=...): a restore payload plus plain state.
    ("keras_pickle._allow", "restore_with_state"),
    ("keras_pickle._allow", "restore_callback"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


def looks_like_keras_native(head: bytes) -> bool:
    """Keras's own ``__reduce__`` pickles call ``Model._unpickle_model``;
    scikeras's replacement calls ``scikeras._saving_utils.unpack_keras_model``."""
    return b"_unpickle_model" in head or b"unpack_keras_model" in head


KERAS_NATIVE_HINT = (
    " This looks like Keras's own pickle format (or scikeras's), not keras_pickle's. Load it with "
    "keras_pickle.loads(data, safe_mode=False) only if you trust its source, then "
    "re-pickle it with keras_pickle."
)


class InertReference:
    """A class or function the stream names but may not call.

    Calling it raises :class:`UnsafePayloadError`; keras_pickle's
    reconstructor unwraps it with :func:`unwrap`.
    """

    __slots__ = ("target", "qualified_name")

    def __init__(self, target: Any, qualified_name: str):
        self.target = target
        self.qualified_name = qualified_name

    def __call__(self, *args, **kwargs):
        raise UnsafePayloadError(
            f"Safe mode refused to call {self.qualified_name} while unpickling: only "
            "keras_pickle's reconstructor and numpy array reconstruction may run.",
            what=self.qualified_name,
        )

    def __repr__(self) -> str:
        return f"<inert reference to {self.qualified_name}>"


def unwrap(value: Any) -> Any:
    return value.target if isinstance(value, InertReference) else value


def _keras_bases() -> tuple[type, ...]:
    import keras

    return (
        keras.src.saving.keras_saveable.KerasSaveable,
        keras.initializers.Initializer,
        keras.regularizers.Regularizer,
        keras.constraints.Constraint,
        keras.optimizers.schedules.LearningRateSchedule,
        keras.callbacks.Callback,
        keras.DTypePolicy,
    )


def _is_stdlib(module: str) -> bool:
    return module.split(".", 1)[0] in sys.stdlib_module_names or module == "builtins"


def _already_imported(module: str, name: str, qualified: str) -> Any:
    """An allowed callable, from sys.modules only (numpy 2 keeps ``numpy.core``
    names as aliases of ``numpy._core``)."""
    for candidate in (module, module.replace("numpy.core", "numpy._core", 1)):
        loaded = sys.modules.get(candidate)
        if loaded is not None and hasattr(loaded, name):
            return getattr(loaded, name)
    raise UnsafePayloadError(
        f"Safe mode refused global {qualified}: its module is not imported, and safe mode never imports modules.",
        what=qualified,
    )


class SafeUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves only what the module docstring lists."""

    def find_class(self, module: str, name: str) -> Any:
        qualified = f"{module}.{name}"
        if (module, name) in _CALLABLE_GLOBALS:
            return _already_imported(module, name, qualified)
        if _is_stdlib(module):
            raise UnsafePayloadError(
                f"Safe mode refused global {qualified}: the payload asks for a standard-library "
                "callable, which a keras_pickle payload never does. Do not load this data "
                "unless you trust its source.",
                what=qualified,
            )
        loaded = sys.modules.get(module)
        if loaded is None:
            raise UnsafePayloadError(
                f"Safe mode refused global {qualified}: module '{module}' is not imported, and "
                "safe mode never imports modules. Import it first if you trust it, or load "
                "with safe_mode=False.",
                what=qualified,
            )
        target: Any = loaded
        for part in name.split("."):
            target = getattr(target, part, None)
            if target is None:
                raise UnsafePayloadError(f"Safe mode refused global {qualified}: no such attribute.", what=qualified)
        allowed_class = isinstance(target, type) and issubclass(target, _keras_bases())
        allowed_function = isinstance(target, types.FunctionType)
        if not (allowed_class or allowed_function):
            raise UnsafePayloadError(
                f"Safe mode refused global {qualified}: a {type(target).__name__} that is "
                "neither a Keras class nor a plain Python function.",
                what=qualified,
            )
        return InertReference(target, qualified)

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePayloadError(
            "Safe mode refused a persistent id: keras_pickle payloads never use them.",
            what="persistent_load",
        )
