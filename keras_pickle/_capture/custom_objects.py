"""Which custom classes and functions a Keras config needs, and where they are.

Keras resolves its own classes by name. Anything else a config names (an
unregistered layer, a subclassed model, an activation, a loss, an
initializer...) must be handed to Keras as ``custom_objects`` on load. We put
those objects themselves into the payload: plain pickle stores them as import
references, except ``__main__``-defined ones, which keras_pickle carries by value
(:mod:`keras_pickle._capture.main_script`), as cloudpickle does itself.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import keras
from keras.src.api_export import get_symbol_from_name

from .._dialect import Dialect
from .._pickling_context import cloudpickle_is_pickling
from .._rebuild.registered import defined_here, registered, token_for
from .._wire import config_walk, dialect_traits
from .._wire.refs import MAIN_MODULES, InertReference
from ..errors import CustomObjectError
from .main_script import ByValue, of_main_script


def is_keras_builtin(ref: dict) -> bool:
    module = ref.get("module")
    class_name = ref.get("class_name")
    if not isinstance(class_name, str) or class_name.startswith("__"):
        return True  # tuples, numpy arrays, lambdas: serialized inline
    if module == "builtins":
        # Keras records some custom functions (a Dense activation, say) with
        # module "builtins" and only their name; it then searches its own
        # modules for that name, as we do here.
        return class_name != "function" or _keras_builtin_function(ref_name(ref)) is not None
    if dialect_traits.is_keras_module(module):  # tf-keras writes both spellings
        return not ref.get("registered_name") or ref.get("registered_name") in (
            class_name,
            ref.get("config"),
        )
    return False


_KERAS_FUNCTION_MODULES = (
    "activations",
    "constraints",
    "initializers",
    "losses",
    "metrics",
    "optimizers",
    "regularizers",
)


def _keras_builtin_function(name: str) -> Any:
    for module in _KERAS_FUNCTION_MODULES:
        obj = get_symbol_from_name(f"keras.{module}.{name}")
        if obj is not None:
            return obj
    return None


def ref_name(ref: dict) -> str:
    """The Python name of the class or function a config entry names."""
    if ref.get("class_name") == "function":
        return str(ref.get("config"))
    return str(ref.get("class_name"))


def lookup_keys(ref: dict) -> set[str]:
    """Every key under which Keras may look this object up in custom_objects."""
    keys = {ref_name(ref)}
    # Keras 3 writes a registered function as config "package>name" with registered_name "function".
    if ref.get("registered_name") and not (ref.get("class_name") == ref.get("registered_name") == "function"):
        keys.add(str(ref["registered_name"]))
    return keys


def collect(config: dict, live: Any, dialect: Dialect) -> dict[str, Any]:
    """Map every custom-object lookup key in ``config`` to its object.

    ``live``: the object the config was produced from, or its
    :class:`~keras_pickle._keras3.census.Census`; classes and functions found on its
    layers (``dialect.live_layers``) resolve names that no module exposes (classes defined inside
    functions, for example). Read only when a name is found nowhere else; ``dialect``'s registry is
    read first.

    Raises :class:`CustomObjectError` naming an object that cannot be found.
    """
    index: dict[str, list[Any]] | None = None
    found: dict[str, Any] = {}
    seen: set[tuple] = set()
    for ref in config_walk.object_refs(config):
        identity = _identity(ref)
        if identity is not None:  # a model names the same few classes many times: each is looked at once
            if identity in seen:
                continue
            seen.add(identity)
        if is_keras_builtin(ref):
            continue
        keys = lookup_keys(ref)
        if keys <= found.keys():
            continue
        obj = _from_registry(ref, dialect) or _from_module(ref)
        if obj is None:
            if index is None:
                index = _live_index(*dialect.live_layers(live))
            obj = _from_live(ref, index)
        if obj is None:
            name, module = ref_name(ref), ref.get("module")
            raise CustomObjectError(
                f"Cannot pickle: the config names {ref.get('class_name')} '{name}' "
                f"(module {module or '__main__'}), which is neither a Keras object nor "
                "reachable by import. Define it at module level (or register it with "
                "@keras.saving.register_keras_serializable()).",
                name=name,
                module=module,
            )
        if _is_keras_own(obj):
            continue  # Keras resolves its own names; a table entry for one is what safe mode refuses
        for key in sorted(keys):  # sorted: the payload must not depend on the hash seed
            found[key] = obj
    return found


def _identity(ref: dict) -> tuple | None:
    """What everything :func:`collect` decides about ``ref`` depends on, each value with its type (``1``, ``1.0``
    and ``True`` are equal keys, but not equal names); ``None`` where it is not hashable.

    A class entry's ``config`` (a dict) stands as one marker: :func:`collect` compares it with the registered
    name only, which a dict never equals. A function entry's ``config`` is its name, so it must be hashable.
    """
    config = ref.get("config")
    try:
        hash(config)
    except TypeError:
        if ref.get("class_name") == "function":
            return None
        config = _UNHASHABLE_CONFIG
    values = (ref.get("module"), ref.get("class_name"), ref.get("registered_name"), config)
    identity = tuple((type(value), value) for value in values)
    try:
        hash(identity)
    except TypeError:
        return None
    return identity


_UNHASHABLE_CONFIG = object()


def _is_keras_own(obj: Any) -> bool:
    """Whether Keras (either dialect) defines ``obj``: a config naming it needs no custom object."""
    return dialect_traits.is_keras_module(getattr(obj, "__module__", None))


def _from_registry(ref: dict, dialect: Dialect) -> Any:
    """The object registered under one of ``ref``'s lookup keys (a registered function's is its config)."""
    for key in sorted(lookup_keys(ref)):
        if ">" in key or key == ref.get("registered_name"):
            found = dialect.registered_object(key)
            if found is not None:
                return found
    return None


def _from_module(ref: dict) -> Any:
    module_name = ref.get("module") or "__main__"
    if module_name == "builtins":
        return None
    module = sys.modules.get(module_name)
    if module is None:
        return None
    name = ref_name(ref)
    obj = getattr(module, name, None)
    if obj is not None and getattr(obj, "__name__", None) == name:
        return obj
    return None


def _from_live(ref: dict, live: dict[str, list[Any]]) -> Any:
    module = ref.get("module")
    for obj in live.get(ref_name(ref), ()):
        obj_module = getattr(obj, "__module__", None)
        if obj_module == module or module == "builtins" or (module is None and obj_module in MAIN_MODULES):
            return obj
    return None


def _live_index(layers: list, root: Any) -> dict[str, list[Any]]:
    """Classes and functions reachable from ``layers`` (and ``root``'s compile config), indexed by name."""
    index: dict[str, list[Any]] = {}
    seen: set[int] = set()

    def add(value: Any, depth: int) -> None:
        if id(value) in seen or depth > 3:
            return
        seen.add(id(value))
        if isinstance(value, (types.FunctionType, type)):
            index.setdefault(value.__name__, []).append(value)
            return
        if isinstance(value, (list, tuple)):
            for item in value:
                add(item, depth + 1)
            return
        if isinstance(value, dict):
            for item in value.values():
                add(item, depth + 1)
            return
        cls = type(value)
        if cls.__module__.startswith(("builtins", "numpy")):
            return
        index.setdefault(cls.__name__, []).append(cls)
        for attr in getattr(value, "__dict__", {}).values():
            add(attr, depth + 1)

    for layer in layers:
        add(layer, 0)
    compile_config = getattr(root, "_compile_config", None)
    if compile_config is not None:
        add(getattr(compile_config, "config", None), 0)
    return index


# --------------------------------------------------------------------------
# Classes and functions pickle cannot name
# --------------------------------------------------------------------------


def importable(obj: Any) -> bool:
    """Whether ``pickle`` can store ``obj`` by reference: its module holds it under its qualified name."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    target: Any = module
    for part in (getattr(obj, "__qualname__", "") or "").split("."):
        target = getattr(target, part, None)
        if target is None:
            return False
    return target is obj


def registered_name(obj: Any) -> str | None:
    """The name ``obj`` is registered under with Keras (``@register_keras_serializable``), if it is."""
    name = keras.saving.get_registered_name(obj)
    if name != getattr(obj, "__name__", None) and keras.saving.get_registered_object(name) is obj:
        return name
    return None


class ByRegisteredName(InertReference):
    """A class or function that pickles as the name Keras registered it under (:func:`registered`)."""

    __slots__ = ("registered_name",)

    def __init__(self, target: Any, name: str):
        super().__init__(target, f"{target.__module__}.{target.__qualname__}")
        self.registered_name = name

    def __reduce__(self):
        return registered, (self.registered_name,)


def portable(obj: Any) -> Any:
    """``obj`` (a class or function a payload carries) as it can travel in the pickle being written.

    Defined in the main script: by value
    (:class:`~keras_pickle._capture.main_script.ByValue`), since the loading
    process may not run that script; under cloudpickle too, so that the
    reconstructor, not the unpickler, meets a failure to load it (and names
    both sides' Keras versions). Importable: as it is (pickle stores a
    reference). Otherwise (a class
    defined inside a function): by its Keras registered name where it has
    one; as it is where cloudpickle is the pickler (it stores it by value);
    else by a name that resolves in this process only (:class:`DefinedHere`),
    which is what Keras's own pickling and scikeras give such a class: it
    round-trips within the process, and elsewhere fails with an error that
    names it and the remedies.
    """
    if of_main_script(obj):
        return ByValue(obj)
    if importable(obj):
        return obj
    name = registered_name(obj)
    if name is not None:
        return ByRegisteredName(obj, name)
    if cloudpickle_is_pickling():
        return obj
    return DefinedHere(obj)


class DefinedHere(InertReference):
    """A class or function defined inside a function, pickled as a name only this process resolves
    (:func:`~keras_pickle._rebuild.registered.defined_here`)."""

    __slots__ = ("token",)

    def __init__(self, target: Any):
        super().__init__(target, f"{target.__module__}.{target.__qualname__}")
        self.token = token_for(target)

    def __reduce__(self):
        return defined_here, (self.token,)


def portable_mapping(custom_objects: dict[str, Any]) -> dict[str, Any]:
    """:func:`portable` of every custom object (one stand-in per object, so the stream carries each once)."""
    made: dict[int, Any] = {}
    return {key: made.setdefault(id(obj), portable(obj)) for key, obj in custom_objects.items()}
