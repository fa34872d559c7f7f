"""The two :class:`~keras_pickle._dialect.Dialect` values, wired from the modules that implement them, and
the choice of one per object or per header.

This is the one module that knows which functions make up each Keras's answers: the dump side
(:mod:`keras_pickle._capture`), the load side (:mod:`keras_pickle._rebuild`), copies and ``check``
receive a dialect from here and never ask which Keras they hold.
"""

from __future__ import annotations

from typing import Any

import keras
from keras.src.saving import serialization_lib

from .. import _dialect
from .._capture import config as _capture_config
from .._capture import custom_objects as _custom_objects
from .._capture import encode as _capture_encode
from .._keras3 import copy_plan as _keras3_copy_plan
from .._keras3 import safe_mode as _keras3_safe_mode
from .._keras3.census import census_of
from .._rebuild import from_blueprint as _from_blueprint
from .._rebuild import skew as _skew
from .._tfkeras import classes as _tfkeras_classes
from .._tfkeras import copy_plan as _tfkeras_copy_plan
from .._tfkeras import rebuild as _tfkeras_rebuild
from .._tfkeras import safe_mode as _tfkeras_safe_mode
from .._tfkeras import walk as _tfkeras_walk
from .._wire.schema import DIALECT_KERAS3, DIALECT_TF_KERAS


def _tf_keras_custom_objects(config: dict, live: Any) -> dict:
    return _custom_objects.collect(config, live, TF_KERAS)


def _keras3_protocol_bases() -> dict[str, type]:
    return {
        "layer": keras.Layer,
        "model": keras.Model,  # scikeras patches Model directly: Model's own attributes must be ours
        "loss": keras.losses.Loss,
        "optimizer": keras.optimizers.Optimizer,
        "metric": keras.metrics.Metric,
        "callback": keras.callbacks.Callback,
    }


def _keras3_layers(live: Any) -> tuple[list, Any]:
    census = census_of(live)
    return census.layers, census.root


KERAS3 = _dialect.Dialect(
    name=DIALECT_KERAS3,
    config_of=_capture_config.config_of,
    snapshot=_capture_encode.snapshot,
    rebuild=_from_blueprint.rebuild_with_state,
    from_config=_from_blueprint.from_config,
    live_layers=_keras3_layers,
    registered_object=keras.saving.get_registered_object,
    resolver=_keras3_safe_mode.resolver,
    safe_mode_scope=lambda: serialization_lib.SafeModeScope(True),
    registries=list,
    adapt_body=_skew.adapt_body,
    copy_plan=_keras3_copy_plan.plan,
    protocol_bases=_keras3_protocol_bases,
    records_calls=True,
)

TF_KERAS = _dialect.Dialect(
    name=DIALECT_TF_KERAS,
    config_of=_tfkeras_rebuild.config_of,
    snapshot=_capture_encode.tf_keras_snapshot,
    rebuild=_tfkeras_rebuild.rebuild_with_state,
    from_config=_tfkeras_rebuild.from_config,
    live_layers=lambda live: (_tfkeras_walk.layers(live), live),
    registered_object=lambda key: _tfkeras_classes.tf_keras().saving.get_registered_object(key),
    resolver=_tfkeras_safe_mode.resolver,
    safe_mode_scope=lambda: _tfkeras_rebuild.safe_mode_scope(True),
    registries=_tfkeras_safe_mode.registries,
    adapt_body=lambda header, body: body,
    copy_plan=lambda obj, memo: _tfkeras_copy_plan.plan(obj, memo, custom_objects_of=_tf_keras_custom_objects),
    protocol_bases=lambda: _tfkeras_classes.protocol_bases() if _tfkeras_classes.is_imported() else {},
    records_calls=False,
)

BY_NAME = {dialect.name: dialect for dialect in (KERAS3, TF_KERAS)}
"""The dialects by the name a header gives: what :func:`of` and :func:`of_header` choose from."""


def of(obj: Any) -> _dialect.Dialect:
    """The dialect of a Keras object (or of a Keras 3 census)."""
    return BY_NAME[_dialect.of(obj)]


def of_header(header: dict) -> _dialect.Dialect:
    """The dialect of a checked header of the current format version, its package imported
    (:func:`keras_pickle._dialect.require`: a tf-keras payload where tf-keras is missing names both sides)."""
    _dialect.require(header["dialect"], header["keras_version"])
    return BY_NAME[header["dialect"]]
