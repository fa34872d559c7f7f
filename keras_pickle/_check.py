"""``keras_pickle.check(obj)``: is this object pickle-safe, and if not, why?

The walk follows pickle's own rules (``copyreg`` dispatch, ``__reduce_ex__``)
without writing a byte: it asks each object how it would be reduced and
descends into the arguments and state it would hand to pickle, naming every
member by its attribute path (``feeder.arr``, ``config["train"]``,
``model.layers[3]``). Keras layers and models are judged from their config
and custom objects, never by serializing their weights; optimizers, metrics
and callbacks are reported as refused by design. ``obj`` is never modified.
"""

from __future__ import annotations

import copyreg
import dataclasses
import io
import pickle
import socket
import sys
import threading
import types
from typing import Any

import keras
import numpy as np

from . import _custom_objects, _mixins, _payload, _rebuild
from .errors import KerasPickleError

_ATOMIC = (type(None), bool, int, float, complex, str, bytes, bytearray, range, slice, type(Ellipsis))
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


@dataclasses.dataclass(frozen=True)
class Problem:
    path: str
    type_name: str
    reason: str
    advice: str

    def __str__(self) -> str:
        return f"{self.path} ({self.type_name}): {self.reason}\n    -> {self.advice}"


@dataclasses.dataclass
class CheckReport:
    """What :func:`check` found. ``ok`` is True when nothing would fail to pickle."""

    root: str
    problems: list[Problem]
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            lines = [f"{self.root} is pickle-safe."]
        else:
            count = len(self.problems)
            lines = [f"{self.root} is not pickle-safe: {count} problem{'s' if count > 1 else ''}."]
            lines += [str(problem) for problem in self.problems]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def check(obj: Any, *, name: str | None = None, protocol: int = pickle.HIGHEST_PROTOCOL) -> CheckReport:
    """Walk ``obj`` as pickle would and report every member that cannot be pickled.

    ``name`` is how the root is called in paths (default: its type's name in
    lowercase). Nothing is serialized and ``obj`` is not modified.
    """
    root = name or type(obj).__name__.lower()
    walker = _Walker(protocol)
    walker.visit(obj, root)
    return CheckReport(root=root, problems=walker.problems, notes=walker.notes)


class _Walker:
    def __init__(self, protocol: int):
        self.protocol = protocol
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        self.seen: set[int] = set()

    def problem(self, path: str, obj: Any, reason: str, advice: str) -> None:
        self.problems.append(Problem(path, _type_name(obj), reason, advice))

    def visit(self, obj: Any, path: str) -> None:
        if isinstance(obj, _ATOMIC):
            return
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, type)):
            self.visit_global(obj, path)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for index, item in enumerate(obj):
                self.visit(item, f"{path}[{index}]")
        elif isinstance(obj, dict):
            for key, value in obj.items():
                self.visit(key, f"{path}.keys()")
                self.visit(value, _item_path(path, key))
        elif isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                for index, item in enumerate(obj.flat):
                    self.visit(item, f"{path}.flat[{index}]")
        elif (known := _known_unpicklable(obj)) is not None:
            self.problem(path, obj, *known)
        elif isinstance(obj, keras.Layer):
            self.visit_layer(obj, path)
        elif isinstance(obj, (keras.optimizers.Optimizer, keras.metrics.Metric, keras.callbacks.Callback)):
            self.visit_refused(obj, path)
        else:
            self.visit_reduced(obj, path)

    def visit_global(self, obj: Any, path: str) -> None:
        """Functions and classes pickle by reference: they must be importable."""
        qualname = getattr(obj, "__qualname__", getattr(obj, "__name__", ""))
        module = getattr(obj, "__module__", None)
        if qualname == "<lambda>" or "<lambda>" in qualname:
            self.problem(
                path,
                obj,
                "a lambda, which pickle cannot store by reference",
                "use a function defined at module level (def), or functools.partial of one",
            )
            return
        if "<locals>" in qualname:
            self.problem(
                path,
                obj,
                f"'{qualname}' is defined inside a function, so it cannot be imported by name",
                "define it at module level; cloudpickle (loky, Dask, Ray) can ship it by value",
            )
            return
        target = sys.modules.get(module) if module else None
        for part in qualname.split("."):
            target = getattr(target, part, None)
        if target is not obj:
            self.problem(
                path,
                obj,
                f"'{module}.{qualname}' cannot be found by import (it was replaced or deleted)",
                "make sure the object is reachable under its module and name",
            )

    def visit_layer(self, layer: Any, path: str) -> None:
        """A Keras layer or model: its config and custom objects, never its weights."""
        if not _mixins.is_installed() and not _has_our_reducer(layer):
            self.notes.append(
                f"{path}: keras_pickle is not installed, so Keras's own pickling applies; call "
                "keras_pickle.install() to carry custom objects and the full training state."
            )
        try:
            _payload.check_constructor_recoverable(layer)
            config = _rebuild.config_of(layer)
            custom_objects = _custom_objects.collect(config, [layer])
        except KerasPickleError as e:
            self.problem(path, layer, str(e).splitlines()[0], "see the message above")
            return
        except Exception as e:
            self.problem(path, layer, f"Keras cannot produce its config: {e}", "add or fix get_config()")
            return
        for name, obj in custom_objects.items():
            if isinstance(obj, (type, types.FunctionType)) and name == getattr(obj, "__name__", name):
                self.visit(obj, f"{path}.custom_objects[{name!r}]")

    def visit_refused(self, obj: Any, path: str) -> None:
        try:
            obj.__reduce_ex__(self.protocol)
        except KerasPickleError as e:
            message = str(e)
            reason, _, advice = message.partition(": ")[2].partition(". ")
            self.problem(path, obj, f"refused by design: {reason}.", advice or message)
            return
        except Exception as e:
            self.problem(path, obj, f"{type(e).__name__}: {e}", "see the message above")
            return
        if not _mixins.is_installed():
            self.notes.append(
                f"{path}: Keras pickles a {type(obj).__name__} from its config only; its state would be lost."
            )

    def visit_reduced(self, obj: Any, path: str) -> None:
        """Any other object: descend into what its reducer would hand to pickle."""
        reducer = copyreg.dispatch_table.get(type(obj))
        try:
            reduced = reducer(obj) if reducer is not None else obj.__reduce_ex__(self.protocol)
        except Exception as e:
            self.problem(
                path,
                obj,
                f"{type(e).__name__}: {e}",
                "leave it out of what you send (recreate it in the worker), or give its class "
                "__getstate__/__setstate__",
            )
            return
        if isinstance(reduced, str):
            return  # pickled by reference as a global
        function, args, *rest = tuple(reduced) + (None,) * (5 - len(reduced))
        state, list_items, dict_items = rest[:3]
        if function is not copyreg.__newobj__ and function is not getattr(copyreg, "__newobj_ex__", None):
            self.visit(function, f"{path}.__reduce__()[0]")
        for index, arg in enumerate(args or ()):
            if not (index == 0 and isinstance(arg, type) and arg is type(obj)):
                self.visit(arg, f"{path}.__reduce__()[1][{index}]")
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
            state = {**(state[0] or {}), **(state[1] or {})}  # (dict state, slots state)
        if isinstance(state, dict):
            for key, value in state.items():
                attribute = isinstance(key, str) and key.isidentifier()
                self.visit(value, f"{path}.{key}" if attribute else _item_path(path, key))
        elif state is not None:
            self.visit(state, f"{path}.__getstate__()")
        for index, item in enumerate(list_items or ()):
            self.visit(item, f"{path}[{index}]")
        for key, value in dict_items or ():
            self.visit(value, _item_path(path, key))


def _item_path(path: str, key: Any) -> str:
    return f'{path}["{key}"]' if isinstance(key, str) else f"{path}[{key!r}]"


def _has_our_reducer(obj: Any) -> bool:
    reducer = getattr(type(obj), "__reduce_ex__", None)
    return bool(getattr(reducer, _mixins._MARK, False))


def _type_name(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__


def _known_unpicklable(obj: Any) -> tuple[str, str] | None:
    """(reason, advice) for objects that can never be pickled meaningfully."""
    if isinstance(obj, _LOCK_TYPES):
        return "a lock (cannot pickle '_thread.lock' / '_thread.RLock' object)", "create the lock in the worker"
    if isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return (
            "a generator: its running state cannot be pickled",
            "send what creates it (a function and its arguments) or use a keras.utils.PyDataset",
        )
    if isinstance(obj, np.lib.npyio.NpzFile):
        return (
            "a lazy np.load() NpzFile: an open file handle, not data",
            "load the arrays inside the worker (np.load in __getitem__), or pass the file name",
        )
    if isinstance(obj, io.IOBase):
        return "an open file", "pass the file name and open it in the worker"
    if isinstance(obj, socket.socket):
        return "a socket", "open the connection in the worker"
    if isinstance(obj, types.ModuleType):
        return "a module object", "import the module in the worker instead of sending it"
    if isinstance(obj, (types.FrameType, types.TracebackType)):
        return "an interpreter frame or traceback", "send the error message instead"
    module = type(obj).__module__ or ""
    if module.startswith("tensorflow") and not module.startswith("tensorflow.python.framework.dtypes"):
        tensor_like = hasattr(obj, "numpy") and hasattr(obj, "shape")
        if not tensor_like:
            return (
                f"a TensorFlow object ({type(obj).__name__}), which holds graph or runtime state",
                "create it in the worker, or pass numpy arrays (tensor.numpy())",
            )
    return None
