"""The dump side of classes and functions carried by value: those of the main script.

``pickle`` stores a class by reference (``__main__.Gate``). A class of the main script resolves
so only in a process running that script: Spark's broadcast (plain pickle) to executors whose
``__main__`` is ``pyspark.daemon``, a ``multiprocessing`` queue under ``forkserver`` from a
notebook, a file read by another script all fail with ``AttributeError: Can't get attribute``.
So a custom object whose ``__module__`` is ``__main__`` or ``__mp_main__`` is written as
``keras_pickle._format.by_value(module, qualname, data)``, ``data`` being cloudpickle's bytes of
it; :mod:`keras_pickle._rebuild.load_by_value` prefers the loading process's own class of that name and
falls back to ``data``. Under cloudpickle too, which would carry such a class by value itself:
inline, a class whose base the loading Keras lacks would fail inside the unpickler, before the
reconstructor could say which Keras versions differ (cloudpickle keeps one class per class
definition across both, so identity holds). A class or function defined inside a function of the main script (a closure
loss) travels by value too: no other process could name it. Classes of importable modules keep
travelling by reference (small payloads, judged by name in safe mode); those defined inside a
function of such a module keep theirs (:class:`~keras_pickle._capture.custom_objects.DefinedHere`).

A class cloudpickle cannot pickle is refused at dump time (:class:`CustomObjectError`), naming it
and the remedy: no payload is written that could fail to load for that reason.
"""

from __future__ import annotations

from typing import Any

from .._rebuild.load_by_value import BY_VALUE_REMEDY, by_value
from .._wire.refs import MAIN_MODULES, InertReference
from ..errors import CustomObjectError


def of_main_script(obj: Any) -> bool:
    """Whether ``obj`` is a class or function of the main script: at its top level, in a class, or defined
    inside one of its functions (keras.io's siamese ``loss(margin)`` returns a closure; cloudpickle
    carries it with its cells, so it loads where the writer's function could never be named)."""
    return getattr(obj, "__module__", None) in MAIN_MODULES and isinstance(getattr(obj, "__qualname__", None), str)


class ByValue(InertReference):
    """A class or function of the main script, pickled as ``by_value(module, qualname, cloudpickle bytes)``."""

    __slots__ = ()

    def __init__(self, target: Any):
        super().__init__(target, f"{target.__module__}.{target.__qualname__}")

    def __reduce__(self):
        return by_value, (self.target.__module__, self.target.__qualname__, carried_bytes(self.target))


def carried_bytes(obj: Any) -> bytes:
    """``obj`` pickled by value with cloudpickle; :class:`CustomObjectError` naming it where that fails."""
    name, module = str(obj.__qualname__), str(obj.__module__)
    remedy = BY_VALUE_REMEDY.format(name=name)
    try:
        import cloudpickle
    except ImportError as e:
        raise CustomObjectError(
            f"Cannot pickle {module}.{name}: it is defined in the main script, which the process loading the "
            "payload may not run, so keras_pickle carries it by value with cloudpickle, which is not installed: "
            f"pip install cloudpickle, or {remedy}.",
            name=name,
            module=module,
        ) from e
    try:
        return cloudpickle.dumps(obj)
    except Exception as e:
        raise CustomObjectError(
            f"Cannot pickle {module}.{name}: it is defined in the main script, which the process loading the "
            "payload may not run, so keras_pickle carries it by value with cloudpickle, which failed with "
            f"{type(e).__name__}: {e}. Instead, {remedy}.",
            name=name,
            module=module,
        ) from e
