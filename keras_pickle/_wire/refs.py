"""Inert references: the classes and functions a payload names, as safe mode hands them on.

The restricted unpickler (:mod:`keras_pickle._reader.unpickler`) never gives the
stream a class or function it could call: it gives an :class:`InertReference`.
Only keras_pickle's reconstructor unwraps them into the ``custom_objects`` it
gives Keras; the checksum covers the name they were resolved from.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnsafePayloadError


class InertReference:
    """A class or function the stream names but may not call.

    Calling it raises :class:`UnsafePayloadError`; keras_pickle's
    reconstructor unwraps it with :func:`unwrap`. ``carried``: the payload's
    writing process legitimately carries it (a class or function of its main
    script loaded under ``allow_by_value``, a ``defined_here`` token of this
    process), which safe mode's decision takes into account.
    """

    __slots__ = ("target", "qualified_name", "carried")

    def __init__(self, target: Any, qualified_name: str, *, carried: bool = False):
        self.target = target
        self.qualified_name = qualified_name
        self.carried = carried

    def __call__(self, *args, **kwargs):
        raise UnsafePayloadError(
            f"Safe mode refused to call {self.qualified_name} while unpickling: only "
            "keras_pickle's reconstructor and numpy array reconstruction may run.",
            what=self.qualified_name,
        )

    def __repr__(self) -> str:
        return f"<inert reference to {self.qualified_name}>"


def unwrap(value: Any) -> Any:
    return value.target if isinstance(value, InertReference) else value


def is_carried(value: Any) -> bool:
    """Whether ``value`` is an inert reference to an object the payload legitimately carries."""
    return isinstance(value, InertReference) and value.carried


SPAWNED_MAIN = "__mp_main__"
"""The name a main script runs under in a ``spawn`` / ``forkserver`` child of its process."""
MAIN_MODULES = ("__main__", SPAWNED_MAIN)
"""The names a main script runs under: itself, and in a ``spawn`` / ``forkserver`` child of it."""


def qualified_name(value: Any) -> str:
    """``module.qualname`` of a custom object as the stream names it (the main script as ``__main__``).

    A worker started with ``spawn`` knows the main script's classes as
    ``__mp_main__.Name``; the stream that brought them names ``__main__``.
    """
    if isinstance(value, InertReference):
        name = value.qualified_name
    else:
        name = f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', None)}"
    spawned = SPAWNED_MAIN + "."
    return "__main__." + name.removeprefix(spawned) if name.startswith(spawned) else name
