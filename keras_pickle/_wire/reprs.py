"""Short reprs of values read from untrusted payloads, built in bounded time."""

from __future__ import annotations

import itertools
import reprlib
from typing import Any


class BoundedRepr(reprlib.Repr):
    """A :class:`reprlib.Repr` whose limits bound the work, not only the text.

    reprlib stops at ``maxlevel`` and takes the first ``max*`` items of each
    container, so a shared structure costs at most ``3**3`` items here (a
    list that holds itself twice, nested 30 deep, takes a 2 kB pickle and
    hours to ``repr``). This also slices bytes before repr-ing them,
    describes a long int by its size (its repr is quadratic in its digits,
    and refused past 4300 of them) and never sorts a dict or set (reprlib
    sorts them whole, and comparing shared nested tuples is exponential).
    """

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxdict = self.maxset = self.maxfrozenset = 3
        self.maxdeque = self.maxarray = 3
        self.maxstring = self.maxother = 60
        self.maxlong = 40

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def repr_bytes(self, x: bytes, level: int) -> str:
        text = repr(x[: self.maxstring])
        return text if len(x) <= self.maxstring else f"{text}... ({len(x)} bytes)"

    repr_bytearray = repr_bytes

    def repr_set(self, x: set, level: int) -> str:
        return self._repr_iterable(x, level, "{", "}", self.maxset) if x else "set()"

    def repr_frozenset(self, x: frozenset, level: int) -> str:
        return self._repr_iterable(x, level, "frozenset({", "})", self.maxfrozenset) if x else "frozenset()"

    def repr_dict(self, x: dict, level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = itertools.islice(x.items(), self.maxdict)
        pieces = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}" for k, v in items]
        return "{" + ", ".join(pieces) + (", ..." if len(x) > self.maxdict else "") + "}"


bounded_repr = BoundedRepr().repr
"""A short repr of a value read from a payload (at most about 2 kB), built in bounded time."""


def shorten(text: str, limit: int = 1500) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def first_sentence(text: str, limit: int = 300) -> str:
    """The first sentence of ``text`` on one line; cut at a word boundary, with ``[...]``, past ``limit``."""
    text = " ".join(text.split())
    sentence = text.split(". ", 1)[0].rstrip(".")
    if len(sentence) <= limit:
        return sentence
    return sentence[:limit].rpartition(" ")[0] + " [...]"


def as_text(value: Any) -> str:
    """A short string from the payload as it is; anything else as its bounded repr."""
    return value if isinstance(value, str) and len(value) <= 80 else bounded_repr(value)
