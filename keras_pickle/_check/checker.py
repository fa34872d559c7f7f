"""The walk behind ``keras_pickle.check(obj)``: is this object pickle-safe, and if not, why?

The walk follows pickle's own rules (``copyreg`` dispatch, ``__reduce_ex__``)
without pickling anything: it asks each object how it would be reduced and
descends into the arguments and state it would hand to pickle, naming every
member by its attribute path (``feeder.arr``, ``config["train"]``,
``model.layers[3]``). Keras layers and models are judged from their config
and custom objects, never by serializing their weights; a Functional or
Sequential model whose config cannot rebuild it is reported at the layer to
blame (``model.layers[2]``). Optimizers, metrics and callbacks are reported
as refused by design unless ``install(allow=...)`` lets their kind pickle;
an allowed callback is walked attribute by attribute, as pickle stores it.

The contract: ``report.ok`` is True exactly when ``pickle.dumps(obj,
protocol)`` succeeds with the current ``install()`` settings. The one thing
the walk cannot see is a failure that only reading a layer's variables would
reveal, since it never reads them. ``obj`` is never modified.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import socket
import sys
import threading
import types
from typing import Any

import keras
import numpy as np

from .._keras3.recorded import records as _records
from .._protocol import install as _install
from .._protocol import mixins as _mixins
from .._protocol import opt_in as _opt_in
from .._tfkeras import classes as _tfkeras_classes
from ..errors import PickleRefusedError, UnrecoverableConfigError
from . import layers
from .report import CheckReport, Problem

_ATOMIC = (type(None), bool, int, float, complex, str, bytes, bytearray, range, slice, type(Ellipsis))
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))
# Types pickle saves specially, not by a name it imports.
_PICKLED_BY_VALUE_TYPES = (type(None), type(NotImplemented), type(Ellipsis))
_KINDS = (
    (keras.optimizers.Optimizer, "optimizers"),
    (keras.metrics.Metric, "metrics"),
    (keras.callbacks.Callback, "callbacks"),
)


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
        if isinstance(obj, (types.FunctionType, type)) or (
            isinstance(obj, types.BuiltinFunctionType) and isinstance(obj.__self__, (types.ModuleType, type(None)))
        ):
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
        elif _is_tensorflow_object(obj):
            self.visit_tensorflow(obj, path)
        elif isinstance(obj, keras.Layer) or _is_tf_keras(obj, "layer"):
            self.visit_layer(obj, path)
        elif (kind := _kind(obj)) is not None:
            self.visit_stateful(obj, path, kind)
        else:
            self.visit_reduced(obj, path)

    def visit_tensorflow(self, obj: Any, path: str) -> None:
        """A TensorFlow object that is not a tensor: one problem if anything in it cannot be pickled.

        Graph and runtime state (a dataset's variant tensor, a writer's or a
        table's resource handle) fails deep inside the object; what to do is
        about the object itself. Plain TensorFlow values (a TensorShape, a
        tf.Module of variables) pickle and are not reported.
        """
        inner = _Walker(self.protocol)
        inner.seen = self.seen
        inner.visit_reduced(obj, path)
        self.notes += inner.notes
        if inner.problems:
            self.problem(
                path,
                obj,
                f"a TensorFlow object ({type(obj).__name__}), which holds graph or runtime state",
                "create it in the worker, or pass numpy arrays (tensor.numpy())",
            )

    def visit_global(self, obj: Any, path: str) -> None:
        """Functions and classes pickle by reference: they must be importable."""
        if any(obj is special for special in _PICKLED_BY_VALUE_TYPES):
            return
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
        if not _install.is_installed() and not _has_our_reducer(layer):
            self.notes.append(
                f"{path}: keras_pickle is not installed, so Keras's own pickling applies; call "
                "keras_pickle.install() to carry custom objects and the full training state."
            )
        if _has_our_reducer(layer):
            _records.record_owned_parts(layer)  # as pickling it does: its optimizer and metrics, if they follow
        error, custom_objects = layers.layer_failure(layer)
        if error is not None:
            for where, culprit, culprit_error in layers.culprits(layer, path, error):
                self.layer_problem(where, culprit, culprit_error, named=culprit is not layer)
        for name, obj in custom_objects.items():
            if isinstance(obj, (type, types.FunctionType)) and name == getattr(obj, "__name__", name):
                self.visit(obj, f"{path}.custom_objects[{name!r}]")
        # Recorded constructor arguments travel beside the config: each must pickle.
        for where, value in layers.recorded_arguments(layer, path):
            self.visit(value, where)

    def layer_problem(self, path: str, layer: Any, error: BaseException, *, named: bool) -> None:
        """``error`` (what pickling ``layer`` would raise) as a short reason and its fix."""
        reason, advice = layers.reason_and_advice(str(error), "add or fix get_config() (and from_config())")
        functions = layers.function_arguments(layer) if isinstance(error, UnrecoverableConfigError) else []
        if functions:
            names = ", ".join(name for name, _ in functions)
            reason += " " + " ".join(f"Its argument {name} is {what}." for name, what in functions)
            advice = (
                f"a config cannot hold a lambda or local function: pass {names} as a module-level "
                f"function, return it from {type(layer).__name__}.get_config() and rebuild it in "
                "from_config() with keras.saving.deserialize_keras_object"
            )
        if named:
            reason = f"layer {getattr(layer, 'name', '?')!r}: {reason}"
        self.problem(path, layer, reason, advice)

    def visit_stateful(self, obj: Any, path: str, kind: str) -> None:
        """An optimizer, metric or callback: refused, or pickled as ``install(allow=...)`` says."""
        if not _has_our_reducer(obj) or _mixins._user_reducer(obj) is not None:
            # Keras's own pickling (keras_pickle not installed), or the class's own hook.
            if kind == "callbacks" or _mixins._user_reducer(obj) is not None:
                self.visit_reduced(obj, path)
                return
            try:
                obj.__reduce_ex__(self.protocol)
            except Exception as e:
                self.problem(path, obj, f"{type(e).__name__}: {e}", "call keras_pickle.install() first")
                return
            self.notes.append(
                f"{path}: Keras pickles a {type(obj).__name__} from its config only; its state would be lost."
            )
            return
        owned = _records.owner(obj)
        if (
            owned is not None
            and id(owned[0]) in self.seen
            and not _opt_in.allows(kind, obj)
            and _mixins.carried_whole(kind, obj, owned)
        ):
            # Its model comes first in the same pickle, which carries it: it comes back as that model's.
            self.notes.append(f"{path}: pickled as {type(owned[0]).__name__} '{owned[0].name}''s {owned[1]}.")
            return
        if not _opt_in.allows(kind, obj):
            try:
                obj.__reduce_ex__(self.protocol)
            except PickleRefusedError as e:
                reason, advice = layers.reason_and_advice(str(e), "")
                self.problem(path, obj, f"refused by design: {reason}", advice)
                return
            except Exception as e:
                reason, advice = layers.reason_and_advice(str(e), "see the message above")
                self.problem(path, obj, reason, advice)
                return
        if kind == "callbacks":
            # Pickled as its class and every attribute (_opt_in.allowed_reduce).
            self.visit_class(type(obj), path)
            for name, value in vars(obj).items():
                self.visit(value, f"{path}.{name}" if name.isidentifier() else _item_path(path, name))
            return
        # An allowed metric or unbuilt optimizer: its config and its own (small) variables.
        try:
            _, (_, body, _) = obj.__reduce_ex__(self.protocol)
        except Exception as e:
            reason, advice = layers.reason_and_advice(str(e), "see the message above")
            self.problem(path, obj, reason, advice)
            return
        for name, custom in (body.get("custom_objects") or {}).items():
            self.visit(custom, f"{path}.custom_objects[{name!r}]")

    def visit_class(self, cls: type, path: str) -> None:
        """The class an instance at ``path`` is rebuilt from: pickle stores it by reference."""
        if id(cls) not in self.seen:
            self.seen.add(id(cls))
            self.visit_global(cls, path)

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
            if index == 0 and isinstance(arg, type) and arg is type(obj):
                self.visit_class(arg, path)
            else:
                self.visit(arg, f"{path}.__reduce__()[1][{index}]")
        if (
            isinstance(state, tuple)
            and len(state) == 2
            and all(part is None or isinstance(part, dict) for part in state)
        ):
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


def _kind(obj: Any) -> str | None:
    """``"optimizers"``, ``"metrics"`` or ``"callbacks"``: the kinds refused unless allowed."""
    for cls, kind in _KINDS:
        if isinstance(obj, cls):
            return kind
    for base, kind in (("optimizer", "optimizers"), ("legacy_optimizer", "optimizers"), ("metric", "metrics")):
        if _is_tf_keras(obj, base):
            return kind
    return "callbacks" if _is_tf_keras(obj, "callback") else None


def _is_tf_keras(obj: Any, base: str) -> bool:
    """Whether ``obj`` is an instance of tf-keras's ``base`` class (see ``protocol_bases``), tf-keras imported."""
    return _tfkeras_classes.is_imported() and isinstance(obj, _tfkeras_classes.protocol_bases()[base])


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
    if isinstance(obj, io.IOBase) and not isinstance(obj, (io.BytesIO, io.StringIO)):
        return "an open file", "pass the file name and open it in the worker"
    if isinstance(obj, socket.socket):
        return "a socket", "open the connection in the worker"
    if isinstance(obj, types.ModuleType):
        return "a module object", "import the module in the worker instead of sending it"
    if isinstance(obj, (types.FrameType, types.TracebackType)):
        return "an interpreter frame or traceback", "send the error message instead"
    return None


def _is_tensorflow_object(obj: Any) -> bool:
    """A TensorFlow object other than a tensor or variable (those pickle as their values)."""
    module = type(obj).__module__ or ""
    return module.startswith("tensorflow") and not (hasattr(obj, "numpy") and hasattr(obj, "shape"))
