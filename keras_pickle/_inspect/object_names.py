"""The names a payload's custom objects and constructed classes stand for, read off the inspector's
inert values as the loader's checksum covers them (:mod:`keras_pickle._wire.checksum`)."""

from __future__ import annotations

from typing import Any

from .._wire.refs import InertReference, qualified_name
from .._wire.schema import REGISTERED
from . import verdict
from .values import Call, Global


def registered_name(value: Any, reconstructor: tuple[str, str] = REGISTERED) -> str | None:
    """The name of a ``keras_pickle._format.registered(name)`` call (or of ``reconstructor``), else None."""
    if isinstance(value, Call) and isinstance(value.function, Global) and value.function.key == reconstructor:
        if isinstance(value.args, tuple) and len(value.args) == 1 and isinstance(value.args[0], str):
            return value.args[0]
    return None


def constructed_names(entries: Any) -> list[str] | None:
    """The qualified name of each constructed class, as the checksum covers them; None if one is not a global."""
    names = []
    for entry in entries if isinstance(entries, (list, tuple)) else ():
        cls = entry[0] if isinstance(entry, tuple) and entry else None
        if not isinstance(cls, Global):
            return None
        names.append(qualified_name(InertReference(None, f"{cls.module}.{cls.name}")))
    return names


def custom_object_names(custom: dict) -> dict[str, str] | None:
    """The qualified name each custom object's key resolves to, as the loader's checksum covers them.

    None when an object is pickled by value: its name is known only once it is built.
    """
    names = {}
    for key, value in custom.items():
        if verdict.carried_name(value) is not None:
            names[key] = verdict.carried_name(value)
            continue
        if not isinstance(value, Global):
            return None
        names[key] = qualified_name(InertReference(None, f"{value.module}.{value.name}"))
    return names
