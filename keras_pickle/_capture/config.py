"""An object's config as it travels: canonical, annotated with its graph's specs, as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

import keras
from keras.src.backend.common import global_state
from keras.src.saving import serialization_lib

from .._keras3 import graph as _graph
from .._keras3 import survey as _survey
from .._keras3.recorded import weight_decay as _weight_decay
from .._wire.refs import SPAWNED_MAIN
from ..errors import KerasPicklingError


def config_of(obj: Any) -> dict:
    """A Keras 3 object's full config, with build and compile configs (``Dialect.config_of``).

    Object-sharing ids are canonical (:func:`_survey.canonical_config`): the
    config of equal objects is equal in any process. A Functional or
    Sequential config records its nodes' output specs (:func:`_graph.annotate`), a compiled model's what
    ``exclude_from_weight_decay()`` set on its optimizer (:mod:`keras_pickle._keras3.recorded.weight_decay`).
    """
    config = _graph.annotate(_serialize_with_sharing(obj), obj)
    if isinstance(obj, keras.Model):
        _weight_decay.annotate_compile_config(config, obj)
    return config


def _serialize_with_sharing(obj: Any) -> dict:
    """``serialize_keras_object(obj)``, canonical, with every occurrence of a shared object marked.

    Keras marks an object serialized twice with ``shared_object_id`` on every
    occurrence but the first whenever the first sits in another object's
    config (the mark goes to a dict that Keras has already copied). Loading
    then shares the later occurrences only: a Dense layer that three custom
    layers hold through their configs comes back as two Dense layers, one
    with its own weights. When the config holds shared objects, the object is
    serialized again with their ids known from the start, so that every
    occurrence is marked; if that second pass differs from the first in
    anything but those marks (it should not), the first pass is kept.
    """
    with serialization_lib.ObjectSharingScope():
        config = serialization_lib.serialize_keras_object(obj)
    canonical, shared = _survey.canonicalize(config)
    if not shared:
        return canonical
    with serialization_lib.ObjectSharingScope():
        recorded = global_state.get_global_attribute("shared_objects/id_to_config_map")
        recorded.update({object_id: {} for object_id in shared})
        marked = serialization_lib.serialize_keras_object(obj)
    return _survey.canonical_config(marked) if _survey.only_marks_added(config, marked, shared) else canonical


def config_to_json(config: dict, obj: Any) -> str:
    """``config`` as JSON text; ``KerasPicklingError`` naming the fix where it is not JSON-serializable.

    A class of the main script is written with ``"module": null``, as Keras writes it for ``__main__``,
    also where the process runs the script as ``__mp_main__`` (a ``spawn`` child: a Dask or
    multiprocessing worker): the same model gives the same payload, and the same Dask token, on
    either side.
    """
    try:
        text = json.dumps(config)
        # Wherever multiprocessing is imported a class may come from a spawn child. Its module's name, a
        # plain ASCII string, appears in the text as it is wherever the config holds it.
        if SPAWNED_MAIN in sys.modules and f'"{SPAWNED_MAIN}"' in text:
            _main_script_modules_as_none(config)
            text = json.dumps(config)
        return text
    except TypeError as e:
        raise KerasPicklingError(
            f"Cannot pickle {type(obj).__name__}: its config is not JSON-serializable ({e}). "
            "Make get_config() return plain Python values (numbers, strings, lists, dicts) "
            "or serialized Keras objects (keras.saving.serialize_keras_object).",
            original_error=e,
        ) from e


def _main_script_modules_as_none(config: Any) -> None:
    stack = [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("module") == SPAWNED_MAIN and "class_name" in node:
                node["module"] = None
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


def policy_json(obj: Any) -> str:
    """The object's own dtype policy, serialized (what :func:`rebuild_with_state` rebuilds under)."""
    return json.dumps(keras.dtype_policies.serialize(obj.dtype_policy))
