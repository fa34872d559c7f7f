"""A layer body's layout, declared once: its fields in written order, and where its arrays sit.

A layer or model's body holds its ``(path, dtype, shape, data)`` entries (:mod:`.arrays`) in five
sections (:data:`SECTIONS`): three lists of entries, and two lists of records (``layer_states``,
``held_optimizers``) with the entries in one field. Every reader and writer of those arrays goes
through this table: the dump side encodes a captured state (:func:`encode`), the load side decodes
one (:func:`decode`), the schema checks the structure and raises (:func:`checked_entries`), the
inspector and the checksum read a body that may be malformed (:func:`record_problem`,
:func:`loose_entry_lists`), the header counts the entries (:func:`entries`).

The records' field names are the attributes of the dump and load sides' records
(``keras_pickle._blueprint.LayerState`` and ``HeldOptimizer``), in written order.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .. import limits
from ..errors import KerasUnpicklingError

LAYER_BODY_FIELDS = (
    "config",
    "variables",
    "optimizer_variables",
    "optimizer_built",
    "layer_states",
    "custom_objects",
    "dtype_policy",
    "metric_variables",
    "held_optimizers",
    "constructed",
    "compile_call",
    "compile_objects",
)
"""Every field of a layer body of the current format version, in the order ``dumps`` writes them
(a pickled dict keeps its order: this order is part of the payload's bytes)."""

_POSITIONAL_PLACE = re.compile(r"#(0|[1-9][0-9]{0,17})/")


def positional_place(position: int) -> str:
    """The ``layer_states`` place that names a layer by its position in Keras's ``_flatten_layers()`` order
    of the rebuilt object: ``#<position>/``. No layer's own place ends with ``/``."""
    return f"#{position}/"


def place_position(place: str) -> int | None:
    """The position a :func:`positional_place` names; ``None`` for any other place."""
    match = _POSITIONAL_PLACE.fullmatch(place)
    return int(match.group(1)) if match else None


CORRUPT = "Corrupt keras_pickle payload: "
"""How every structure error of a body begins (:func:`corrupt`)."""


def corrupt(problem: str) -> KerasUnpicklingError:
    """The error a structure ``problem`` raises while a body is checked."""
    return KerasUnpicklingError(f"{CORRUPT}{problem}.")


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _is_plain_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _asset_problem(asset: Any) -> str | None:
    if not (isinstance(asset, tuple) and len(asset) == 2 and isinstance(asset[0], str)):
        return "an asset is not a (path, content) tuple"
    if not isinstance(asset[1], (bytes, bytearray, memoryview, pickle.PickleBuffer)):
        return f"asset {asset[0]!r} holds a {type(asset[1]).__name__}, not bytes"
    return None


def _same(value: Any) -> Any:
    return value


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a record: its name, whether a value is what ``dumps`` writes there, the problem
    of each of its items (a field that is a list), and what the load side keeps of it."""

    name: str
    check: Callable[[Any], bool]
    item_problem: Callable[[Any], str | None] | None = None
    decoded: Callable[[Any], Any] = _same
    size_limit: tuple[str, str] | None = None
    """A limit of :mod:`keras_pickle.limits` on the value's length, and what the value is, for its error."""


@dataclasses.dataclass(frozen=True)
class Section:
    """A body field that holds arrays: a list of entries, or a list of records (``record``) whose
    ``entries`` field holds them. ``spelled``: the record's shape as an error names it."""

    key: str
    record: tuple[Field, ...] = ()
    entries: str = ""
    spelled: str = ""

    @functools.cached_property
    def entries_index(self) -> int:
        return [f.name for f in self.record].index(self.entries)


def _place_check(place_type: type) -> Callable[[Any], bool]:
    if place_type is str:
        return lambda place: isinstance(place, str)
    return lambda place: isinstance(place, int) and not isinstance(place, bool) and place >= 0


@functools.lru_cache(maxsize=2)
def sections(place_type: type = str) -> tuple[Section, ...]:
    """The array sections of a layer body whose ``layer_states`` places are ``place_type``: a ``str``
    since format version 3, an ``int`` (a position) before (``schema.place_type``)."""
    return (
        Section("variables"),
        Section("optimizer_variables"),
        Section("metric_variables"),
        Section(
            "layer_states",
            record=(
                Field("place", _place_check(place_type)),
                Field("own_variables", _is_sequence),
                Field(
                    "assets",
                    _is_sequence,
                    item_problem=_asset_problem,
                    decoded=lambda assets: [(str(path), bytes(content)) for path, content in assets],
                ),
            ),
            entries="own_variables",
            spelled="a (place, variables, assets) tuple",
        ),
        Section(
            "held_optimizers",
            record=(
                Field("path", lambda path: isinstance(path, str)),
                Field(
                    "config_json",
                    lambda config: isinstance(config, str),
                    size_limit=("MAX_CONFIG_BYTES", "an optimizer config"),
                ),
                Field("built", lambda built: isinstance(built, bool)),
                Field("targets", _is_plain_int_list, decoded=list),
                Field("variables", lambda entries: isinstance(entries, list)),
            ),
            entries="variables",
            spelled="(path, config, built, targets, variables)",
        ),
    )


def place_type(format_version: int) -> type:
    """What a ``layer_states`` place is in a body of ``format_version``: the layer's index in Keras's
    ``_flatten_layers()`` order (an int) in versions 1 and 2, its place (a str) since."""
    return int if format_version < 3 else str


SECTIONS = sections(str)
"""The array sections of a body of the current format version."""


def record_problem(section: Section, record: Any, *, items: bool = True) -> str | None:
    """What is wrong with one record of ``section`` as written, or None: its shape, then (``items``) the
    items of its list fields (an asset's content, which the inspector may hold only as a length)."""
    fields = section.record
    if not (
        isinstance(record, tuple)
        and len(record) == len(fields)
        and all(field.check(value) for field, value in zip(fields, record))
    ):
        return f"a {section.key} entry is not {section.spelled}"
    for field, value in zip(fields, record) if items else ():
        if field.item_problem is not None:
            for item in value:
                problem = field.item_problem(item)
                if problem is not None:
                    return problem
    return None


def listed(body: Mapping, key: str) -> list:
    """The list ``body[key]`` (an absent key: empty); a tuple or anything else is not what dumps writes."""
    value = body.get(key, [])
    if not isinstance(value, list):
        raise corrupt(f"{key} is a {type(value).__name__}, not a list")
    return value


def checked_entries(body: Mapping, place_type: type = str) -> Iterator[tuple[Any, str]]:
    """Every array entry of ``body`` with its section's key, each record's structure checked first
    (raising :func:`corrupt`); an absent section is empty. The entries themselves are unchecked
    (``arrays.check_entry``)."""
    for section in sections(place_type):
        for item in listed(body, section.key):
            if not section.record:
                yield item, section.key
                continue
            problem = record_problem(section, item)
            if problem is not None:
                raise corrupt(problem)
            for field, value in zip(section.record, item):
                if field.size_limit is not None:
                    limit, what = field.size_limit
                    limits.check_limit(limit, len(value), f"{what} has {len(value):,} characters")
            yield from ((entry, section.key) for entry in item[section.entries_index])


def loose_entry_lists(body: Mapping) -> Iterator[tuple[Section, Any]]:
    """Each section's lists of entries in a body that may be malformed: a list section as it is, the
    entries of each record that is a tuple of the right length (their values unchecked)."""
    for section in SECTIONS:
        value = body.get(section.key, [])
        if not section.record:
            yield section, value
            continue
        for record in value if _is_sequence(value) else ():
            if isinstance(record, tuple) and len(record) == len(section.record):
                yield section, record[section.entries_index]


def entries(body: Mapping) -> Iterator[tuple]:
    """Every array entry of a well-formed body."""
    for _section, entry_list in loose_entry_lists(body):
        yield from entry_list


def map_entries(body: Mapping, convert: Callable[[list], list]) -> dict:
    """A copy of ``body`` with every list of entries replaced by ``convert(entries)``; the other fields
    as they are. For a body whose records are well-formed."""
    mapped = dict(body)
    for section in SECTIONS:
        if section.key not in body:
            continue
        if not section.record:
            mapped[section.key] = convert(body[section.key])
            continue
        at = section.entries_index
        mapped[section.key] = [(*r[:at], convert(r[at]), *r[at + 1 :]) for r in body[section.key]]
    return mapped


def encode(state: Any, encoded: Callable[[list], list]) -> dict[str, list]:
    """Each section of a captured state (``_blueprint.CapturedState``: an attribute per section, records
    with an attribute per field) as written: its entries through ``encoded``."""
    body = {}
    for section in SECTIONS:
        values = getattr(state, section.key)
        if not section.record:
            body[section.key] = encoded(values)
            continue
        body[section.key] = [
            tuple(
                encoded(getattr(record, f.name)) if f.name == section.entries else getattr(record, f.name)
                for f in section.record
            )
            for record in values
        ]
    return body


def decode(body: Mapping, decoded: Callable[[list], list], records: Mapping[str, type]) -> dict[str, list]:
    """Each section of a checked body as the load side holds it: entries through ``decoded``, each record
    as ``records[section]`` built from its fields by name (the inverse of :func:`encode`)."""
    state = {}
    for section in SECTIONS:
        if not section.record:
            state[section.key] = decoded(body[section.key])
            continue
        cls = records[section.key]
        state[section.key] = [
            cls(
                **{
                    f.name: decoded(value) if f.name == section.entries else f.decoded(value)
                    for f, value in zip(section.record, record)
                }
            )
            for record in body[section.key]
        ]
    return state
