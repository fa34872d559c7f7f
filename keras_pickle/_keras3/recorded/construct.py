"""Layers and models (and losses, metrics and learning-rate schedules: :mod:`._compile_objects`)
rebuilt from their recorded constructor arguments instead of a config.

When ``install()`` ran before such an object was constructed
(:mod:`keras_pickle._keras3.recorded.records`), its config is a placeholder,
``{"name": ..., "keras_pickle_constructed": i}``, and the payload carries
``(class, args, kwargs)`` as entry ``i`` of its ``constructed`` list. The
arguments travel in the same pickle stream as the object: a model passed to
the constructor is pickled once, as itself, so ``restored.encoder`` is the
model the restored constructor received. On load, Keras's deserializer
resolves the class of a placeholder to :class:`_Constructing`, which calls
the class with the arguments (once per entry) where Keras would call
``from_config``; everything else in the config (build config, the graph of a
Functional around it) applies as usual.

A Functional subclass called as ``CustomModel(inputs, outputs, ...)`` was
given symbolic tensors of its own graph. They never travel and are never
handed to a constructor again: its placeholder carries its Functional config
and where each tensor sat among the arguments (:func:`_graph.arguments_config`);
loading rebuilds that graph and calls the class with the rebuilt graph's
tensors in their places, and with the config's ``name`` and ``trainable``
where the call did not give them, as Keras's ``functional_from_config`` does.

The variables of a layer given as an argument travel with that layer's own
payload, so the object's payload leaves them out (:func:`argument_variables`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from typing import Any

import keras

from ..._wire.refs import unwrap
from ...errors import KerasUnpicklingError, UnrecoverableConfigError
from .. import graph as _graph
from . import compile_objects as _compile_objects
from . import records as _records
from .records import CONSTRUCTED_KEY


@dataclasses.dataclass(frozen=True)
class Constructed:
    """How to rebuild one object: ``cls(*args, **kwargs)``."""

    cls: Any
    args: tuple
    kwargs: dict


def of(objects: list[Any]) -> list[Constructed]:
    """The recorded constructor calls of ``objects`` (each has recorded arguments), symbolic tensors left out."""
    entries = []
    for obj in objects:
        args, kwargs = _graph.without_symbolic(*_records.init_arguments(obj))
        entries.append(Constructed(type(obj), args, kwargs))
    return entries


def from_entries(entries: Any) -> list[Constructed]:
    """The payload's ``constructed`` list, checked and unwrapped (safe mode hands classes on as inert references)."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: constructed is not a list.")
    found = []
    for entry in entries:
        if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[1], tuple)):
            raise KerasUnpicklingError(
                "Corrupt keras_pickle payload: a constructed entry is not (class, args, kwargs)."
            )
        cls, args, kwargs = unwrap(entry[0]), entry[1], entry[2]
        if not (isinstance(cls, type) and issubclass(cls, (keras.Layer, *_compile_objects.bases()))):
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: a constructed entry names {cls!r}, not a Keras layer, model, "
                "loss, metric or learning-rate schedule class."
            )
        if not (isinstance(kwargs, dict) and all(isinstance(key, str) for key in kwargs)):
            raise KerasUnpicklingError("Corrupt keras_pickle payload: constructed keyword arguments are not a dict.")
        found.append(
            Constructed(cls, tuple(_unwrap_all(a) for a in args), {k: _unwrap_all(v) for k, v in kwargs.items()})
        )
    return found


def _unwrap_all(value: Any) -> Any:
    """``value`` with the inert references safe mode made, in lists, tuples and dicts too, unwrapped."""
    if isinstance(value, list):
        return [_unwrap_all(item) for item in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_unwrap_all(item) for item in value)
    if isinstance(value, dict) and type(value) is dict:
        return {key: _unwrap_all(item) for key, item in value.items()}
    return unwrap(value)


def argument_layers(entries: list[Constructed]) -> list[Any]:
    """The Keras layers and models among the arguments (in lists, tuples and dict values too)."""
    found: list[Any] = []
    seen: set[int] = set()
    for entry in entries:
        for value in _walk((entry.args, entry.kwargs)):
            if isinstance(value, keras.Layer) and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
    return found


def argument_variables(entries: list[Constructed]) -> set[int]:
    """``id()`` of every variable a layer among the arguments holds (carried by that layer's payload)."""
    return {id(v) for layer in argument_layers(entries) for v in layer.variables}


def _walk(value: Any, depth: int = 0) -> Iterator[Any]:
    yield value
    if depth > 8:
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item, depth + 1)


class _Constructing:
    """Stands for a class in ``custom_objects`` while loading: placeholders become constructor calls."""

    def __init__(self, cls: type, entries: list[Constructed], built: dict[int, Any], scope: dict, wire: bool):
        self._cls = cls
        self._entries = entries
        self._built = built
        self._scope = scope  # the custom objects the whole config is deserialized with
        self._wire = wire
        self.__name__ = cls.__name__

    def from_config(self, config: dict) -> Any:
        index = config.get(CONSTRUCTED_KEY) if isinstance(config, dict) else None
        if index is None:
            return self._cls.from_config(config)
        if not (isinstance(index, int) and 0 <= index < len(self._entries)):
            raise KerasUnpicklingError(f"Corrupt keras_pickle payload: no constructed entry #{index!r}.")
        if index not in self._built:
            entry = self._entries[index]
            if entry.cls is not self._cls:
                raise KerasUnpicklingError(
                    f"Corrupt keras_pickle payload: constructed entry #{index} is a {entry.cls.__name__}, "
                    f"the config names {self._cls.__name__}."
                )
            args, kwargs = entry.args, entry.kwargs
            if _graph.TENSORS_KEY in config:
                args, kwargs = self._in_rebuilt_graph(config, entry)
            obj = entry.cls(*args, **kwargs)
            _as_configured(obj, config)
            if _records.init_arguments(obj) is None and isinstance(obj, keras.Layer):
                _records.record_init_arguments(obj, args, kwargs)
            self._built[index] = obj
        return self._built[index]

    def _in_rebuilt_graph(self, config: dict, entry: Constructed) -> tuple[tuple, dict]:
        """The entry's arguments with the tensors of the graph its config describes, rebuilt, in their places."""
        places = config[_graph.TENSORS_KEY]
        if not (
            isinstance(places, list)
            and isinstance(config.get("layers"), list)
            and all(_is_placed_reference(item) for item in places)
        ):
            raise KerasUnpicklingError("Corrupt keras_pickle payload: a constructed model's graph is malformed.")
        tensors = _graph.rebuild_nodes(config, self._scope, wire=self._wire)
        try:
            placed = {tuple(place): tensors(reference) for place, reference in places}
            args, kwargs = _graph.replace_at(entry.args, entry.kwargs, placed)
        except (KeyError, IndexError, TypeError) as e:
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: a symbolic argument of {self._cls.__name__} names no tensor "
                f"of its graph ({type(e).__name__}: {e}).",
                original_error=e,
            ) from e
        return args, {**kwargs, **_name_and_trainable(entry.cls, args, kwargs, config)}


def _as_configured(obj: Any, config: dict) -> None:
    """Give a constructed layer the name and ``trainable`` its config records, where the constructor did not.

    A constructor that passes nothing to ``super().__init__()`` (keras.io's ``PatchEncoder``) names
    the layer anew (``patch_encoder_1``); the config names it as the original was, which is what the
    graph around it and its variables' places say. Unbuilt layers only: a built one made its
    variables under its name already.
    """
    if not isinstance(obj, keras.Layer):
        return  # a loss, metric or schedule: its constructor named it as the original was
    name = config.get("name")
    if isinstance(name, str) and name and obj.name != name and not obj.built:
        obj.name = name
    if config.get("trainable") is False and obj.trainable:
        obj.trainable = False


def _is_placed_reference(item: Any) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], list)
        and len(item[0]) >= 2
        and item[0][0] in ("args", "kwargs")
        and isinstance(item[1], list)
        and len(item[1]) == 3
        and isinstance(item[1][0], str)
        and all(type(n) is int for n in item[1][1:])
    )


def _name_and_trainable(cls: type, args: tuple, kwargs: dict, config: dict) -> dict:
    """The config's ``name`` and ``trainable`` the call did not give, where the constructor accepts them.

    What Keras's ``functional_from_config`` passes to a Functional subclass.
    A class taking ``*args`` (Keras's ``Model.__init__``) gives its positional
    arguments to ``Functional(inputs, outputs, name)``: a third one is the name.
    """
    try:
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return {}
    kinds = {p.kind for p in parameters}
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    given = set(kwargs) | set(positional[: len(args)])
    if inspect.Parameter.VAR_POSITIONAL in kinds and len(args) > 2:
        given.add("name")
    named = {p.name for p in parameters if p.kind not in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    accepts_any = inspect.Parameter.VAR_KEYWORD in kinds
    return {
        key: config[key]
        for key in ("name", "trainable")
        if key in config and key not in given and (key in named or accepts_any)
    }


def constructing_custom_objects(
    custom_objects: dict[str, Any], entries: list[Constructed], *, wire: bool = False
) -> dict[str, Any]:
    """``custom_objects`` with every class that has constructed entries standing for :class:`_Constructing`.

    Each call starts afresh: a fallback rebuild constructs the objects again.
    ``wire``: the graph of a model rebuilt around its symbolic arguments takes
    its nodes from recorded specs (:func:`_graph.rebuild_nodes`).
    """
    if not entries:
        return custom_objects
    classes = {id(entry.cls): entry.cls for entry in entries}
    built: dict[int, Any] = {}
    replaced = dict(custom_objects)
    for key, value in custom_objects.items():
        if id(value) in classes:
            replaced[key] = _Constructing(value, entries, built, replaced, wire)
    missing = [cls.__name__ for cls in classes.values() if not any(v is cls for v in custom_objects.values())]
    if missing:
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: the constructed class(es) {', '.join(missing)} "
            "are not among its custom objects."
        )
    return replaced


# --------------------------------------------------------------------------
# Objects constructed before install(): what to tell the user
# --------------------------------------------------------------------------


def unrecorded_arguments_error(obj: Any, names: list[str]) -> UnrecoverableConfigError:
    """The error for an object whose constructor arguments Keras cannot record and keras_pickle did not."""
    cls = type(obj)
    described = ", ".join(f"{name}: {_type_of_argument(obj, name)}" for name in names)
    return UnrecoverableConfigError(
        f"Cannot pickle {cls.__name__}: it has no get_config(), and its constructor arguments ({described}) "
        "were not recorded: Keras records no arguments of a Model subclass, nor of a layer whose arguments "
        "are not plain values, and keras_pickle records them only for objects constructed after "
        "keras_pickle.install(). Either call keras_pickle.install() before constructing it (then its "
        f"arguments travel with it), or add get_config() to {cls.__name__} returning its arguments, "
        "with Keras objects serialized, and a from_config() classmethod that deserializes them, e.g.\n\n"
        "    def get_config(self):\n"
        '        return {**super().get_config(), "encoder": keras.saving.serialize_keras_object(self.encoder)}\n\n'
        "    @classmethod\n"
        "    def from_config(cls, config):\n"
        '        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])\n'
        "        return cls(**config)",
        class_name=cls.__name__,
    )


def _type_of_argument(obj: Any, name: str) -> str:
    value = obj.__dict__.get(name, _MISSING)
    if value is _MISSING:
        value = obj.__dict__.get(f"_{name}", _MISSING)
    return "?" if value is _MISSING else type(value).__name__


_MISSING = object()
