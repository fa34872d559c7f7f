"""Safe mode on a decoded Keras config: every node judged by :mod:`.rules` and :func:`.decision.refusal`.

:func:`config_refusals` is what the reconstructor asks of every config a body holds (in the payload's
dialect, with its resolver), and the inspector of the config it reads; :func:`judge_names` is the part
that needs no resolver (nothing imported yet): the refused layers named any way, inline Python code, and
the layers that read a file or merge a module, by name.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._wire import config_walk
from .._wire.reprs import bounded_repr
from ..errors import LambdaLayerError, UnsafePayloadError
from .decision import KERAS_FREE_POLICY, Candidates, GlobalsPolicy, refusal
from .resolution import Unjudged, Unresolved
from .roles import SPECIAL_VALUES, value_refusal, walk
from .rules import (
    FILE_READING,
    FILE_READING_LAYERS,
    FOREIGN_LAYERS,
    MERGED_MODULE_SUFFIX,
    MODULE_MERGING,
    MODULE_MERGING_LAYERS,
    REFUSED_LAYERS,
    WRAPPER_OWN_MODULES,
    is_file_field,
)
from .tables import ARGUMENT_ADVICE, ARGUMENT_ROLE, KERAS_ROLE, Named, table_refusal, unlisted


def refused_layer_spelt(node: dict) -> str | None:
    """The refused layer kind (``Lambda`` or one of :data:`~.rules.FOREIGN_LAYERS`) ``node`` names under any
    of its spellings, whatever its ``module`` says (or whether it has one); ``None`` otherwise."""
    if node.get("class_name") == "function":
        return None
    for name in config_walk.spellings(node):
        if name in REFUSED_LAYERS:
            return name
    return None


class LambdaCode(NamedTuple):
    """Python code stored in a config: a Lambda layer (``layer`` is its name) or an inline lambda
    (``field``: the config key holding it, ``None`` for Keras's ``__lambda__`` object)."""

    layer: str | None
    field: str | None = None

    def __str__(self) -> str:
        if self.layer is not None:
            return self.layer
        return "<inline Python lambda>" if self.field is None else f"<Python lambda in {self.field!r}>"


def stored_code_field(node: dict) -> str | None:
    """The key of ``node`` whose value a deserializer loads as Python bytecode, spelt as tf-keras spells
    one: a key ``K`` beside ``K_type`` set to ``"lambda"`` (its RNN cell wrappers' ``residual_fn`` and
    ``dropout_state_filter_visitor``, a Lambda layer's ``function`` and ``output_shape``), whatever
    class the node belongs to; ``None`` when it has none."""
    for key, value in node.items():
        if value == "lambda" and isinstance(key, str) and key.endswith("_type") and key[: -len("_type")] in node:
            return key[: -len("_type")]
    return None


def inline_code(node: dict) -> LambdaCode | None:
    """The Python code ``node`` itself stores outside a Lambda layer: Keras's ``__lambda__`` object, or
    a :func:`stored_code_field`; ``None`` when it stores none."""
    if node.get("class_name") == "__lambda__":
        return LambdaCode(None)
    field = stored_code_field(node)
    return None if field is None else LambdaCode(None, field)


def lambdas(config: Any) -> list[LambdaCode]:
    """The Lambda layers (spelt any way, with or without a module), and the inline Python lambdas
    outside them (:func:`inline_code`), in document order."""
    found = []
    for node in config_walk.iter_nodes(config, descend=lambda n: not (_is_lambda_layer(n) or inline_code(n))):
        if _is_lambda_layer(node):
            found.append(LambdaCode(config_walk.layer_name(node)))
        elif (code := inline_code(node)) is not None:
            found.append(code)
    return found


def _is_lambda_layer(node: dict) -> bool:
    return refused_layer_spelt(node) == "Lambda"


class ForeignLayer(NamedTuple):
    """A layer of :data:`~.rules.FOREIGN_LAYERS` in a config: its class and its name."""

    class_name: str
    layer: str


def foreign_layers(config: Any) -> list[ForeignLayer]:
    """The layers that embed code or another format, spelt any way, in document order."""
    found = []
    for node in config_walk.named_nodes(config):
        class_name = refused_layer_spelt(node)
        if class_name in FOREIGN_LAYERS:
            found.append(ForeignLayer(class_name, config_walk.layer_name(node)))
    return found


def merged_module(inner: dict, *, wrapper: bool) -> tuple[str, Any] | None:
    """A key of ``inner`` (a config) naming a module a cell wrapper would merge, other than the wrapper's own,
    and its value; ``None`` when it has none. In any config: a ``K_fn_module`` key
    (:data:`~.rules.MERGED_MODULE_SUFFIX`), or a ``K_module`` beside ``K`` or ``K_type``; in a cell wrapper's
    (``wrapper``, :data:`~.rules.MODULE_MERGING_LAYERS`): any ``K_module`` key."""
    for key, value in inner.items():
        if not (isinstance(key, str) and key.endswith("_module")) or value is None or value in WRAPPER_OWN_MODULES:
            continue
        base = key[: -len("_module")]
        if wrapper or key.endswith(MERGED_MODULE_SUFFIX) or base in inner or f"{base}_type" in inner:
            return key, value
    return None


def _field_refusal(node: dict, merges: bool, fields: Any, dialect: str) -> UnsafePayloadError | None:
    """The refusal of ``node``'s config where the layer it builds merges a module it names (``merges``) or
    reads a file named by one of ``fields`` holding a string; ``None`` otherwise."""
    inner = node.get("config")
    if not isinstance(inner, dict) or inline_code(inner) is not None:
        return None  # the code it stores is refused first, where the walk reaches it
    merged = merged_module(inner, wrapper=merges)
    if merged is not None:
        what = f"module {bounded_repr(merged[1])}"
        return _trust_refusal(what, f"{what}, which the {dialect} config names as {merged[0]!r}: {MODULE_MERGING}")
    for field in [*fields, *(key for key in inner if is_file_field(key))]:
        if isinstance(inner.get(field), str):
            what = f"{field} file {bounded_repr(inner[field])}"
            return _trust_refusal(
                what,
                f"the {what} of layer {bounded_repr(config_walk.layer_name(node))} in the {dialect} config: "
                + FILE_READING.format(field=field),
            )
    return None


def judge_config(
    config: Any,
    policy: GlobalsPolicy,
    candidates: Candidates,
    *,
    dialect: str = "Keras",
    vocabulary: str | None = None,
    custom_names: frozenset[str] = frozenset(),
    resolve_string: Candidates | None = None,
) -> None:
    """Raise the first of :func:`config_refusals`: what safe mode refuses in a decoded config."""
    for error in config_refusals(
        config,
        policy,
        candidates,
        dialect=dialect,
        vocabulary=vocabulary,
        custom_names=custom_names,
        resolve_string=resolve_string,
    ):
        raise error


def judge_names(config: Any, *, dialect: str = "Keras") -> None:
    """Raise the first refusal of ``config`` by name alone, before anything is imported or resolved for it."""
    judge_config(config, KERAS_FREE_POLICY, lambda node: (), dialect=dialect)


def config_refusals(
    config: Any,
    policy: GlobalsPolicy,
    candidates: Candidates,
    *,
    dialect: str = "Keras",
    unjudged: list[str] | None = None,
    vocabulary: str | None = None,
    custom_names: frozenset[str] = frozenset(),
    resolve_string: Candidates | None = None,
) -> Iterator[UnsafePayloadError]:
    """Every refusal of a decoded config, in document order: what it names that :func:`.decision.refusal`
    refuses, at any depth and under any spelling (with or without ``module``, ``registered_name``, Keras's
    legacy spellings).

    Python code stored in any dict (:func:`inline_code`) is refused. Every node with a string
    ``class_name`` is judged: a Lambda or foreign-format layer named any way is refused by its name first
    (no lookup can make it safe); a cell wrapper's merged module and a string a file-reading layer would
    open, by name; then every object ``candidates`` says the dialect's deserializer could resolve the node
    to (with the payload's custom objects applied), so a name that resolves through a custom object, a
    registered name, Keras's legacy layer namespace or a module is refused wherever it leads, and the
    subclasses of the refused, file-reading and module-merging layers are held to their rules. An error
    ``candidates`` raises (a module Keras would import) is one of the refusals. ``unjudged``: where the
    inspector collects what ``candidates`` could not look up here (:class:`~.names.Unjudged`).

    Safe mode's vocabulary (``vocabulary``: the dialect's table; ``None`` where the dialect is not known yet)
    decides by name too (``custom_names``, which Keras resolves first, aside): a node naming something
    in Keras's packages that the table does not list is refused, whatever this process's Keras would find;
    each node and string stands in the role :func:`~.roles.walk` gives it; and the values Keras would decode
    or the calls it would run at load are held to :func:`~.roles.value_refusal`.
    """
    for node, role in walk(config):
        if isinstance(node, str):
            found = None if resolve_string is None else _string_refusal(node, role, policy, resolve_string, dialect)
            if found is not None:
                yield found
            continue
        named = isinstance(node.get("class_name"), str)
        kind = refused_layer_spelt(node) if named else None
        if kind is not None:
            yield _layer_refusal(node, kind, dialect)
            continue
        code = inline_code(node)
        if code is not None:
            what = "an inline Python lambda" if code.field is None else f"a Python lambda stored as {code.field!r}"
            yield _trust_refusal(
                what,
                f"{what} in the {dialect} config: loading it would run the Python code stored in the payload",
                LambdaLayerError,
            )
            continue
        decoded = value_refusal(node)
        if decoded is not None:
            yield UnsafePayloadError(f"Safe mode refused {decoded}.", what=decoded.partition(":")[0])
            continue
        if not named:
            continue
        spelt = config_walk.spellings(node)
        fields = [field for name in spelt for field in FILE_READING_LAYERS.get(name, ())]
        error = _field_refusal(node, any(name in MODULE_MERGING_LAYERS for name in spelt), fields, dialect)
        if error is not None:
            yield error
            continue
        special = vocabulary is None or node["class_name"] in SPECIAL_VALUES
        name = None if special else unlisted(node, vocabulary, custom_names)
        if name is not None:
            yield UnsafePayloadError(
                f"Safe mode refused {name}, which the {dialect} config names as {_spelt(node)}: "
                f"{table_refusal(name, KERAS_ROLE)}.",
                what=name,
            )
            continue
        try:
            error = _candidate_refusal(node, policy, candidates, dialect, unjudged, role)
        except UnsafePayloadError as raised:
            error = raised
        if error is not None:
            yield error


def _candidate_refusal(
    node: dict, policy: GlobalsPolicy, candidates: Candidates, dialect: str, unjudged: list[str] | None, role: str
) -> UnsafePayloadError | None:
    """The first refusal of what ``candidates`` resolves ``node`` to, standing in ``role`` (see
    :func:`config_refusals`)."""
    for obj, carried in candidates(node):
        if isinstance(obj, Named):
            reason = table_refusal(
                obj.path, role, allow_callbacks=policy.allow_callbacks, allow_control_flow=policy.allow_control_flow
            )
            if reason is not None:
                return UnsafePayloadError(
                    f"Safe mode refused {obj.path}, which the {dialect} config names as {_spelt(node)}: {reason}.",
                    what=obj.path,
                )
            continue
        if isinstance(obj, Unjudged) and role == ARGUMENT_ROLE:
            reason = ARGUMENT_ADVICE.format(key=obj.description, path="...")
            return UnsafePayloadError(
                f"Safe mode refused {obj.description}, which the {dialect} config names as {_spelt(node)}: {reason}.",
                what=obj.description,
            )
        if isinstance(obj, Unjudged) and unjudged is not None:
            unjudged.append(obj.description)
            continue
        if isinstance(obj, Unjudged):
            return UnsafePayloadError(
                f"Safe mode refused {obj.description}, which the {dialect} config names as {_spelt(node)}: "
                "it cannot be judged here without importing, and safe mode never imports.",
                what=obj.description,
            )
        if isinstance(obj, Unresolved):
            what = bounded_repr(obj.dotted)
            return UnsafePayloadError(
                f"Safe mode refused {what}, which the {dialect} config names as {_spelt(node)}: "
                f"{dialect} would resolve it by getattr on an object whose attribute safe mode cannot "
                "read without running code (a function's or an instance's attribute, an inherited or "
                "lazily imported one), so it cannot judge what would be built or called.",
                what=what,
            )
        if obj is None or isinstance(obj, types.ModuleType) or not callable(obj):
            continue  # nothing Keras could build or call
        if isinstance(obj, type) and node.get("class_name") == "function":
            what = _qualified(obj)
            return UnsafePayloadError(
                f"Safe mode refused {what}, which the {dialect} config names as {_spelt(node)}: the node names a "
                "function and this is a class, which Keras would call with the arguments meant for the function.",
                what=what,
            )
        if isinstance(obj, type):
            if policy.refused_bases and issubclass(obj, policy.refused_bases):
                closest = max((b for b in policy.refused_bases if issubclass(obj, b)), key=lambda b: len(b.__mro__))
                return _layer_refusal(node, closest.__name__, dialect, named=obj)
            merges = bool(policy.module_merging) and issubclass(obj, policy.module_merging)
            fields = [field for cls, own in policy.file_reading if issubclass(obj, cls) for field in own]
            error = _field_refusal(node, merges, fields, dialect)
            if error is not None:
                return error
        reason = refusal(obj, policy, carried=carried, role=role)
        if reason is not None:
            what = _qualified(obj)
            return UnsafePayloadError(
                f"Safe mode refused {what}, which the {dialect} config names as {_spelt(node)}: {reason}.", what=what
            )
    return None


def _string_refusal(
    text: str, role: str, policy: GlobalsPolicy, resolve_string: Candidates, dialect: str
) -> UnsafePayloadError | None:
    """The refusal of what a plain string of the config resolves to (Keras's deserializer returns the custom or
    registered object a string names, at any depth it reaches), standing in ``role``; ``None`` if nothing."""
    for obj, carried in resolve_string(text):
        if isinstance(obj, Named):
            reason = table_refusal(obj.path, role, allow_callbacks=policy.allow_callbacks,
                                   allow_control_flow=policy.allow_control_flow)  # fmt: skip
            what = obj.path
        elif isinstance(obj, Unjudged):
            reason = None if role == KERAS_ROLE else ARGUMENT_ADVICE.format(key=text, path="...")
            what = obj.description
        elif isinstance(obj, type) and role == ARGUMENT_ROLE:
            reason, what = "it is a class, which Keras would call with the arguments the payload chose", _qualified(obj)
        else:
            reason, what = refusal(obj, policy, carried=carried, role=role), _qualified(obj)
        if reason is not None:
            return UnsafePayloadError(
                f"Safe mode refused {what}, which the {dialect} config names by the string {bounded_repr(text)}: "
                f"{reason}.",
                what=what,
            )
    return None


def _layer_refusal(node: dict, kind: str, dialect: str, named: Any = None) -> UnsafePayloadError:
    layer = bounded_repr(config_walk.layer_name(node))
    spelt = named.__qualname__ if isinstance(named, type) else node.get("class_name")
    alias = "" if spelt == kind else f" (named {bounded_repr(spelt)})"
    what = f"{kind} layer {layer}"
    runs = REFUSED_LAYERS.get(kind, "code stored in the payload")
    error = LambdaLayerError if kind == "Lambda" else UnsafePayloadError
    return _trust_refusal(what, f"{what}{alias} in the {dialect} config: loading it would run {runs}", error)


def _trust_refusal(what: str, refused: str, error: type = UnsafePayloadError) -> UnsafePayloadError:
    """ "Safe mode refused ``refused``.", with the one way past a refusal of code the payload runs or names."""
    return error(
        f"Safe mode refused {refused}. If you trust the source of this payload, load it with "
        "keras_pickle.loads(data, safe_mode=False).",
        what=what,
    )


def _spelt(node: dict) -> str:
    parts = {key: node.get(key) for key in ("module", "class_name", "registered_name") if key in node}
    if node.get("class_name") == "function":
        parts["config"] = node.get("config")
    return bounded_repr(parts)


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
