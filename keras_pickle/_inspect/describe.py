"""Describing one payload the machine found: a :class:`~.report.PayloadInfo`, from plain data only."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from typing import Any

from .. import limits
from .._diagnosis import mismatch
from .._safe_mode.config_judge import lambdas
from .._safe_mode.decision import refused_outright
from .._wire import checksum as wire_checksum
from .._wire import config_walk, layout
from .._wire.arrays import wire_itemsize
from .._wire.body_sections import check_recorded_calls
from .._wire.schema import (
    DEFINED_HERE,
    FORMAT_NAME,
    FORMAT_VERSION,
    KINDS,
    UPGRADE,
    body_fields,
    check_exact_fields,
    header_fields,
)
from ..errors import KerasPickleError, KerasUnpicklingError, ResourceLimitError
from . import verdict
from .machine import Stream
from .object_names import constructed_names, custom_object_names, registered_name
from .payload_info import PayloadInfo
from .values import Blob, Call, Global, OutOfBand, describe_argument, describe_callable, short, some


def describe(stream: Stream, payload: Call, *, verify: bool, buffers: list | None) -> PayloadInfo:
    header, body = payload.args[:2]
    warnings: list[str] = []
    if not isinstance(header, dict):
        warnings.append(f"the header is a {type(header).__name__}, not a dict: keras_pickle refuses it")
        header = {}
    elif header.get("format") != FORMAT_NAME:
        warnings.append("the header lacks the keras_pickle marker: keras_pickle refuses it")
    if not isinstance(body, dict):
        warnings.append(f"the body is a {type(body).__name__}, not a dict: keras_pickle refuses it")
        body = {}

    version = header.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        warnings.append(
            f"format version {short(version)} is newer than this keras_pickle reads (up to "
            f"{FORMAT_VERSION}): upgrade keras_pickle, {UPGRADE}"
        )

    config_text = body.get("config")
    config: Any = None
    if isinstance(config_text, str) and len(config_text) > limits.MAX_CONFIG_CHARS:
        warnings.append(
            f"the config is {len(config_text):,} characters long, more than the inspector parses "
            "(keras_pickle.limits.MAX_CONFIG_CHARS): its layers are not counted"
        )
    elif isinstance(config_text, str):
        try:
            config = json.loads(config_text)
        except (ValueError, RecursionError) as e:
            warnings.append(f"the config is not valid JSON ({type(e).__name__})")
    else:
        warnings.append("the body has no config")

    sections = _sections(body, version, warnings)
    n_variables = sum(len(entries) for entries in sections.values())
    weight_bytes = sum(e.nbytes for entries in sections.values() for e in entries)
    n_params = sum(e.size for e in sections["variables"] if not e.key.endswith("seed_generator_state"))
    for entry in (e for entries in sections.values() for e in entries):
        if entry.problem:
            warnings.append(entry.problem)

    claimed_n, claimed_bytes = header.get("n_variables"), header.get("weight_bytes")
    if claimed_n != n_variables:
        warnings.append(f"the header claims {short(claimed_n)} variables, the body holds {n_variables}")
    if claimed_bytes != weight_bytes:
        warnings.append(f"the header claims {short(claimed_bytes)} weight bytes, the body's shapes need {weight_bytes}")

    custom = body.get("custom_objects", {})
    custom_objects: list[str] = []
    if isinstance(custom, dict):
        for value in custom.values():
            if isinstance(value, Global):
                custom_objects.append(f"{value.module}.{value.name}")
            elif registered_name(value) is not None:
                custom_objects.append(f"<registered with Keras as {short(registered_name(value))}>")
            elif registered_name(value, DEFINED_HERE) is not None:
                defined = registered_name(value, DEFINED_HERE).partition("@")[0]
                custom_objects.append(f"<{short(defined)}, defined inside a function: loads in its process only>")
            elif verdict.carried_name(value) is not None:
                custom_objects.append(f"<{short(verdict.carried_name(value))}, carried by value>")
            elif isinstance(value, Call):
                custom_objects.append(f"<by value: built by {describe_callable(value.function)}>")
            else:
                custom_objects.append(f"<a {type(value).__name__}>")
    else:
        warnings.append("custom_objects is not a dict")

    # Every refusal is a warning, and the verdict is whether there is one: one decision, reported once.
    refusals: list[str] = []
    if stream.unexpected_calls:
        calls = some(stream.unexpected_calls, more=stream.more_unexpected)
        refusals.append(f"the pickle calls {calls}")
    refused = [f"{m}.{n}" for m, n in stream.globals if refused_outright(m, n)]
    if refused:
        refusals.append("the pickle names " + some(refused) + " of the standard library")
    if stream.persistent_ids:
        refusals.append("the pickle uses persistent ids, which keras_pickle payloads never do")
    dialect = header.get("dialect", "keras3") if isinstance(header.get("dialect", "keras3"), str) else "keras3"
    judged = verdict.judge(list(stream.globals), custom, config, dialect)
    refusals.extend(judged.refusals)
    warnings.extend(f"safe mode refuses it: {refusal}" for refusal in dict.fromkeys(refusals))
    warnings.extend(judged.flagged)
    lambda_layers = [str(code) for code in lambdas(config)]
    refuses = bool(refusals)

    problems = _field_problems(header, body)
    warnings.extend(problems)
    checksum = header.get("checksum")
    status = _checksum_status(checksum, header, body, sections, verify=verify, buffers=buffers)
    carried = mismatch.carried_checksum(header)
    if carried is None and "checksum" not in header:  # every header has the field: a damaged one lost it
        carried = stream.head_checksum
    status = _damage_status(status, carried, problems, verify=verify)
    if status.startswith("MISMATCH"):
        warnings.append("the content does not match its checksum: it was changed or damaged")
    elif status.startswith("DAMAGED"):
        warnings.append("the payload is damaged where its checksum does not reach: it was changed after it was written")

    def text(key: str) -> str | None:
        value = header.get(key)
        return value if isinstance(value, str) else None

    def plain(value: Any) -> Any:
        """Header values as reported: None, 64-bit ints and short strings as they are, anything else as a short repr."""
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and value.bit_length() < 64):
            return value
        if isinstance(value, str) and len(value) <= 200:
            return value
        return describe_argument(value, 0)

    return PayloadInfo(
        format_version=plain(version),
        keras_version=text("keras_version"),
        dialect=text("dialect") or ("keras3" if "dialect" not in header else None),
        backend=text("backend"),
        model_class=text("class"),
        kind=text("kind"),
        protocol=stream.protocol,
        n_layers=config_walk.count_top_layers(config),
        n_params=n_params,
        n_variables=n_variables,
        n_optimizer_variables=len(sections["optimizer_variables"]) + len(sections["held_optimizers"]),
        weight_bytes=weight_bytes,
        out_of_band_buffers=stream.out_of_band,
        header_n_variables=plain(claimed_n),
        header_weight_bytes=plain(claimed_bytes),
        custom_objects=tuple(dict.fromkeys(custom_objects)),
        imports=tuple(stream.globals),
        lambda_layers=tuple(lambda_layers),
        checksum=checksum if isinstance(checksum, str) else None,
        checksum_status=status,
        warnings=tuple(dict.fromkeys(warnings)),
        safe_mode_refuses=refuses,
    )


def _sections(body: dict, version: Any, warnings: list[str]) -> dict[str, list[_Entry]]:
    """Every array entry of ``body`` by section (:mod:`keras_pickle._wire.layout`), read as far as its
    structure allows; what is wrong with it appended to ``warnings``."""
    places = layout.place_type(version) if isinstance(version, int) and not isinstance(version, bool) else str
    found: dict[str, list[_Entry]] = {}
    for section in layout.sections(places):
        value = body.get(section.key, [])  # a config-only payload (a loss, metric or optimizer) has none
        if not section.record:
            found[section.key] = _entries(value, section.key, warnings)
            continue
        found[section.key] = []
        if not isinstance(value, list):
            warnings.append(f"{section.key} is a {type(value).__name__}, not a list")
            continue
        for record in value:
            problem = layout.record_problem(section, record, items=False)
            if problem is not None:
                warnings.append(problem)
            if isinstance(record, tuple) and len(record) == len(section.record):
                found[section.key].extend(_entries(record[section.entries_index], section.key, warnings))
    return found


@dataclasses.dataclass
class _Entry:
    key: str
    dtype: str
    shape: tuple
    size: int
    nbytes: int
    data: Any
    problem: str | None = None


def _entries(entries: Any, section: str, warnings: list[str]) -> list[_Entry]:
    if not isinstance(entries, (list, tuple)):
        warnings.append(f"{section} is a {type(entries).__name__}, not a list")
        return []
    result = []
    for entry in entries:
        if not (isinstance(entry, tuple) and len(entry) == 4):
            warnings.append(f"an entry of {section} is not a (path, dtype, shape, data) tuple")
            continue
        key, dtype, shape, data = entry
        problem = None
        if not _plausible_shape(shape):
            problem = f"{section} entry {short(key)} has an invalid shape {short(shape)}"
            shape = ()
        elif any(d < 0 for d in shape):
            problem = f"{section} entry {short(key)} has a negative dimension {short(shape)}"
        itemsize = wire_itemsize(dtype)
        if itemsize is None:
            problem = problem or f"{section} entry {short(key)} has an invalid dtype {short(dtype)}"
            itemsize = 0
        size = math.prod(shape) if shape else 1
        nbytes = size * itemsize
        if problem is None:
            length = _data_length(data)
            if length is not None and length != nbytes:
                problem = f"{section} entry {short(key)} holds {length} bytes; its shape and dtype need {nbytes}"
            elif not isinstance(data, (bytes, bytearray, Blob, OutOfBand)):
                problem = f"{section} entry {short(key)} holds a {type(data).__name__}, not raw bytes"
        name = key if isinstance(key, str) else short(key)
        dtype_name = dtype if isinstance(dtype, str) else short(dtype)
        result.append(_Entry(name, dtype_name, shape, size, nbytes, data, problem))
    return result


def _plausible_shape(shape: Any) -> bool:
    """A tuple of at most MAX_ARRAY_RANK ints of at most 64 bits (so that sizes stay cheap to compute)."""
    return (
        isinstance(shape, tuple)
        and len(shape) <= limits.MAX_ARRAY_RANK
        and all(isinstance(d, int) and not isinstance(d, bool) and d.bit_length() <= 64 for d in shape)
    )


def _data_length(data: Any) -> int | None:
    """How many bytes an entry's in-band data holds (None when it is not in-band bytes)."""
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    if isinstance(data, Blob):
        return data.nbytes
    return None


def _checksum_status(checksum: Any, header: dict, body: dict, sections, *, verify: bool, buffers: list | None) -> str:
    if checksum is None:
        return "absent"
    if not isinstance(checksum, str):
        return f"invalid ({type(checksum).__name__} in the header)"
    if not verify:
        return "present (not verified)"
    entries = [e for section in sections.values() for e in section]
    if any(isinstance(e.data, OutOfBand) for e in entries):
        if buffers is None:
            return "present (not verified: the out-of-band buffers were not given)"
    if _holds_blobs(body):
        return (
            "present (not verified: its in-band data is larger than the inspector holds, "
            "keras_pickle.limits.MAX_HELD_BYTES)"
        )
    resolved = _with_buffers(body, buffers)
    if resolved is None or not wire_checksum.checksummable(header, resolved):
        return _MALFORMED
    algorithm = checksum.partition(":")[0]
    names = custom_object_names(resolved.get("custom_objects", {}))
    if names is None:
        if algorithm == wire_checksum.CHECKSUM_ALGORITHM:  # it covers the names, known only once the objects are built
            return "present (not verified: a custom object is pickled by value)"
        names = {}
    constructed = constructed_names(resolved.get("constructed", ()))
    if constructed is None:
        return "present (not verified: a constructed class is pickled by value)"
    try:
        actual = wire_checksum.content_checksum(header, resolved, algorithm, names, constructed)
    except KerasPickleError:
        return f"present (not verified: unknown algorithm {short(algorithm)})"
    except Exception:
        return _MALFORMED
    return "verified" if actual == checksum else f"MISMATCH (computed {actual})"


_MALFORMED = "present (not verified: the payload is malformed)"


def _damage_status(status: str, carried: str | None, problems: list[str], *, verify: bool) -> str:
    """The checksum status of a payload that carries a checksum (``carried``) and is damaged, as loading reports it.

    A payload is checksummed whole and well-formed: with ``verify``, one too malformed to
    recompute its checksum, whose checksum field or algorithm was damaged, does not match it
    ("MISMATCH"); one whose checksum matches but whose fields are not what keras_pickle writes
    (``problems``: names the checksum does not cover) is "DAMAGED". Otherwise ``status`` as it is.
    """
    if carried is None:
        return status
    if status == "absent":  # the "checksum" key itself was damaged
        found = f"the header's checksum field is damaged: {carried} is not where the header keeps it"
    elif status.startswith("invalid ("):  # its value, damaged into another type
        found = f"the header's checksum is damaged: {status.removeprefix('invalid (').rstrip(')')}"
    elif status == _MALFORMED:
        found = "none computable: the payload is malformed"
    elif status.startswith("present (not verified: unknown algorithm"):
        found = f"the checksum names an unknown algorithm: {carried}"
    elif status == "verified" and problems and verify:
        return f"DAMAGED (the checksum matches, but {problems[0]})"
    else:
        return status
    return f"MISMATCH ({found})" if verify else "present (not verified)"


def _field_problems(header: dict, body: dict) -> list[str]:
    """What is wrong with the names of the header's and the body's fields (which no checksum covers), and with
    the structure of the recorded calls: as written, in the shape of the format version the header names
    (what loading checks before it brings an older payload to the current shape)."""
    version = header.get("format_version")
    if not (isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= FORMAT_VERSION):
        return []
    problems = []
    expected = [("header", header, header_fields(version))]
    if header.get("kind") in KINDS:
        expected.append((f"{header['kind']} body", body, body_fields(header)))
    for what, fields, names in expected:
        try:
            check_exact_fields(what, fields, names)
        except KerasUnpicklingError as e:
            problems.append(e.detail)
    if not problems:  # the recorded calls, whose values the checksum does not cover either, as loads checks them
        try:
            check_recorded_calls(body)
        except ResourceLimitError:
            pass  # a payload as written, larger than this process allows: not damage
        except KerasUnpicklingError as e:
            problems.append(e.detail)
    return problems


def _holds_blobs(body: dict) -> bool:
    """Whether data the checksum covers was skipped rather than held (then it cannot be verified)."""
    return any(isinstance(data, Blob) for data in _checksummed_data(body))


def _checksummed_data(body: dict) -> Iterator[Any]:
    """The data of every well-formed entry and asset of ``body``."""
    for _section, entries in layout.loose_entry_lists(body):
        yield from (e[3] for e in _sequence(entries) if isinstance(e, tuple) and len(e) == 4)
    for state in _sequence(body.get("layer_states")):
        if isinstance(state, tuple) and len(state) == 3:
            yield from (a[1] for a in _sequence(state[2]) if isinstance(a, tuple) and len(a) == 2)


def _sequence(value: Any) -> list | tuple:
    return value if isinstance(value, (list, tuple)) else ()


def _with_buffers(body: dict, buffers: list | None) -> dict | None:
    """The body with every out-of-band placeholder replaced by its buffer."""

    def data(value: Any) -> Any:
        if isinstance(value, OutOfBand):
            if buffers is None or value.index >= len(buffers):
                raise IndexError("missing out-of-band buffer")
            return memoryview(buffers[value.index])
        return value

    def entries(items: Any) -> list:  # as written, a list of tuples: another type is malformed, not read as one
        if not (isinstance(items, list) and all(type(entry) is tuple for entry in items)):
            raise TypeError("a section is not a list of tuples")
        return [(k, d, s, data(v)) for k, d, s, v in items]

    if not all(isinstance(body.get(section.key, []), list) for section in layout.SECTIONS if section.record):
        return None
    try:
        resolved = layout.map_entries(body, entries)
        if not isinstance(resolved.get("custom_objects", {}), dict):
            return None
        return resolved
    except (TypeError, ValueError, IndexError):
        return None
