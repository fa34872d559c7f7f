"""What keras_pickle records about Keras objects while it is installed.

A Keras config cannot describe everything users build:

* ``keras.Model.__new__`` drops a subclass's constructor arguments, and a
  layer whose constructor takes a model, a layer or an array gets no config
  at all unless it defines ``get_config()`` (keras.io's VAE takes ``encoder``
  and ``decoder`` models).
* A model with a ``compile()`` of its own (keras.io's GAN:
  ``compile(d_optimizer, g_optimizer, loss_fn)``) records in its compile
  config only what it passed to ``super().compile()``.
* A built optimizer, or a metric given to ``compile()``, belongs to the model
  compiled with it; scikit-learn wrappers hold it beside the model.

While ``install()`` is in effect, Keras's ``Layer.__new__`` and
``Model.__new__`` pass through :func:`recording_new`, which records, for the
objects that need it, the constructor's arguments and (per model) the
arguments of ``compile()`` calls and what the model owns afterwards. Records
are references, not copies, kept beside the object (keyed by identity and
dropped with it), so the object's attributes, and what Keras's own saving
walks, stay as they were. Recording costs one dictionary lookup per class.
"""

from __future__ import annotations

import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import keras
from keras.src.models.functional import Functional
from keras.src.utils import python_utils

from .. import graph as _graph

CONSTRUCTED_KEY = "keras_pickle_constructed"
"""The key of a config that stands for an object rebuilt from its recorded constructor arguments."""


class _ByIdentity:
    """A map from live objects (by identity, never by ``__eq__``) to values, forgetting an object with it."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, Any]] = {}
        self._lock = threading.Lock()

    def set(self, obj: Any, value: Any) -> None:
        key = id(obj)

        def forget(ref: weakref.ref, key: int = key, entries: dict = self._entries) -> None:
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                entries.pop(key, None)

        with self._lock:
            self._entries[key] = (weakref.ref(obj, forget), value)

    def get(self, obj: Any, default: Any = None) -> Any:
        entry = self._entries.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return default
        return entry[1]

    def discard(self, obj: Any) -> None:
        with self._lock:
            entry = self._entries.get(id(obj))
            if entry is not None and entry[0]() is obj:
                del self._entries[id(obj)]


_init_arguments = _ByIdentity()  # layer -> (args, kwargs)
_compile_calls = _ByIdentity()  # model -> (args, kwargs) of its last outermost compile() call
_owners = _ByIdentity()  # optimizer or metric -> (weakref to its model, path)


# --------------------------------------------------------------------------
# Constructor arguments
# --------------------------------------------------------------------------


def init_arguments(obj: Any) -> tuple[tuple, dict] | None:
    """The arguments ``obj`` was constructed with, if they were recorded (see :func:`needs_arguments`)."""
    return _init_arguments.get(obj)


def remember_arguments(obj: Any, args: tuple, kwargs: dict) -> None:
    """Record ``obj``'s constructor arguments (:func:`init_arguments`), nothing else."""
    _init_arguments.set(obj, (tuple(args), dict(kwargs)))


def record_init_arguments(obj: Any, args: tuple, kwargs: dict) -> None:
    """Record ``obj``'s constructor arguments, and let them stand for its config while pickling.

    They stand for it always when :func:`needs_arguments` says so, else only when the config does
    not bind to the constructor (:func:`config_may_not_rebuild`).
    """
    _init_arguments.set(obj, (tuple(args), dict(kwargs)))
    if needs_arguments(obj):
        chosen = _config_or_placeholder
    else:  # Keras reads whether get_config is the default off the instance's attribute: keep its answer
        chosen = (
            _auto_config_unless_unbound if python_utils.is_default(type(obj).get_config) else _config_unless_unbound
        )
    object.__setattr__(obj, "get_config", types.MethodType(chosen, obj))


_default_config_classes: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _user_class_with_default_config(cls: type) -> bool:
    """A class outside Keras whose ``get_config`` is Keras's: the default, or Functional's.

    Keras makes a Model subclass called with ``(inputs, outputs)`` a Functional
    subclass during its first construction, so its ``get_config`` changes from
    the default to Functional's then; the answer must not depend on whether
    the class had been constructed before.
    """
    known = _default_config_classes.get(cls)
    if known is None:
        module = getattr(cls, "__module__", "") or ""
        keras_class = module == "keras" or module.startswith(("keras.", "keras_pickle."))
        get_config = cls.get_config
        known = _default_config_classes[cls] = not keras_class and (
            python_utils.is_default(get_config) or get_config is Functional.get_config
        )
    return known


_unbindable_classes: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def config_may_not_rebuild(cls: type) -> bool:
    """A class outside Keras that Keras rebuilds as ``cls(**config)`` but whose constructor takes no ``**kwargs``.

    Its config carries ``name``, ``trainable`` and ``dtype`` (``Layer.get_config``), which such a
    constructor refuses: keras.io's ``PatchEncoder(num_patches, projection_dim)`` calls
    ``super().__init__()`` with nothing. Whether a config binds is known only when it is taken
    (:func:`_config_unless_unbound`); recording the arguments costs a reference.
    """
    known = _unbindable_classes.get(cls)
    if known is None:
        module = getattr(cls, "__module__", "") or ""
        keras_class = module == "keras" or module.startswith(("keras.", "keras_pickle."))
        known = False
        if not keras_class and getattr(cls.from_config, "__func__", None) is keras.Layer.from_config.__func__:
            try:
                kinds = {p.kind for p in inspect.signature(cls.__init__).parameters.values()}
            except (TypeError, ValueError):
                kinds = {inspect.Parameter.VAR_KEYWORD}
            known = inspect.Parameter.VAR_KEYWORD not in kinds
        _unbindable_classes[cls] = known
    return known


def needs_arguments(obj: Any) -> bool:
    """Whether Keras's config cannot recover ``obj``'s constructor arguments.

    A user class without ``get_config()``: a model (``Model.__new__`` records
    only default arguments), or a layer whose arguments are not all plain
    values (Keras records no config for it).
    """
    if not _user_class_with_default_config(type(obj)):
        return False
    return isinstance(obj, keras.Model) or getattr(obj, "_auto_config", None) is None


# A dump in progress: the objects whose configs stand for their recorded arguments, in order.
_constructed = threading.local()


def collecting() -> bool:
    """Whether a dump is collecting the objects whose configs stand for their recorded arguments."""
    return getattr(_constructed, "sink", None) is not None


def constructed_index(obj: Any) -> int:
    """Within :class:`collecting_constructed`: the index of ``obj``'s constructed entry, added if new."""
    sink = _constructed.sink
    return sink.setdefault(id(obj), (len(sink), obj))[0]


def _config_or_placeholder(self: Any) -> dict:
    if not collecting():
        return type(self).get_config(self)
    graph = _graph.arguments_config(self, *_init_arguments.get(self))
    if graph is None:
        # A symbolic tensor of another graph is never handed to a constructor again: Keras's config.
        return type(self).get_config(self)
    index = constructed_index(self)
    placeholder = {**graph, "name": self.name, CONSTRUCTED_KEY: index}
    return placeholder if self.trainable else {**placeholder, "trainable": False}


_config_or_placeholder._is_default = True  # Keras's auto config still applies outside a dump.


def _config_unless_unbound(self: Any) -> dict:
    """The object's config, or within a dump the placeholder when the constructor would refuse the config."""
    config = type(self).get_config(self)
    if not collecting() or not isinstance(config, dict):
        return config
    try:
        inspect.signature(type(self).__init__).bind(None, **config)
    except TypeError:
        return _config_or_placeholder(self)
    return config


def _auto_config_unless_unbound(self: Any) -> dict:
    return _config_unless_unbound(self)


_auto_config_unless_unbound._is_default = True


class collecting_constructed:
    """Within: configs of objects with recorded arguments are placeholders ``{"name", CONSTRUCTED_KEY: i}``.

    ``objects`` then lists those objects, ``i`` being the index of each. The
    placeholder of a model whose arguments hold symbolic tensors also carries
    its Functional config (:func:`_graph.arguments_config`).
    """

    def __enter__(self) -> collecting_constructed:
        self._previous = getattr(_constructed, "sink", None)
        self._sink: dict[int, tuple[int, Any]] = {}
        _constructed.sink = self._sink
        return self

    def __exit__(self, *exc: object) -> None:
        _constructed.sink = self._previous

    @property
    def objects(self) -> list[Any]:
        return [obj for _index, obj in sorted(self._sink.values(), key=lambda pair: pair[0])]


# --------------------------------------------------------------------------
# compile() calls and what a model owns
# --------------------------------------------------------------------------


def compile_call(model: Any) -> tuple[tuple, dict] | None:
    """The arguments of ``model``'s last ``compile()`` call, if it was recorded."""
    return _compile_calls.get(model)


def owner(part: Any) -> tuple[Any, str] | None:
    """``(model, path)`` of the model that owns ``part`` (an optimizer or metric), if it is alive and still does."""
    entry = _owners.get(part)
    if entry is None:
        return None
    model = entry[0]()
    if model is None or resolve_part(model, entry[1]) is not part:
        return None
    return model, entry[1]


def resolve_part(model: Any, path: str) -> Any:
    """The object at ``path`` in ``model``: attribute names joined by dots, or ``metrics[i]``
    (the i-th metric given to ``compile()``, ``weighted_metrics`` then). None if there is none."""
    if path.startswith("compile_metrics[") and path.endswith("]"):
        index = path[len("compile_metrics[") : -1]
        metrics = compiled_metrics(model)
        return metrics[int(index)] if index.isdigit() and int(index) < len(metrics) else None
    value = model
    for name in path.split("."):
        if not name.isidentifier() or name.startswith("_"):
            return None
        value = getattr(value, name, None)
    return value


def compiled_metrics(model: Any) -> list[Any]:
    """The metric objects ``compile()`` received, flattened (``metrics``, then ``weighted_metrics``)."""
    container = getattr(model, "_compile_metrics", None)
    found: list[Any] = []
    for name in ("_user_metrics", "_user_weighted_metrics"):
        found.extend(m for m in keras.tree.flatten(getattr(container, name, None) or []) if _is_metric(m))
    return found


def owned_parts(model: Any) -> list[tuple[Any, str]]:
    """``(part, path)`` of every optimizer and metric object ``model`` holds: its optimizer (and the
    one a loss-scale optimizer wraps), optimizers and metrics held as attributes, metrics it was compiled with."""
    parts: list[tuple[Any, str]] = []
    seen: set[int] = set()

    def add(part: Any, path: str) -> None:
        if part is not None and id(part) not in seen:
            seen.add(id(part))
            parts.append((part, path))

    optimizer = getattr(model, "optimizer", None)
    if isinstance(optimizer, keras.optimizers.Optimizer):
        add(optimizer, "optimizer")
        add(getattr(optimizer, "inner_optimizer", None), "optimizer.inner_optimizer")
    for name, value in vars(model).items():
        if not name.startswith("_") and (isinstance(value, keras.optimizers.Optimizer) or _is_metric(value)):
            add(value, name)
    for index, metric in enumerate(compiled_metrics(model)):
        add(metric, f"compile_metrics[{index}]")
    return parts


def _is_metric(value: Any) -> bool:
    return isinstance(value, keras.metrics.Metric)


def _record_compile(model: Any, args: tuple, kwargs: dict) -> None:
    _compile_calls.set(model, (tuple(args), dict(kwargs)))
    record_owned_parts(model)


def record_owned_parts(model: Any) -> None:
    """Record ``model`` as the owner of every optimizer and metric it holds (:func:`owned_parts`)."""
    if isinstance(model, keras.Model):
        for part, path in owned_parts(model):
            _owners.set(part, (weakref.ref(model), path))


def copy_records(original: Any, twin: Any, memo: dict) -> None:
    """Record for ``twin``, a copy of ``original`` made attribute by attribute, what was recorded for
    ``original``: its constructor arguments and last ``compile()`` call (copied through ``memo``), and
    which of ``twin``'s parts it owns; nothing where nothing was recorded for ``original``."""
    arguments = _init_arguments.get(original)
    if arguments is None:
        _init_arguments.discard(twin)
    else:
        _init_arguments.set(twin, deepcopy(arguments, memo))
    call = _compile_calls.get(original)
    if call is None:
        _compile_calls.discard(twin)
    else:
        _record_compile(twin, *deepcopy(call, memo))


_compiling = threading.local()


def _recording_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The model's ``compile()``, recording the outermost call's arguments and what the model owns after it."""
    depth = getattr(_compiling, "depth", 0)
    _compiling.depth = depth + 1
    try:
        result = type(self).compile(self, *args, **kwargs)
    finally:
        _compiling.depth = depth
    if depth == 0:
        _record_compile(self, args, kwargs)
    return result


def record_compiles(model: Any) -> None:
    """Record every later ``compile()`` call of ``model`` (an attribute of the instance, as Keras wraps ``build``)."""
    object.__setattr__(model, "compile", types.MethodType(_recording_compile, model))


# --------------------------------------------------------------------------
# The hook install() puts on Layer.__new__ and Model.__new__
# --------------------------------------------------------------------------


def recording_new(original: Callable[..., Any]) -> staticmethod:
    """A ``__new__`` that calls ``original`` (Keras's, unbound) and records what :mod:`_records` needs."""

    def __new__(cls, *args, **kwargs):
        obj = original(cls, *args, **kwargs)
        if type(obj) is cls:
            if needs_arguments(obj):
                if not (args or kwargs) and issubclass(cls, Functional):
                    args, kwargs = _functional_new_arguments(sys._getframe(1), args, kwargs)
                record_init_arguments(obj, args, kwargs)
            elif config_may_not_rebuild(cls):
                record_init_arguments(obj, args, kwargs)
            if isinstance(obj, keras.Model) and "compile" not in vars(obj):
                record_compiles(obj)
        return obj

    hook = staticmethod(__new__)
    hook.__keras_pickle__ = True
    return hook


def _functional_new_arguments(caller: types.FrameType | None, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments of a Functional subclass's construction, where Keras's ``Functional.__new__`` dropped them.

    Keras makes a Model subclass called with ``(inputs, outputs)`` a Functional
    subclass during its first construction; every later construction goes
    through ``Functional.__new__(cls, *args, **kwargs)``, which calls
    ``Model.__new__`` with the class alone. Its arguments are then those of
    that caller.
    """
    if caller is not None and caller.f_code is _FUNCTIONAL_NEW:
        found_args, found_kwargs = caller.f_locals.get("args"), caller.f_locals.get("kwargs")
        if isinstance(found_args, tuple) and isinstance(found_kwargs, dict):
            return found_args, found_kwargs
    return args, kwargs


_FUNCTIONAL_NEW = Functional.__new__.__code__
