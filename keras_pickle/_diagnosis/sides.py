"""Both sides of a load, in words: the Keras, backend and format version that wrote a payload, and this process's.

What every load error of a payload from another Keras, backend or format version names
(:func:`keras_pickle._rebuild.skew.name_sides`, :mod:`.load_failure`). Keras's version is read from the
imported package (:mod:`keras_pickle._dialect`); nothing is imported here.
"""

from __future__ import annotations

from typing import Any

from .. import _dialect
from .._version import __version__
from .._wire import dialect_traits, schema
from .._wire.reprs import as_text, shorten


def sides(header: Any) -> str | None:
    """Writer and reader, when the header's Keras dialect, version, backend or format version differs from this
    process's.

    ``"written by Keras 3.15.1 (jax, format 4); loading on Keras 3.10.0 (jax, keras_pickle 0.3.0,
    reads format 4)"``; a tf-keras payload names tf-keras and its version. ``None`` when nothing
    differs (or the header is no dict).
    """
    if not isinstance(header, dict):
        return None
    dialect = header.get("dialect", _dialect.KERAS3)
    dialect = dialect if dialect in schema.DIALECTS else _dialect.KERAS3
    written = {key: header.get(key) for key in ("keras_version", "backend", "format_version")}
    here = {
        "keras_version": _dialect.version(dialect),
        "backend": _dialect.backend(dialect),
        "format_version": schema.FORMAT_VERSION,
    }
    if written == here:
        return None
    keras_version, backend, format_version = (shorten(as_text(value), 40) for value in written.values())
    keras_name = dialect_traits.of(dialect).keras
    return (
        f"written by {keras_name} {keras_version} ({backend}, format {format_version}); loading on {keras_name} "
        f"{here['keras_version']} ({here['backend']}, keras_pickle {__version__}, reads format {schema.FORMAT_VERSION})"
    )
