"""The globals a keras_pickle payload may name: safe mode's policy, and the inspector's report of it."""

from __future__ import annotations

import sys

from .._wire.schema import RECONSTRUCTORS

NUMPY_RECONSTRUCTION = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }
)
"""What numpy's own pickles of arrays, scalars and dtypes call."""

CODECS_ENCODE = ("_codecs", "encode")
"""How protocols 0-2 spell ``bytes``: ``_codecs.encode(text, "latin1")``."""

CALLABLE_GLOBALS = frozenset(RECONSTRUCTORS) | NUMPY_RECONSTRUCTION | {CODECS_ENCODE}
"""Globals safe mode lets the stream call (each checks its arguments)."""

EXPECTED_CALL_PREFIXES = (
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer",
    "numpy.dtype",
    "__setstate__ of the result of numpy.",
)
"""Descriptions of the calls (other than reconstructors) a payload's stream makes: numpy's."""


def is_stdlib(module: str) -> bool:
    return module.split(".", 1)[0] in sys.stdlib_module_names or module == "builtins"


def refused_outright(module: str, name: str) -> bool:
    """Whether safe mode refuses this global whatever is imported: a standard-library callable it does not list."""
    return (module, name) not in CALLABLE_GLOBALS and is_stdlib(module)


def expected_call(description: str) -> bool:
    """Whether a call, as the inspector describes it, is one that numpy's pickles make."""
    return description.startswith(EXPECTED_CALL_PREFIXES)
