"""Process-independent names: the keys of a payload's variables, and a canonical config.

A payload must not depend on the history of the process that wrote it, so
that a model pickled in one process and re-pickled after loading in another
gives identical bytes. Two things Keras produces do:

* Variable paths (``sequential_1/dense_3/kernel``, ``seed_generator_2/...``,
  ``adam/dense_3_kernel_momentum``) carry names numbered by a per-process
  counter, and their prefixes depend on the name scope a variable was created
  in. :func:`variable_keys` and :func:`optimizer_variable_keys` name each
  variable instead by where it sits in the model: the names of the layers the
  config lists (the config restores them), the attribute that holds a layer
  created by a constructor, and the variable's own name; a Keras auto-generated
  name (``dense_5``) is cut back to its stem (``dense``).
* ``shared_object_id`` in a config is ``id()`` of an object serialized twice.
  :func:`canonical_config` renumbers them in order of first appearance, and
  drops them from Keras's stateless value objects, which loading never shares
  again. (``_rebuild.config_of`` first makes sure that every occurrence of a
  shared object carries its id.)

Variables and layer state are matched to the rebuilt object by these keys, by
position where the keys do not pair one to one (see ``_state``).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
from typing import Any

import keras
from keras.src.models.functional import Functional
from keras.src.utils.naming import to_snake_case

from .._wire.config_walk import JSON_SCALARS

SHARED_OBJECT_KEY = "shared_object_id"


# --------------------------------------------------------------------------
# Variable keys
# --------------------------------------------------------------------------


def variable_keys(obj: Any) -> list[str]:
    """One key per variable of ``obj.variables``, in that order.

    The key of a variable that a layer of ``obj`` owns is the path from
    ``obj`` to that layer (``obj`` itself not included) and the variable's
    name, joined by ``/``: ``block/dense/kernel``, ``dropout/seed_generator_state``.
    A layer that a Sequential or Functional config lists is named by its
    name (loading restores it from the config); any other sublayer by the
    attribute that holds it or, failing that, by its name with Keras's
    auto-numbering removed; a variable by its name, likewise. Equal models
    (one rebuilt from the other's config) get equal keys in any process.
    Keys need not be unique: two variables may share a name.
    """
    return keys_of(list(obj.variables), survey(obj).owned_keys)


def keys_of(variables: list, owned_keys: dict[int, str]) -> list[str]:
    """:func:`variable_keys` of ``variables`` given the keys of the variables layers own (:class:`Survey`)."""
    return [owned_keys.get(id(v)) or _normalized_path(v) for v in variables]


def optimizer_variable_keys(optimizer: Any, references: list[tuple[Any, str]]) -> list[str]:
    """One key per variable of ``optimizer.variables``, in that order.

    ``references`` pairs the model's variables with their keys
    (:func:`variable_keys`). A slot Keras made for one of them (named after
    that variable's path: ``dense_3_kernel_momentum``) is keyed by the model
    variable's key and the slot's own name: ``dense/kernel/momentum``. Other
    optimizer variables are keyed by their name (``iteration``).
    """
    by_prefix: dict[str, str] = {}
    for v, key in references:
        by_prefix.setdefault(v.path.replace("/", "_") + "_", key)
    return [_slot_key(str(v.name), by_prefix) or _normalized(str(v.name), type(v)) for v in optimizer.variables]


def _slot_key(name: str, by_prefix: dict[str, str]) -> str | None:
    """The key of the slot ``name`` (``<reference prefix><slot name>``), or None if it is no slot.

    The longest prefix wins: the slot ``d_w_b_momentum`` of ``d/w_b`` also
    starts with ``d_w_``, the prefix of ``d/w``.
    """
    end = len(name)
    while (end := name.rfind("_", 0, end)) > 0:
        key = by_prefix.get(name[: end + 1])
        if key is not None:
            return f"{key}/{name[end + 1 :]}"
    return None


@dataclasses.dataclass(frozen=True)
class Survey:
    """What one walk over a model's layers tells (:func:`survey`).

    ``layers``: ``root`` and every layer in it, each once, in the order of Keras's
    ``root._flatten_layers()`` (a positional place numbers layers by it: ``layer_state``).
    ``places``: ``id(layer) -> place``, the path of :func:`variable_keys` without the variable
    (``block/dense``; ``root`` itself is ``""``), unique (a place two layers would share gets
    ``#2``, ``#3``... in walk order). ``listed``: ``id()`` of the layers a config rebuilds
    (``root`` and, recursively, the layers a Sequential or Functional config lists).
    ``owned_keys``: ``id(variable) -> key`` for every variable a layer owns, keyed by the layer
    ``Layer.variables`` reaches first (own weights, seed generators, then sublayers).
    """

    layers: list
    places: dict[int, str]
    listed: frozenset[int]
    owned_keys: dict[int, str]


def survey(root: Any) -> Survey:
    """One walk over ``root``'s layers: everything :class:`Survey` holds."""
    places, listed, owned = {}, set(), {}
    children: dict[int, list] = {}
    taken: dict[str, int] = {}
    for layer, prefix, is_listed in _walk_layers(root):
        children[id(layer)] = list(getattr(layer, "_layers", ()))
        place = prefix.rstrip("/")
        count = taken[place] = taken.get(place, 0) + 1
        places[id(layer)] = place if count == 1 else f"{place}#{count}"
        if is_listed:
            listed.add(id(layer))
        own = list(getattr(layer, "_trainable_variables", ())) + list(getattr(layer, "_non_trainable_variables", ()))
        own += [generator.state for generator in getattr(layer, "_seed_generators", ())]
        for v in own:
            owned.setdefault(id(v), prefix + _normalized(str(v.name), type(v)))
    return Survey(layers=_flatten_order(root, children), places=places, listed=frozenset(listed), owned_keys=owned)


def _flatten_order(root: Any, children: dict[int, list]) -> list:
    """``root._flatten_layers()``, from the sublayer lists the walk recorded: ``root``, then a deque
    of its sublayers, each layer's own pushed to the deque's front (``extendleft``, so reversed)."""
    order, seen = [root], set()
    pending = collections.deque(children.get(id(root), ()))
    while pending:
        layer = pending.popleft()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        order.append(layer)
        pending.extendleft(children.get(id(layer), ()))
    return order


def _walk_layers(root: Any):
    """``(layer, prefix, listed)`` for ``root`` and each layer in it, depth first, each once."""
    seen: set[int] = set()
    stack = [(root, "", True)]
    while stack:
        layer, prefix, listed = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        yield layer, prefix, listed
        sublayers = getattr(layer, "_layers", ())
        if not sublayers:
            continue
        children_listed = listed and isinstance(layer, (keras.Sequential, Functional))
        attributes = {} if children_listed else _attribute_names(layer)
        children = []
        for child in sublayers:
            if children_listed:
                segment = child.name
            else:
                segment = attributes.get(id(child)) or _normalized(child.name, type(child))
            children.append((child, f"{prefix}{segment}/", children_listed))
        stack.extend(reversed(children))


def _attribute_names(layer: Any) -> dict[int, str]:
    """``id(sublayer) -> name`` of the attribute that holds it (``dense``, ``blocks/0``).

    Public attributes holding a list, tuple or dict of layers count as well;
    private ones do not (Keras keeps every sublayer in ``_layers``).
    """
    names: dict[int, str] = {}
    for name, value in getattr(layer, "__dict__", {}).items():
        if isinstance(value, keras.Layer):
            names.setdefault(id(value), name)
        elif name.startswith("_"):
            continue
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if isinstance(item, keras.Layer):
                    names.setdefault(id(item), f"{name}/{index}")
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, keras.Layer):
                    names.setdefault(id(item), f"{name}/{key}")
    return names


def _normalized(name: str, cls: type) -> str:
    """``name`` without the counter Keras appends to an auto-generated name.

    Keras names an unnamed object of class ``Dense`` ``dense``, ``dense_1``,
    ``dense_2``... in order of creation in the process: all of them become
    ``dense``. Any other name is kept.
    """
    stem, pattern = _auto_name_pattern(cls)
    return stem if pattern.fullmatch(name) else name


@functools.lru_cache(maxsize=1024)
def _auto_name_pattern(cls: type) -> tuple[str, re.Pattern]:
    stem = to_snake_case(cls.__name__)
    return stem, re.compile(re.escape(stem) + r"(_\d+)?")


def _normalized_path(variable: Any) -> str:
    """A variable's path with every auto-generated counter removed (for variables no layer owns)."""
    return "/".join(re.sub(r"(_\d+)+$", "", segment) or segment for segment in str(variable.path).split("/"))


# --------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------


def canonical_config(config: Any) -> Any:
    """``config`` with every ``shared_object_id`` in a form that does not depend on the process.

    Ids are renumbered 1, 2, 3... in order of first appearance (depth first,
    in the order JSON writes the config); equal ids stay equal and distinct
    ones distinct, which is all Keras's deserializer needs to share an object
    again. Keras's stateless value objects (dtype policies, initializers,
    regularizers, constraints) lose their id: Keras rebuilds them from class
    name and config, dropping the id, so layers that shared one such object
    share none after loading (and sharing one means nothing). Returns a new
    structure; ``config`` is not changed.
    """
    return canonicalize(config)[0]


def canonicalize(config: Any) -> tuple[Any, set]:
    """:func:`canonical_config` of ``config``, and the ``shared_object_id`` values of ``config`` it kept."""
    renumbered: dict[Any, int] = {}

    # The walk runs on every dump: a scalar is returned where it is met, never passed to a call.
    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            stateless = SHARED_OBJECT_KEY in node and _is_stateless_keras_object(node)
            result = {}
            for key, value in node.items():
                if key != SHARED_OBJECT_KEY:
                    result[key] = value if type(value) in JSON_SCALARS else walk(value)
                elif not stateless:
                    result[key] = renumbered.setdefault(value, len(renumbered) + 1) if _is_id(value) else value
            return result
        if isinstance(node, list):
            return [value if type(value) in JSON_SCALARS else walk(value) for value in node]
        if isinstance(node, tuple):
            return tuple([value if type(value) in JSON_SCALARS else walk(value) for value in node])
        return node

    return walk(config), set(renumbered)


def only_marks_added(config: Any, marked: Any, ids: set[int]) -> bool:
    """Whether ``marked`` is ``config`` plus at most one more mark for each of ``ids``."""
    if _without_marks(config) != _without_marks(marked):
        return False
    before, after = set(_shared_marks(config)), set(_shared_marks(marked))
    added = [object_id for _path, object_id in after - before]
    return before <= after and set(added) <= ids and len(added) == len(set(added))


def _shared_marks(config: Any) -> list[tuple[tuple, int]]:
    """``(path, id)`` of every ``shared_object_id`` canonical_config keeps, ``path`` a tuple of keys."""
    marks = []
    stack: list[tuple[tuple, Any]] = [((), config)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            value = node.get(SHARED_OBJECT_KEY)
            if _is_id(value) and not _is_stateless_keras_object(node):
                marks.append((path, value))
            stack.extend((path + (key,), child) for key, child in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((path + (index,), child) for index, child in enumerate(node))
    return marks


def _without_marks(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_marks(value) for key, value in node.items() if key != SHARED_OBJECT_KEY}
    if isinstance(node, (list, tuple)):
        return [_without_marks(value) for value in node]
    return node


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Modules of Keras classes whose instances are values: configuration and no
# state. Keras's own loader rebuilds them without their shared_object_id.
_STATELESS_KERAS_MODULES = ("keras.dtype_policies", "keras.initializers", "keras.regularizers", "keras.constraints")


def _is_stateless_keras_object(node: dict) -> bool:
    """Whether ``node`` is the config of a built-in Keras dtype policy, initializer, regularizer or constraint."""
    if node.get("registered_name"):
        return False
    module = node.get("module")
    return module in _STATELESS_KERAS_MODULES or (module == "keras" and node.get("class_name") == "DTypePolicy")
