"""Inert references: the classes and functions a payload names, as safe mode hands them on.

The restricted unpickler (:mod:`keras_pickle._reader.safe`) never gives the
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
    reconstructor unwraps it with :func:`unwrap`.
    """

    __slots__ = ("target", "qualified_name")

    def __init__(self, target: Any, qualified_name: str):
        self.target = target
        self.qualified_name = qualified_name

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


def qualified_name(value: Any) -> str:
    """``module.qualname`` of a custom object as the stream names it (the main script as ``__main__``).

    A worker started with ``spawn`` knows the main script's classes as
    ``__mp_main__.Name``; the stream that brought them names ``__main__``.
    """
    if isinstance(value, InertReference):
        name = value.qualified_name
    else:
        name = f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', None)}"
    return "__main__." + name.removeprefix("__mp_main__.") if name.startswith("__mp_main__.") else name
