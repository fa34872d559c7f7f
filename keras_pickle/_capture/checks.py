"""Refusals at dump time: objects whose payload could never load as the object that was pickled.

* A subclassed layer or model whose config cannot recover its constructor
  arguments, and whose arguments keras_pickle did not record
  (:mod:`keras_pickle._keras3.recorded.records`; objects constructed before ``install()``).
* A model compiled with a loss, metric or learning-rate schedule that its config would not rebuild.
* A Lambda layer whose lambda reads a module global.

Each check raises a :class:`~keras_pickle.KerasPicklingError` subclass that
says what to do; ``check()`` reports the same errors.
"""

from __future__ import annotations

import builtins
import dis
import inspect
import types
from typing import Any

import keras
from keras.src.models.functional import Functional

from .._keras3.census import census_of
from .._keras3.recorded import compile_objects as _compile_objects
from .._keras3.recorded import construct as _construct
from .._keras3.recorded import records as _records
from ..errors import KerasPicklingError, UnrecoverableConfigError

# --------------------------------------------------------------------------
# Constructor arguments that a config would lose
# --------------------------------------------------------------------------


def check_constructor_recoverable(obj: Any) -> None:
    """Refuse, at dump time, an object whose config cannot rebuild it.

    ``keras.Model.__new__`` drops constructor arguments, so a Model subclass
    without ``get_config()`` is recorded with its *default* arguments; Keras
    would later fail with a confusing variable-count error, or worse, rebuild
    a different model. Layers rebuilt from a config are checked: the object
    itself and, recursively, the layers a Functional / Sequential config lists.
    Sublayers created by a constructor are rebuilt by that constructor.
    """
    census = census_of(obj)
    for layer in census.listed_layers():
        check_own_constructor(layer)
    check_compile_objects(census.root)


def check_compile_objects(model: Any) -> None:
    """Refuse a model compiled with a loss, metric or learning-rate schedule that its config would not
    rebuild and whose constructor arguments were not recorded (:mod:`keras_pickle._keras3.recorded.compile_objects`)."""
    if not isinstance(model, keras.Model):
        return
    for part in _compile_objects.of_model(model):
        why = _compile_objects.refusal(part)
        if why is not None:
            raise UnrecoverableConfigError(
                f"{why} (Cannot pickle {type(model).__name__} '{model.name}', which was compiled with it.)",
                class_name=type(part).__name__,
            )


def check_own_constructor(layer: Any) -> None:
    """:func:`check_constructor_recoverable` for ``layer`` alone, not the layers its config lists.

    Nothing to check for a layer whose constructor arguments keras_pickle
    recorded: it is rebuilt by calling its constructor with them.
    """
    cls = type(layer)
    if cls.__module__.startswith("keras.") or _records.init_arguments(layer) is not None:
        return
    if getattr(cls.get_config, "_is_default", False):
        _check_auto_config(layer)
    if cls.from_config.__func__.__module__.startswith("keras."):
        _check_config_fits_constructor(layer)


def _check_config_fits_constructor(layer: Any) -> None:
    """Keras's default from_config is ``cls(**config)``: the config must bind.

    A Sequential subclass's is ``Sequential.from_config``: ``cls(name=...)``,
    then its layers added.
    """
    cls = type(layer)
    try:
        config = layer.get_config()
    except Exception:
        return  # Reported with its own message when the config is serialized.
    if isinstance(layer, Functional) and "layers" in config:
        return  # Revived by Keras's functional reconstruction, not cls(**config).
    sequential = isinstance(layer, keras.Sequential) and "layers" in config and "name" in config
    call, arguments = (f"{cls.__name__}(name=...)", {"name": config["name"]}) if sequential else (None, config)
    try:
        inspect.signature(cls.__init__).bind(None, **arguments)
    except TypeError as e:
        if sequential:
            raise UnrecoverableConfigError(
                f"Cannot pickle {cls.__name__}: Keras rebuilds a Sequential subclass as {call} and then adds "
                f"its layers, but its constructor does not accept that ({e}). Add its constructor arguments "
                "to get_config() and define a from_config() classmethod that calls the constructor with them.",
                class_name=cls.__name__,
            ) from e
        raise UnrecoverableConfigError(
            f"Cannot pickle {cls.__name__}: Keras rebuilds it as {cls.__name__}(**config), but "
            f"its constructor does not accept its own config ({e}; config keys: "
            f"{', '.join(config)}). Call keras_pickle.install() before constructing it (its constructor "
            "arguments then travel with it and rebuild it), accept **kwargs in __init__ and pass them to "
            "super().__init__(**kwargs), make get_config() return exactly the constructor "
            "arguments, or define a from_config() classmethod.",
            class_name=cls.__name__,
        ) from e


def _check_auto_config(layer: Any) -> None:
    cls = type(layer)
    hint = (
        "Call keras_pickle.install() before constructing it (its arguments then travel with it), "
        f"or add a get_config() to {cls.__name__} that returns its constructor arguments, e.g.\n\n"
        "    def get_config(self):\n"
        '        return {**super().get_config(), "units": self.units}\n\n'
        "(and a from_config() classmethod if an argument is not a plain value)."
    )
    auto = getattr(layer, "_auto_config", None)
    if auto is None:
        required = [
            name
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self"
            and p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        if required:
            raise _construct.unrecorded_arguments_error(layer, required)
        return
    if not isinstance(layer, keras.Model):
        return  # Layer.__new__ records the real arguments.
    recorded = dict(auto.config)
    differing = []
    for name, default in recorded.items():
        if name in layer.__dict__:
            try:
                same = bool(layer.__dict__[name] == default)
            except Exception:
                same = False
            if not same:
                differing.append(f"{name}={layer.__dict__[name]!r}")
    if differing:
        raise UnrecoverableConfigError(
            f"Cannot pickle {cls.__name__}: it has no get_config(), and Keras records only the "
            f"default constructor arguments of Model subclasses, so this instance "
            f"({', '.join(differing)}) would come back rebuilt with the defaults "
            f"({', '.join(f'{k}={v!r}' for k, v in recorded.items())}). {hint}",
            class_name=cls.__name__,
        )


# --------------------------------------------------------------------------
# Lambda layers whose code needs its module
# --------------------------------------------------------------------------

_GLOBAL_LOADS = frozenset(("LOAD_GLOBAL", "LOAD_NAME"))


def check_lambdas_self_contained(obj: Any) -> None:
    """Refuse, at dump time, a Lambda layer whose Python lambda reads a module global.

    Keras stores a lambda as its bytecode and rebuilds it with Keras's own
    globals, so ``lambda x: ops.relu(x)`` pickles and then fails to load with
    ``NameError: name 'ops' is not defined``. Builtins are fine; so is a named
    module-level function (Keras stores it by name).
    """
    for layer in census_of(obj).layers:
        function = getattr(layer, "function", None) if isinstance(layer, keras.layers.Lambda) else None
        if not (isinstance(function, types.LambdaType) and function.__name__ == "<lambda>"):
            continue
        names = sorted(name for name in _global_names(function.__code__) if name not in vars(builtins))
        if names:
            shown = ", ".join(repr(name) for name in names)
            raise KerasPicklingError(
                f"Cannot pickle Lambda layer '{layer.name}': its lambda reads the global name(s) {shown} "
                f"of module {function.__module__}, and Keras stores a lambda as bytecode without its "
                "globals, so loading it would fail with NameError. Define the function at module level "
                "(Keras then stores it by name; register it with @keras.saving.register_keras_serializable() "
                "if it is in __main__), or write a custom layer."
            )


def _global_names(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_LOADS}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _global_names(constant)
    return names
