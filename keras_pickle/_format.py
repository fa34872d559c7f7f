"""The keras_pickle payload, format version 2 (reads 1 and 2).

A pickled Keras object is the call ``restore(header, body)``:

``header`` (a dict of plain values, read first)
    ``format`` ("keras_pickle"), ``format_version``, ``keras_version``,
    ``backend``, ``class`` (dotted path of the pickled object's class),
    ``kind`` ("layer"; "loss", "metric" or "optimizer" for a config-only
    payload, the latter two only as part of an object pickled under
    ``install(allow=...)``), ``n_variables``, ``weight_bytes`` and
    ``checksum`` (``None``, or ``"xxh3_64+header:<hex>"`` over the other
    header fields, the body and the custom objects' names; ``"xxh3_64:<hex>"``,
    over the body only, in format version 1).

``body`` (a dict)
    ``config``: the object's Keras config as a JSON string (including its
    build and compile configs, object-sharing ids numbered 1, 2, 3... in
    order of appearance); ``variables`` and ``optimizer_variables``: lists of
    ``(path, dtype, shape, data)`` in the order of ``obj.variables`` /
    ``obj.optimizer.variables``, loaded by position; ``path`` is a key for
    errors and inspection, never interpreted on load (now a name that does
    not depend on the writing process, ``block/dense/kernel``,
    ``dropout/seed_generator_state``, ``block/dense/kernel/momentum``; older
    payloads hold Keras's variable path); ``dtype_policy``: the object's own
    dtype policy as JSON, Keras's global policy while it is rebuilt (absent
    in format version 1); ``optimizer_built``:
    whether the optimizer had created its slots; ``layer_states``: state
    that layers keep outside Keras variables (lookup tables, vocabularies),
    as ``(layer_index, [(key, dtype, shape, data)], [(asset_path, bytes)])``;
    ``custom_objects``: the custom classes and functions the config names,
    keyed by the names Keras looks up.

``data`` is the raw bytes of a C-contiguous array: a ``PickleBuffer`` under
protocol 5, so that ``buffer_callback`` receives every weight out of band,
and ``bytes`` under protocols 0-4. No zip, no HDF5, no numpy pickling.

``restore`` is referenced by every payload: its dotted path
``keras_pickle._format.restore`` is part of the format and never changes.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle
import reprlib
from collections.abc import Iterable
from typing import Any

import keras
import numpy as np
import xxhash

from . import _options
from ._backend import backend_name
from .errors import (
    ChecksumMismatchError,
    FormatVersionError,
    KerasPickleError,
    KerasUnpicklingError,
    NotAPayloadError,
    ResourceLimitError,
    StateMismatchError,
)

FORMAT_NAME = "keras_pickle"
FORMAT_VERSION = 2
"""Version 2 added the body's ``dtype_policy``, the kinds "metric" and "optimizer", and the
``xxh3_64+header`` checksum; version 1 payloads load as they always did."""
CHECKSUM_ALGORITHM = "xxh3_64+header"
"""The checksum keras_pickle writes: xxh3-64 over the header's other fields, the body,
and the qualified name of every custom object (see :func:`content_checksum`)."""
BODY_ONLY_CHECKSUM = "xxh3_64"
"""The checksum of format version 1: the body, custom objects' keys only. Still verified."""
CHECKSUM_ALGORITHMS = (CHECKSUM_ALGORITHM, BODY_ONLY_CHECKSUM)
KINDS = ("layer", "loss", "metric", "optimizer")

# Resource limits, checked against the header and the body before the
# reconstructor decodes a single array or asks Keras to build anything. They
# are far above any real model; raise them (module attributes) if one needs it.
MAX_VARIABLES = 1_000_000
"""Array entries in one payload (weights, optimizer state and layer state together)."""
MAX_WEIGHT_BYTES = 1 << 38
"""Bytes of array data in one payload (256 GiB)."""
MAX_ARRAY_BYTES = MAX_WEIGHT_BYTES
"""Bytes of one array entry."""
MAX_ARRAY_RANK = 64
"""Dimensions of one array entry (numpy's own maximum)."""
MAX_LAYERS = 100_000
"""Layer configs one payload's config may list (nested models included)."""
MAX_CONFIG_BYTES = 1 << 27
"""Characters of the config's JSON text (128 MiB; ResNet50's is 169 kB, about 1 kB per layer)."""
MAX_CONFIG_OBJECTS = 2_000_000
"""``{`` characters in the config's JSON text, an upper bound on the objects parsing it creates
(ResNet50: 2,211). Checked before parsing, which bounds its memory to a few hundred MiB."""

# Extension float types (ml_dtypes) have no portable numpy type string.
_EXTENSION_DTYPES = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "int4",
    "uint4",
)

WireArray = tuple  # (path_or_key, dtype, shape, data)


# --------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------


def dtype_to_wire(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.name in _EXTENSION_DTYPES:
        return dtype.name
    return dtype.str


def dtype_from_wire(name: object) -> np.dtype:
    if not isinstance(name, str):
        raise KerasUnpicklingError(f"Invalid dtype in payload: {bounded_repr(name)}.")
    if name in _EXTENSION_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    try:
        dtype = np.dtype(name)
    except Exception as e:  # numpy raises TypeError, ValueError or SyntaxError for junk
        raise KerasUnpicklingError(f"Invalid dtype in payload: {bounded_repr(name)}.", original_error=e) from e
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise KerasUnpicklingError(f"Refusing dtype {bounded_repr(name)}: only plain numeric dtypes are stored.")
    return dtype


def encode_array(key: str, array: np.ndarray, protocol: int) -> WireArray:
    """One array on the wire: out of band under protocol 5, bytes otherwise."""
    array = np.asarray(array, order="C")
    raw = array.reshape(-1).view(np.uint8)
    data = pickle.PickleBuffer(raw) if protocol >= 5 else raw.tobytes()
    return (key, dtype_to_wire(array.dtype), tuple(int(d) for d in array.shape), data)


def decode_array(entry: object) -> tuple[str, np.ndarray]:
    """The inverse of :func:`encode_array`, without copying the data."""
    if not (isinstance(entry, tuple) and len(entry) == 4):
        raise KerasUnpicklingError(f"Invalid array entry in payload: {type(entry).__name__}.")
    key, dtype_name, shape, data = entry
    dtype = dtype_from_wire(dtype_name)
    if not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise KerasUnpicklingError(f"Invalid shape for {bounded_repr(key)} in payload: {bounded_repr(shape)}.")
    try:
        buffer = memoryview(data).cast("B")
    except TypeError as e:
        raise KerasUnpicklingError(
            f"Invalid data for {bounded_repr(key)} in payload: {type(data).__name__} is not a buffer.",
            original_error=e,
        ) from e
    expected = math.prod(shape) * dtype.itemsize
    if buffer.nbytes != expected:
        raise StateMismatchError(
            f"Variable {bounded_repr(key)} has {buffer.nbytes} bytes of data; its shape {shape} and "
            f"dtype {dtype.name} need {expected}. The payload is truncated or corrupt.",
            path=str(key),
        )
    if expected == 0:
        return key, np.zeros(shape, dtype)
    return key, np.frombuffer(buffer, dtype=dtype).reshape(shape)


def wire_nbytes(entries: Iterable[WireArray]) -> int:
    return sum(memoryview(entry[3]).nbytes for entry in entries)


# --------------------------------------------------------------------------
# Header and checksum
# --------------------------------------------------------------------------


def make_header(*, obj: Any, kind: str, body: dict, checksum: bool) -> dict:
    cls = type(obj)
    arrays = list(_body_arrays(body))
    header = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "keras_version": keras.__version__,
        "backend": backend_name(),
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "kind": kind,
        "n_variables": len(arrays),
        "weight_bytes": wire_nbytes(arrays),
        "checksum": None,
    }
    if checksum:
        header["checksum"] = content_checksum(header, body)
    return header


_HEADER_KEYS = frozenset(
    ("format", "format_version", "keras_version", "backend", "class", "kind", "n_variables", "weight_bytes", "checksum")
)
"""Every header holds exactly these fields (format versions 1 and 2)."""

# The header fields a checksum covers: all but the checksum itself.
_CHECKSUMMED_HEADER_FIELDS = (
    "format",
    "format_version",
    "keras_version",
    "backend",
    "class",
    "kind",
    "n_variables",
    "weight_bytes",
)


def _body_arrays(body: dict) -> Iterable[WireArray]:
    yield from body.get("variables", ())
    yield from body.get("optimizer_variables", ())
    for _index, own_variables, _assets in body.get("layer_states", ()):
        yield from own_variables


def content_checksum(
    header: dict,
    body: dict,
    algorithm: str = CHECKSUM_ALGORITHM,
    custom_object_names: dict[str, str] | None = None,
) -> str:
    """``"<algorithm>:<hex>"``: xxh3-64 of the payload's content, as ``algorithm`` defines it.

    :data:`CHECKSUM_ALGORITHM` covers the header's fields (but the checksum),
    everything in the body, and for each custom object its key and the
    qualified name it resolves to (``custom_object_names``; by default read
    from the body's objects, or from safe mode's inert references). Not the
    custom objects' code. :data:`BODY_ONLY_CHECKSUM` covers the body, and only
    the custom objects' keys. The caller has validated ``header`` and
    ``body`` (:func:`check_header`, :func:`check_body`'s structure checks):
    every value fed here is plain and bounded.
    """
    if algorithm not in CHECKSUM_ALGORITHMS:
        raise KerasUnpicklingError(f"Unknown checksum algorithm {bounded_repr(algorithm)}.")
    digest = xxhash.xxh3_64()
    feed = _feeder(digest)
    if algorithm == CHECKSUM_ALGORITHM:
        feed("header", *[(key, header.get(key)) for key in _CHECKSUMMED_HEADER_FIELDS])
        if custom_object_names is None:
            custom_object_names = {key: custom_object_name(v) for key, v in body.get("custom_objects", {}).items()}
        feed("custom_object_names", sorted(custom_object_names.items()))
    _feed_body(feed, body)
    return f"{algorithm}:{digest.hexdigest()}"


def custom_object_name(value: Any) -> str:
    """``module.qualname`` of a custom object as the stream names it (the main script as ``__main__``).

    A worker started with ``spawn`` knows the main script's classes as
    ``__mp_main__.Name``; the stream that brought them names ``__main__``.
    """
    from . import _safe

    if isinstance(value, _safe.InertReference):
        name = value.qualified_name
    else:
        name = f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', None)}"
    return "__main__." + name.removeprefix("__mp_main__.") if name.startswith("__mp_main__.") else name


def checksum_algorithm(checksum: str) -> str:
    return checksum.partition(":")[0]


def _feeder(digest: Any) -> Any:
    """``feed(*parts)``: each part into ``digest``, length-prefixed (buffers raw, anything else as its repr)."""

    def feed(*parts: object) -> None:
        for part in parts:
            if isinstance(part, (bytes, bytearray, memoryview, pickle.PickleBuffer)):
                view = memoryview(part)
                digest.update(len(view.cast("B")).to_bytes(8, "little"))
                digest.update(view)
            else:
                text = repr(part).encode()
                digest.update(len(text).to_bytes(8, "little"))
                digest.update(text)

    return feed


def _feed_body(feed: Any, body: dict) -> None:
    """Everything in the body but the custom objects' values (their keys are fed)."""
    feed(body.get("config", ""), body.get("optimizer_built"))
    if "dtype_policy" in body:  # absent from format version 1
        feed("dtype_policy", body["dtype_policy"])
    for section in ("variables", "optimizer_variables"):
        feed(section)
        for key, dtype, shape, data in body.get(section, ()):
            feed(key, dtype, shape, data)
    feed("layer_states")
    for index, own_variables, assets in body.get("layer_states", ()):
        feed(index)
        for key, dtype, shape, data in own_variables:
            feed(key, dtype, shape, data)
        for path, content in assets:
            feed(path, content)
    feed("custom_objects", sorted(body.get("custom_objects", {})))


def check_header(header: object) -> dict:
    """Validate a header, or raise the error that says what was found.

    Everything the header claims is checked against the resource limits here,
    before the body is looked at.
    """
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
        from . import __version__

        raise FormatVersionError(
            f"This payload uses keras_pickle format version {version}, written by a newer "
            f"keras_pickle (Keras {_as_text(header.get('keras_version', '?'))}); the installed "
            f"keras_pickle {__version__} reads format versions up to {FORMAT_VERSION}. "
            "Upgrade: pip install --upgrade keras-pickle",
            found_version=version,
            supported_version=FORMAT_VERSION,
        )
    # A checksum cannot cover its own key: a damaged "checksum" key would turn verification off.
    _check_exact_fields("header", header, _HEADER_KEYS)
    kind = header.get("kind")
    if not (isinstance(kind, str) and kind in KINDS):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: the header names an unknown kind {bounded_repr(kind)}."
        )
    n_variables = _header_count(header, "n_variables")
    weight_bytes = _header_count(header, "weight_bytes")
    check_limit("MAX_VARIABLES", n_variables, f"its header claims {n_variables:,} variables")
    check_limit("MAX_WEIGHT_BYTES", weight_bytes, f"its header claims {_human_bytes(weight_bytes)} of weights")
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


def _check_exact_fields(what: str, fields: dict, expected: frozenset) -> None:
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


def check_limit(limit_name: str, value: int, what: str) -> None:
    """Raise :class:`ResourceLimitError` when ``value`` exceeds the limit ``limit_name``."""
    limit = globals()[limit_name]
    if value > limit:
        shown = _human_bytes(limit) if limit_name.endswith("BYTES") else f"{limit:,}"
        raise ResourceLimitError(
            f"Refusing this payload before allocating anything: {what}, more than the limit "
            f"of {shown} (keras_pickle._format.{limit_name}).",
            limit_name=limit_name,
            limit=limit,
            value=value,
        )


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n >= 1 << 60:
        return f"about 2^{n.bit_length() - 1} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024
        if n < 1024 or unit == "PiB":
            return f"{n:,.1f} {unit}"
    raise AssertionError("unreachable")


def check_entry(entry: object, section: str) -> int:
    """Validate one ``(path, dtype, shape, data)`` entry; return its byte count.

    The shape is checked against the limits before anything else, and the
    data must be a buffer of exactly the size shape and dtype imply.
    """
    if not (isinstance(entry, tuple) and len(entry) == 4):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: an entry of {section} is a {type(entry).__name__}, "
            "not a (path, dtype, shape, data) tuple."
        )
    key, dtype_name, shape, data = entry
    if not isinstance(key, str):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: an entry of {section} has a {type(key).__name__} as its path."
        )
    if not (isinstance(shape, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise KerasUnpicklingError(f"Invalid shape for {key!r} in payload: {bounded_repr(shape)}.")
    check_limit("MAX_ARRAY_RANK", len(shape), f"variable {key!r} has {len(shape)} dimensions")
    dtype = dtype_from_wire(dtype_name)
    nbytes = math.prod(shape) * dtype.itemsize
    what = f"variable {key!r} of shape {_shorten(repr(shape), 200)} and dtype {dtype.name} needs {_human_bytes(nbytes)}"
    check_limit("MAX_ARRAY_BYTES", nbytes, what)
    try:
        actual = memoryview(data).nbytes
    except TypeError as e:
        raise KerasUnpicklingError(
            f"Invalid data for {key!r} in payload: {type(data).__name__} is not a buffer.", original_error=e
        ) from e
    if actual != nbytes:
        raise StateMismatchError(
            f"Variable {key!r} has {actual} bytes of data; its shape {shape} and dtype {dtype.name} "
            f"need {nbytes}. The payload is truncated or corrupt.",
            path=key,
        )
    return nbytes


def _sequence(body: dict, key: str) -> list:
    """The list ``body[key]`` (an absent key: empty); a tuple or anything else is not what dumps writes."""
    value = body.get(key, [])
    if not isinstance(value, list):
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: {key} is a {type(value).__name__}, not a list.")
    return value


def _iter_checked_arrays(body: dict) -> Iterable[tuple[object, str]]:
    """Every array entry of the body with its section, the structure around it checked."""
    for section in ("variables", "optimizer_variables"):
        for entry in _sequence(body, section):
            yield entry, section
    for state in _sequence(body, "layer_states"):
        if not (
            isinstance(state, tuple)
            and len(state) == 3
            and isinstance(state[0], int)
            and not isinstance(state[0], bool)
            and state[0] >= 0
            and isinstance(state[1], (list, tuple))
            and isinstance(state[2], (list, tuple))
        ):
            raise KerasUnpicklingError(
                "Corrupt keras_pickle payload: a layer_states entry is not an (index, variables, assets) tuple."
            )
        for asset in state[2]:
            if not (isinstance(asset, tuple) and len(asset) == 2 and isinstance(asset[0], str)):
                raise KerasUnpicklingError("Corrupt keras_pickle payload: an asset is not a (path, content) tuple.")
            if not isinstance(asset[1], (bytes, bytearray, memoryview, pickle.PickleBuffer)):
                raise KerasUnpicklingError(
                    f"Corrupt keras_pickle payload: asset {asset[0]!r} holds a {type(asset[1]).__name__}, not bytes."
                )
        for entry in state[1]:
            yield entry, "layer_states"


def count_config_layers(config: object) -> int:
    """Layer configs listed anywhere in a decoded config (nested models included)."""
    count = 0
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            layers = node.get("layers")
            if isinstance(layers, list):
                count += len(layers)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def _check_custom_objects(body: dict) -> None:
    from . import _safe

    custom_objects = body.get("custom_objects", {})
    if not isinstance(custom_objects, dict):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: custom_objects is not a dict.")
    safe_mode = _options.load_options().safe_mode
    for key, value in custom_objects.items():
        if not isinstance(key, str):
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: custom object key {bounded_repr(key)} is not a string."
            )
        # In safe mode every custom object arrives as an inert reference made
        # by the restricted unpickler; anything else was not named by a global.
        ok = isinstance(value, _safe.InertReference) if safe_mode else callable(value) and value is not restore
        if not ok:
            raise KerasUnpicklingError(
                f"Corrupt keras_pickle payload: custom object {key!r} is a {type(value).__name__}, "
                "not a class or function."
            )


_CONFIG_BODY_KEYS = frozenset(("config", "custom_objects"))
_LAYER_BODY_KEYS_V1 = _CONFIG_BODY_KEYS | {"variables", "optimizer_variables", "optimizer_built", "layer_states"}
_LAYER_BODY_KEYS = _LAYER_BODY_KEYS_V1 | {"dtype_policy"}


def _body_keys(header: dict) -> frozenset:
    """The fields a body of this header's kind and format version holds, exactly."""
    if header["kind"] != "layer":
        return _CONFIG_BODY_KEYS
    return _LAYER_BODY_KEYS_V1 if header["format_version"] == 1 else _LAYER_BODY_KEYS


def check_body(header: dict, body: object) -> dict:
    """Validate the body against its (checked) header before anything is decoded.

    Checks the structure, every entry's shape against the limits and its data
    size, the header's variable count and byte count against the body, the
    number of layers the config lists, and then the checksum, if any.
    """
    if not isinstance(body, dict) or not isinstance(body.get("config"), str):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: the body has no config.")
    _check_exact_fields(f"{header['kind']} body", body, _body_keys(header))
    n_variables = 0
    weight_bytes = 0
    for entry, section in _iter_checked_arrays(body):
        n_variables += 1
        check_limit("MAX_VARIABLES", n_variables, "its body holds more variables")
        weight_bytes += check_entry(entry, section)
        check_limit("MAX_WEIGHT_BYTES", weight_bytes, "its body holds more bytes of weights")
    if n_variables != header["n_variables"] or weight_bytes != header["weight_bytes"]:
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: its header claims {header['n_variables']} variables of "
            f"{header['weight_bytes']} bytes, its body holds {n_variables} variables of {weight_bytes} bytes."
        )
    if header["kind"] != "layer" and n_variables:
        raise KerasUnpicklingError(f"Corrupt keras_pickle payload: a {header['kind']} payload holds variables.")
    if not isinstance(body.get("optimizer_built", False), bool):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: optimizer_built is not a bool.")
    if not isinstance(body.get("dtype_policy", ""), str):
        raise KerasUnpicklingError("Corrupt keras_pickle payload: dtype_policy is not a string.")
    _check_custom_objects(body)
    config_text = body["config"]
    check_limit("MAX_CONFIG_BYTES", len(config_text), f"its config has {len(config_text):,} characters")
    check_limit(
        "MAX_CONFIG_OBJECTS", config_text.count("{"), f"its config opens {config_text.count('{'):,} JSON objects"
    )
    try:
        config = json.loads(config_text)
    except (ValueError, RecursionError) as e:
        raise KerasUnpicklingError(
            "Corrupt keras_pickle payload: the config is not valid JSON "
            f"({type(e).__name__}: {_shorten(str(e), 200)}).",
            original_error=e,
        ) from e
    check_limit("MAX_LAYERS", count_config_layers(config), "its config lists more layers")
    expected = header.get("checksum")
    if expected is not None:
        actual = content_checksum(header, body, checksum_algorithm(expected))
        if actual != expected:
            raise ChecksumMismatchError(
                f"The payload's content does not match its checksum ({expected} in the "
                f"header, {actual} computed): it was changed or damaged after it was written."
            )
    return body


# --------------------------------------------------------------------------
# The reconstructor
# --------------------------------------------------------------------------


def restore(header, body):
    """Rebuild a Keras object from a keras_pickle payload.

    This is the function every keras_pickle pickle calls. It validates the
    header before touching the body, installs keras_pickle in this process
    (so objects returned from here pickle the same way), and raises only
    :class:`~keras_pickle.KerasUnpicklingError` subclasses.
    """
    header = check_header(header)
    body = check_body(header, body)
    from . import _mixins, _payload

    _mixins.install_on_first_load()
    try:
        obj = _payload.object_from_payload(header, body, safe_mode=_options.load_options().safe_mode)
    except KerasPickleError:
        raise
    except Exception as e:
        root = root_cause(e)
        raise KerasUnpicklingError(
            f"Could not rebuild {header.get('class', 'the object')} from its payload: "
            f"{type(root).__name__}: {_shorten(str(root))}",
            original_error=e,
        ) from e
    _options.note_restored()
    return obj


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception of a chain (Keras wraps errors several times)."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    return error


def _as_text(value: Any) -> str:
    """A short string from the payload as it is; anything else as its bounded repr."""
    return value if isinstance(value, str) and len(value) <= 80 else bounded_repr(value)


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


def _shorten(text: str, limit: int = 1500) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"
