"""``inspect`` for Keras's layer construction, with signatures computed once per function.

Every ``Operation.__new__`` asks ``inspect`` for the signature and argument
spec of its class's ``__init__``, and every layer build for its ``build``'s:
a tenth of the time it takes to rebuild a model of 200 layers goes there,
recomputing the same answers. ``install()`` gives Keras's ``operation`` and
``layer`` modules this proxy instead of the ``inspect`` module: the same
functions and results (signatures are immutable), cached per function
object (weakly: a class's ``__init__`` lives as long as its class). Every
other attribute is ``inspect``'s own. ``uninstall()`` puts ``inspect`` back.
"""

from __future__ import annotations

import inspect
import types
import weakref
from typing import Any


class CachedInspect(types.ModuleType):
    """The ``inspect`` module, with ``signature`` and ``getfullargspec`` cached per function."""

    def __init__(self) -> None:
        super().__init__("inspect", inspect.__doc__)
        self._signatures: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._bound_signatures: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._specs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    def signature(self, obj: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        if args or kwargs:
            return inspect.signature(obj, *args, **kwargs)
        # A bound method's signature is its function's without the first parameter, for any instance.
        cache, key = (self._bound_signatures, obj.__func__) if inspect.ismethod(obj) else (self._signatures, obj)
        return _cached(cache, key, lambda: inspect.signature(obj))

    def getfullargspec(self, func: Any) -> inspect.FullArgSpec:
        return _cached(self._specs, func, lambda: inspect.getfullargspec(func))


def _cached(cache: weakref.WeakKeyDictionary, key: Any, compute: Any) -> Any:
    try:
        return cache[key]
    except (KeyError, TypeError):  # TypeError: a key that cannot be weakly referenced
        pass
    value = compute()
    try:
        cache[key] = value
    except TypeError:
        pass
    return value


CACHED_INSPECT = CachedInspect()
