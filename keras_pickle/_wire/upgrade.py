"""Payloads of an older format version, brought to the current shape: the one module that knows them.

:func:`keras_pickle._format.restore` checks a header and body as written (:mod:`.schema`: each
version's fields, :func:`.schema.place_type`) and verifies their checksum over what was written
(:mod:`.checksum` covers each version's shape), then calls :func:`to_current` once. From there on,
every header and body is of format version :data:`.schema.FORMAT_VERSION`: no code after it
branches on an older version or an older shape. In the spirit of joblib's ``numpy_pickle_compat``.

One function per version step, each a header and body of its version to new ones of the next
(what it is given is not changed: error messages still name the version the payload was written
in, ``keras_pickle._diagnosis.sides.sides``):

* **1 → 2**: a layer body gains ``dtype_policy`` ``""``, which records none: the object is rebuilt
  under the loading process's global dtype policy, as version 1 payloads always were.
* **2 → 3**: each ``layer_states`` index (the layer's position in Keras's ``_flatten_layers()``
  order of the rebuilt object) becomes the place that names that position,
  :func:`.layout.positional_place` (``3`` → ``"#3/"``); a layer body gains
  ``metric_variables``, ``held_optimizers`` and ``constructed`` (empty), ``compile_call``
  (``None``: the compile config is used) and ``compile_objects`` (empty): a payload of those
  versions carries no metric variables, held optimizers or recorded calls.
* **3 → 4**: the header gains ``dialect`` ``"keras3"``: only Keras 3 wrote payloads before it.

The header keeps its ``checksum`` as written: it was verified, and nothing verifies it again.
Imports no Keras (the wire layer never does).
"""

from __future__ import annotations

from collections.abc import Callable

from .layout import positional_place
from .schema import DIALECT_KERAS3, KIND_LAYER, KIND_LOSS, KIND_METRIC, KIND_OPTIMIZER


def to_current(header: dict, body: dict) -> tuple[dict, dict]:
    """``(header, body)`` of the current format version: ``header`` and ``body`` (checked, their
    checksum verified) step by step from the version they were written in. A payload of the
    current version is returned as it is."""
    for step in _STEPS[header["format_version"] - 1 :]:
        header, body = step(header, body)
    return header, body


FORMAT_1_STATE_KINDS = {"metrics": KIND_METRIC, "optimizers": KIND_OPTIMIZER}
"""What format 1 wrote as payload kind ``"loss"`` beside a ``restore_with_state`` state of these kinds: an
allowed metric's or optimizer's config (their own payload kinds came later in format 1, tests/data/allowed/)."""


def state_payload_kind(header: dict, state_kind: object) -> object:
    """The payload kind of ``header`` as the current format spells it, for a ``restore_with_state`` call whose
    state is of kind ``state_kind``: format 1's ``"loss"`` beside a metric's or optimizer's state is that
    kind's own; any other header's ``kind`` as written (``restore_with_state`` judges it)."""
    kind = header.get("kind")
    if kind == KIND_LOSS and header.get("format_version") == 1 and state_kind in FORMAT_1_STATE_KINDS:
        return FORMAT_1_STATE_KINDS[state_kind]
    return kind


def _from_v1(header: dict, body: dict) -> tuple[dict, dict]:
    """Version 1 → 2: ``dtype_policy`` ``""`` (none recorded: the loading process's policy)."""
    if header["kind"] == KIND_LAYER:
        body = {**body, "dtype_policy": ""}
    return {**header, "format_version": 2}, body


def _from_v2(header: dict, body: dict) -> tuple[dict, dict]:
    """Version 2 → 3: layer state keyed by a place (the positional one), and the sections version 3 added, empty."""
    if header["kind"] == KIND_LAYER:
        body = {
            **body,
            "layer_states": [(positional_place(index), own, assets) for index, own, assets in body["layer_states"]],
            "metric_variables": [],
            "held_optimizers": [],
            "constructed": [],
            "compile_call": None,
            "compile_objects": {},
        }
    return {**header, "format_version": 3}, body


def _from_v3(header: dict, body: dict) -> tuple[dict, dict]:
    """Version 3 → 4: the header's ``dialect``, Keras 3."""
    return {**header, "format_version": 4, "dialect": DIALECT_KERAS3}, body


_STEPS: tuple[Callable[[dict, dict], tuple[dict, dict]], ...] = (_from_v1, _from_v2, _from_v3)
"""``_STEPS[n - 1]`` takes a payload of format version ``n`` to ``n + 1``: one for each version
before :data:`.schema.FORMAT_VERSION` (a new format version adds the step from the one before it)."""
