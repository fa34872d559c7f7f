"""The payload's schema: names, versions and kinds, and the checks of header and body.

Every check here runs before the reconstructor decodes a single array or asks
Keras to build anything; each failure is a
:class:`~keras_pickle.KerasUnpicklingError` that says what was found. A header and body are
checked, and their checksum verified, as written: in their own format version's shape
(:func:`header_fields`, :func:`body_fields`, :func:`place_type`). :mod:`.upgrade` then brings
an older one to the current shape.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from .. import limits
from .._diagnosis.mismatch import carried_checksum, damaged, recomputed
from .._version import __version__
from ..errors import (
    FormatVersionError,
    KerasUnpicklingError,
    NotAPayloadError,
    ResourceLimitError,
)
from . import layout
from .arrays import check_entry, wire_nbytes
from .body_sections import check_custom_objects, check_recorded_calls
from .bounds import check_value, config_depth
from .checksum import CHECKSUM_ALGORITHM, CHECKSUM_ALGORITHMS, checksum_algorithm, content_checksum
from .config_walk import count_listed_layers
from .layout import LAYER_BODY_FIELDS, checked_entries, entries
from .reprs import as_text, bounded_repr, shorten

FORMAT_NAME = "keras_pickle"
FORMAT_VERSION = 4
"""Version 2 added the body's ``dtype_policy``, the kinds "metric" and "optimizer", and the
``xxh3_64+header`` checksum. Version 3 keys layer state by the layer's place (a string, where
versions 1 and 2 hold its index) and adds ``metric_variables``, ``held_optimizers``,
``constructed``, ``compile_call`` and ``compile_objects``. Version 4 adds the header's ``dialect``
(which Keras wrote the payload: :data:`DIALECTS`; versions 1 to 3 are Keras 3's) and the
reconstructor :data:`BY_VALUE` (a class of the writer's main script, carried by value). Older
payloads are checked and verified as written, then brought to this version's shape once
(:func:`keras_pickle._wire.upgrade.to_current`), and load as they always did."""
UPGRADE = "in its checkout, git pull && python -m pip install -e ."
"""How to install a newer keras_pickle, as the README installs it (from a checkout: no index has it)."""
DIALECT_KERAS3, DIALECT_TF_KERAS = DIALECTS = ("keras3", "tf_keras")
"""The Keras dialects a payload may hold: Keras 3 (``keras``), and tf-keras (Keras 2, ``tf_keras``)."""
KIND_LAYER, KIND_LOSS, KIND_METRIC, KIND_OPTIMIZER = KINDS = ("layer", "loss", "metric", "optimizer")

RESTORE = ("keras_pickle._format", "restore")
"""The reconstructor every payload calls, ``restore(header, body)``: part of the format, never renamed."""
RESTORE_WITH_STATE = ("keras_pickle._allow", "restore_with_state")
"""``restore_with_state(header, body, state)``: a config payload plus the state of an allowed
metric or unbuilt optimizer (``install(allow=...)``)."""
RESTORE_CALLBACK = ("keras_pickle._allow", "restore_callback")
"""``restore_callback(cls, attributes)``: an allowed callback (or a ``History``)."""
PART_OF = ("keras_pickle._format", "part_of")
"""``part_of(model, path)``: an optimizer or metric that belongs to a model pickled in the same stream."""
REGISTERED = ("keras_pickle._format", "registered")
"""``registered(name)``: the class or function Keras registered as ``name`` (one pickle cannot name)."""
DEFINED_HERE = ("keras_pickle._format", "defined_here")
"""``defined_here(token)``: a class or function defined inside a function of the process that wrote
the payload, which pickle cannot name; it loads in that process only."""
BY_VALUE = ("keras_pickle._format", "by_value")
"""``by_value(module, qualname, data)``: a class or function of the writing process's main script, carried
by value (``data``, cloudpickle's bytes) for processes whose main script does not define it."""
RECONSTRUCTORS = (RESTORE, RESTORE_WITH_STATE, RESTORE_CALLBACK, PART_OF, REGISTERED, DEFINED_HERE, BY_VALUE)


def published(path: tuple[str, str]) -> Callable[[Callable], Callable]:
    """Decorate a reconstructor with the path payloads name it by (one of :data:`RECONSTRUCTORS`): pickle
    writes a function's ``__module__`` and name, and that module re-exports it (``keras_pickle._format``)."""

    def publish(function: Callable) -> Callable:
        if function.__name__ != path[1]:
            raise ValueError(f"{function.__name__} cannot be published as {'.'.join(path)}")
        function.__module__ = path[0]
        return function

    return publish


HEADER_FIELDS_V3 = frozenset(
    ("format", "format_version", "keras_version", "backend", "class", "kind", "n_variables", "weight_bytes", "checksum")
)
"""Every header of format versions 1 to 3 holds exactly these fields."""
HEADER_FIELDS = HEADER_FIELDS_V3 | {"dialect"}
"""Every header of format version 4 holds exactly these fields."""

_CONFIG_BODY_FIELDS = frozenset(("config", "custom_objects"))
_LAYER_BODY_FIELDS_V1 = _CONFIG_BODY_FIELDS | {"variables", "optimizer_variables", "optimizer_built", "layer_states"}
_LAYER_BODY_FIELDS_V2 = _LAYER_BODY_FIELDS_V1 | {"dtype_policy"}
_LAYER_BODY_FIELDS = frozenset(LAYER_BODY_FIELDS)


def make_header(
    *, class_path: str, kind: str, body: dict, checksum: bool, keras_version: str, backend: str, dialect: str
) -> dict:
    """The header of ``body``: what it holds, which Keras wrote it (``dialect``, ``keras_version``: that
    dialect's version), and (if asked) its checksum."""
    arrays = list(entries(body))
    header = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "dialect": dialect,
        "keras_version": keras_version,
        "backend": backend,
        "class": class_path,
        "kind": kind,
        "n_variables": len(arrays),
        "weight_bytes": wire_nbytes(arrays),
        "checksum": None,
    }
    if checksum:
        header["checksum"] = content_checksum(header, body, CHECKSUM_ALGORITHM)
    return header


# --------------------------------------------------------------------------
# The header
# --------------------------------------------------------------------------


def check_header(header: object) -> dict:
    """Validate a header, or raise the error that says what was found.

    Everything the header claims is checked against the resource limits here,
    before the body is looked at. A header that carries a checksum and fails a check
    is damaged (:mod:`keras_pickle._diagnosis.mismatch`): every field checked here is one the checksum covers,
    so it is a :class:`~keras_pickle.ChecksumMismatchError` that says so; a format
    version newer than this keras_pickle reads stays a
    :class:`~keras_pickle.FormatVersionError` whose message names that possibility too.
    """
    try:
        return _check_header(header)
    except ResourceLimitError:
        raise
    except FormatVersionError as e:
        if carried_checksum(header) is None:
            raise
        raise FormatVersionError(
            f"{e} If this keras_pickle wrote it, the payload is damaged instead (its header's "
            "format_version was changed after it was written): this keras_pickle cannot verify the "
            "checksum of a format it does not read, so write it again from the original object.",
            found_version=e.found_version,
            supported_version=e.supported_version,
        ) from e
    except KerasUnpicklingError as e:
        checksum = carried_checksum(header)
        if checksum is None:
            raise
        raise damaged(e.detail, checksum=checksum, cause=e) from e


def _check_header(header: object) -> dict:
    if not (isinstance(header, dict) and header.get("format") == FORMAT_NAME):
        found = "a dict without the keras_pickle marker" if isinstance(header, dict) else f"a {type(header).__name__}"
        raise NotAPayloadError(
            f"Not a keras_pickle payload: the reconstructor received {found} as its header.",
            found=found,
        )
    version = header.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise NotAPayloadError(
            f"Not a keras_pickle payload: invalid format version {bounded_repr(version)}.",
            found=f"format_version={bounded_repr(version)}",
        )
    if version > FORMAT_VERSION:
        raise FormatVersionError(
            f"This payload uses keras_pickle format version {version}, written by a newer "
            f"keras_pickle (Keras {as_text(header.get('keras_version', '?'))}); the installed "
            f"keras_pickle {__version__} reads format versions up to {FORMAT_VERSION}. "
            f"Upgrade keras_pickle: {UPGRADE}",
            found_version=version,
            supported_version=FORMAT_VERSION,
        )
    # A checksum cannot cover its own key: a damaged "checksum" key would turn verification off.
    check_exact_fields("header", header, header_fields(version))
    if version >= 4 and header.get("dialect") not in DIALECTS:
        raise KerasUnpicklingError(
            "Corrupt keras_pickle payload: its header names an unknown Keras dialect "
            f"{bounded_repr(header.get('dialect'))} (known: {', '.join(DIALECTS)})."
        )
    kind = header.get("kind")
    if not (isinstance(kind, str) and kind in KINDS):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: the header names an unknown kind {bounded_repr(kind)}."
        )
    n_variables = _header_count(header, "n_variables")
    weight_bytes = _header_count(header, "weight_bytes")
    limits.check_limit("MAX_VARIABLES", n_variables, f"its header claims {n_variables:,} variables")
    limits.check_limit(
        "MAX_WEIGHT_BYTES", weight_bytes, f"its header claims {limits.human_bytes(weight_bytes)} of weights"
    )
    for key in ("keras_version", "backend", "class"):
        if not isinstance(header.get(key), str):
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: its header's {key} is {bounded_repr(header.get(key))}, not a string."
            )
    checksum = header.get("checksum")
    if checksum is not None and not (isinstance(checksum, str) and checksum_algorithm(checksum) in CHECKSUM_ALGORITHMS):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: invalid checksum {bounded_repr(checksum)} in the header."
        )
    return header


def header_fields(version: int) -> frozenset:
    """The fields a header of format ``version`` holds, exactly."""
    return HEADER_FIELDS if version >= 4 else HEADER_FIELDS_V3


def check_exact_fields(what: str, fields: dict, expected: frozenset) -> None:
    """Raise KerasUnpicklingError unless ``fields`` has exactly the keys ``expected``, naming the difference."""
    if fields.keys() == expected:
        return
    missing, unknown = expected - fields.keys(), fields.keys() - expected
    raise KerasUnpicklingError(
        f"Corrupt keras_pickle payload: its {what} "
        + (f"lacks {', '.join(sorted(missing))}" if missing else "")
        + (" and " if missing and unknown else "")
        + (f"has unknown fields {bounded_repr(sorted(map(str, unknown)))}" if unknown else "")
        + "."
    )


def _header_count(header: dict, key: str) -> int:
    value = header.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: invalid {key} {bounded_repr(value)} in the header.")
    return value


# --------------------------------------------------------------------------
# The body
# --------------------------------------------------------------------------


def body_fields(header: dict) -> frozenset:
    """The fields a body of this header's kind and format version holds, exactly."""
    if header["kind"] != KIND_LAYER:
        return _CONFIG_BODY_FIELDS
    return {1: _LAYER_BODY_FIELDS_V1, 2: _LAYER_BODY_FIELDS_V2}.get(header["format_version"], _LAYER_BODY_FIELDS)


def place_type(header: dict) -> type:
    """What a ``layer_states`` place is in this header's format version (:func:`.layout.place_type`)."""
    return layout.place_type(header["format_version"])


def check_body(header: dict, body: object, *, is_custom_object: Callable[[Any], bool]) -> dict:
    """Validate the body against its (checked) header before anything is decoded.

    Checks the structure, every entry's shape against the limits and its data
    size, the header's variable count and byte count against the body, that
    every custom object is what ``is_custom_object`` accepts, the number of
    layers the config lists, and then the checksum, if any.

    With a checksum, a failed check is damage (:func:`keras_pickle._diagnosis.mismatch.damaged`), save a resource limit
    exceeded by content that still matches its checksum (a payload as written, larger than this
    process allows): the payload was checksummed whole and well-formed, so the error is a
    :class:`~keras_pickle.ChecksumMismatchError` that names what the check found, with the
    checksum recomputed where the content still allows it.
    """
    expected = header.get("checksum")
    try:
        body = _check_body(header, body, is_custom_object)
    except KerasUnpicklingError as e:
        if expected is None:
            raise
        computed = recomputed(header, body)
        if computed == expected and isinstance(e, ResourceLimitError):
            raise  # a payload as it was written, larger than this process's limits allow
        raise damaged(e.detail, checksum=expected, computed=computed, cause=e) from e
    if expected is not None:
        actual = content_checksum(header, body, checksum_algorithm(expected))
        if actual != expected:
            raise damaged(None, checksum=expected, computed=actual)
    return body


def _check_body(header: dict, body: object, is_custom_object: Callable[[Any], bool]) -> dict:
    if not isinstance(body, dict) or not isinstance(body.get("config"), str):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: the body has no config.")
    check_exact_fields(f"{header['kind']} body", body, body_fields(header))
    n_variables = 0
    weight_bytes = 0
    for entry, section in checked_entries(body, place_type(header)):
        n_variables += 1
        limits.check_limit("MAX_VARIABLES", n_variables, "its body holds more variables")
        weight_bytes += check_entry(entry, section)
        limits.check_limit("MAX_WEIGHT_BYTES", weight_bytes, "its body holds more bytes of weights")
    if n_variables != header["n_variables"] or weight_bytes != header["weight_bytes"]:
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: its header claims {header['n_variables']} variables of "
            f"{header['weight_bytes']} bytes, its body holds {n_variables} variables of {weight_bytes} bytes."
        )
    if header["kind"] != KIND_LAYER and n_variables:
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: a {header['kind']} payload holds variables.")
    if not isinstance(body.get("optimizer_built", False), bool):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: optimizer_built is not a bool.")
    if not isinstance(body.get("dtype_policy", ""), str):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: dtype_policy is not a string.")
    check_custom_objects(body, is_custom_object)
    check_recorded_calls(body)
    for field in ("custom_objects", "constructed", "compile_call"):
        check_value(body.get(field), f"its {field}")
    config = parse_config(body["config"], "its config")
    for held in body.get("held_optimizers", ()):
        parse_config(held[1], "an optimizer config it holds")
    for text in (body.get("compile_objects") or {}).values():
        parse_config(text, "an optimizer config of its compile() call")
    limits.check_limit("MAX_LAYERS", count_listed_layers(config), "its config lists more layers")
    return body


def parse_config(text: str, what: str) -> Any:
    """A config's JSON text decoded, its size, object count and depth checked against the limits."""
    limits.check_limit("MAX_CONFIG_BYTES", len(text), f"{what} has {len(text):,} characters")
    limits.check_limit("MAX_CONFIG_OBJECTS", text.count("{"), f"{what} opens {text.count('{'):,} JSON objects")
    try:
        config = json.loads(text)
    except RecursionError as e:
        raise ResourceLimitError(
            f"Refusing this payload before allocating anything: {what} nests deeper than Python's recursion "
            f"limit lets JSON parse, more than the limit of {limits.MAX_CONFIG_DEPTH} "
            "(keras_pickle.limits.MAX_CONFIG_DEPTH).",
            limit_name="MAX_CONFIG_DEPTH",
            limit=limits.MAX_CONFIG_DEPTH,
            value=sys.getrecursionlimit(),
        ) from e
    except ValueError as e:
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: {what} is not valid JSON ({type(e).__name__}: {shorten(str(e), 200)}).",
            original_error=e,
        ) from e
    limits.check_limit("MAX_CONFIG_DEPTH", config_depth(config), f"{what} nests deeper")
    return config
