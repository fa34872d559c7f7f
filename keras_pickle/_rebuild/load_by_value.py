"""Classes and functions of the main script that a payload carries by value (``keras_pickle._format.by_value``).

A class defined in the main script (``__main__``: a notebook, a script) pickles by reference as
``__main__.Name``, which only a process running the same script can resolve: a Spark executor
(whose ``__main__`` is ``pyspark.daemon``), a forkserver child of a notebook, another script
reading the file all fail with ``AttributeError: Can't get attribute``. Under plain pickle the
dump side (:mod:`keras_pickle._capture.main_script`) writes such a class as ``by_value(module,
qualname, data)``, ``data`` being the class pickled by cloudpickle. Loading it:

1. where the loading process's main script defines ``qualname`` itself (the writing process, a
   ``spawn`` child of it, a rerun of the script), that object, as plain pickle would resolve it
   (in safe mode judged as any global, handed on as an inert reference);
2. otherwise the carried class: ``data`` is unpickled, which runs the code it holds. Plain
   ``pickle.loads`` and ``keras_pickle.loads(safe_mode=False)`` do; safe mode refuses with
   :class:`~keras_pickle.UnsafePayloadError` unless the caller opted in with
   ``keras_pickle.loads(data, allow_by_value=True)``; nothing in ``data`` runs before that.
   Where ``data`` fails to unpickle (a module it names is missing here: the writer's newer Keras
   defines a base class this one lacks), the stand-in :class:`Unloadable` takes its place, and
   the reconstructor, which knows both sides' Keras versions, raises the error.
"""

from __future__ import annotations

import pickle
import types
from typing import Any

from .._options import load_options
from .._safe_mode.decision import refusal
from .._safe_mode.resolution import resolve_as_defined
from .._wire import schema
from .._wire.refs import MAIN_MODULES, InertReference, qualified_name
from .._wire.reprs import bounded_repr, shorten
from ..errors import CustomObjectLoadError, KerasUnpicklingError, UnsafePayloadError
from .vetting import globals_policy

BY_VALUE_REMEDY = (
    "define {name} in a module the loading process imports (it then travels by reference, and safe mode "
    "judges it by name)"
)


@schema.published(schema.BY_VALUE)
def by_value(module: Any, qualname: Any, data: Any) -> Any:
    """The class or function of the writer's main script named ``module.qualname``, carried as ``data``.

    Part of the format (published as ``keras_pickle._format.by_value``); see the module docstring
    for the order it is looked for in. Raises :class:`UnsafePayloadError` when safe mode would have
    to run ``data`` without ``allow_by_value=True``, :class:`KerasUnpicklingError` for malformed
    arguments; returns an :class:`Unloadable` when ``data`` cannot be unpickled here.
    """
    if not (isinstance(module, str) and isinstance(qualname, str) and isinstance(data, (bytes, bytearray))):
        raise KerasUnpicklingError(
            "Malformed payload: by_value takes (module, qualname, data) as (str, str, bytes). Received: "
            f"{bounded_repr(module)}, {bounded_repr(qualname)}, a {type(data).__name__}."
        )
    named = shorten(qualified_name(InertReference(None, f"{module}.{qualname}")), 300)
    short = shorten(qualname.rpartition(".")[2], 100)
    options = load_options()
    found = defined_by_name(module, qualname)
    if found is None:
        if options.safe_mode and not options.allow_by_value:
            raise UnsafePayloadError(
                f"Safe mode refused {named}, which this payload carries by value: its code travels in the payload "
                f"and would run on load, and this process's main script defines no {short} to use instead. If "
                "you trust whoever wrote the payload, load it with keras_pickle.loads(data, allow_by_value=True) "
                f"(or safe_mode=False); or {BY_VALUE_REMEDY.format(name=short)}.",
                what=named,
            )
        found = _unpickle(bytes(data), named, short)
    if not options.safe_mode or isinstance(found, Unloadable):
        return found
    # Only allow_by_value (the caller trusts the writer's code) makes a function the payload's own: without
    # it, a function this process's main script happens to define is judged like any other global.
    carried = options.allow_by_value
    reason = refusal(found, globals_policy(), carried=carried)
    if reason is not None:
        raise UnsafePayloadError(f"Safe mode refused {named}, carried by value: {reason}.", what=named)
    return InertReference(found, named, carried=carried)


def defined_by_name(module: str, qualname: str) -> Any:
    """What the loading process's main script defines as ``qualname`` (looked up statically), else None."""
    if module not in MAIN_MODULES:
        return None
    for candidate in MAIN_MODULES:
        try:
            return resolve_as_defined(candidate, qualname)
        except UnsafePayloadError:
            continue
    return None


def _unpickle(data: bytes, named: str, short: str) -> Any:
    try:
        found = pickle.loads(data)
    except Exception as e:
        return Unloadable(named, short, e)
    if not isinstance(found, (type, types.FunctionType)):
        raise KerasUnpicklingError(
            f"Malformed payload: {named}, carried by value, unpickled to a {type(found).__name__}, "
            "not a class or function."
        )
    return found


def missing_module(error: BaseException) -> str | None:
    """The module a ``ModuleNotFoundError`` names, else None."""
    return error.name if isinstance(error, ModuleNotFoundError) and isinstance(error.name, str) else None


class Unloadable:
    """What :func:`by_value` returns for a carried class or function whose ``data`` failed to unpickle here.

    It does not raise there: the payload's header (the writer's Keras version) is known only to the
    reconstructor, which finds this stand-in in the body (:func:`first_unloadable`) and raises
    :class:`~keras_pickle.CustomObjectLoadError` naming both sides
    (:func:`keras_pickle._diagnosis.load_failure.unloadable_error`). Used anyway, it raises
    :meth:`error` with no sides named.
    """

    __slots__ = ("named", "short", "original_error")

    def __init__(self, named: str, short: str, original_error: Exception):
        self.named, self.short, self.original_error = named, short, original_error

    @property
    def failure(self) -> str:
        return f"{type(self.original_error).__name__}: {shorten(str(self.original_error), 300)}"

    def error(self) -> CustomObjectLoadError:
        """The error for this stand-in where the payload's header is unknown."""
        missing = missing_module(self.original_error)
        cause = f"Make the module '{missing}' importable where the payload loads, or " if missing else "Or "
        return CustomObjectLoadError(
            f"Could not load {self.named}, which the payload carries by value (cloudpickle): unpickling it failed "
            f"with {self.failure}. {cause}{BY_VALUE_REMEDY.format(name=self.short)}.",
            name=self.named,
            missing_module=missing,
            original_error=self.original_error,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error()

    def __repr__(self) -> str:
        return f"<{self.named}, carried by value, not loadable here>"


def first_unloadable(body: Any) -> Unloadable | None:
    """The first :class:`Unloadable` where a payload body holds what :func:`by_value` returns, else None:
    the values of ``custom_objects`` and the classes of ``constructed`` calls (the places the dump side's
    :func:`~keras_pickle._capture.custom_objects.portable` writes). ``body`` is not checked yet."""
    if not isinstance(body, dict):
        return None
    custom_objects = body.get("custom_objects")
    candidates = list(custom_objects.values()) if isinstance(custom_objects, dict) else []
    constructed = body.get("constructed")
    if isinstance(constructed, (list, tuple)):
        candidates += [entry[0] for entry in constructed if isinstance(entry, (list, tuple)) and entry]
    return next((candidate for candidate in candidates if isinstance(candidate, Unloadable)), None)
