"""Safe mode's verdict on a payload, reached without unpickling, without importing anything and without
asking what this process has imported: the same in a fresh Keras-free process as in a worker.

Everything the payload names in a Keras package is judged by safe mode's vocabulary
(:mod:`keras_pickle._safe_mode.tables`), by name, in the role the config gives it, with the rules that
need no lookup (:func:`~keras_pickle._safe_mode.config_judge.config_refusals`: refused layers spelt any way,
inline code, files and modules a config names, values too large for the payload, calls Keras would run
at load). A name outside Keras's packages can only be judged where the payload loads (is it registered
there, a subclass of a Keras base class, named by the caller?): the report says so, and says what safe
mode refuses there unless one of those holds. What a tf-keras op layer calls is judged where TensorFlow
is imported here, else flagged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from .._safe_mode import resolution, tables
from .._safe_mode.config_judge import config_refusals
from .._safe_mode.decision import KERAS_FREE_POLICY, is_stdlib, package_of
from .._safe_mode.roles import SPECIAL_VALUES
from .._safe_mode.rules import CALLABLE_GLOBALS, KERAS_PACKAGES
from .._wire import config_walk, dialect_traits
from .._wire.refs import InertReference, qualified_name
from .._wire.schema import BY_VALUE
from .values import Call, Global, short

UNDECIDED = (
    "safe mode judges it where the payload loads, and refuses it there unless it is a subclass of a Keras base "
    "class, a function registered with Keras, a TensorFlow computation a tf-keras op layer may call, or named in "
    "custom_objects"
)
"""How the report names the refusal of what only the loading process can judge."""


@dataclasses.dataclass
class Verdict:
    """Why safe mode refuses the payload (empty: it loads if the modules it names are imported),
    and names worth a second look that only the loading process can judge."""

    refusals: list[str] = dataclasses.field(default_factory=list)
    flagged: list[str] = dataclasses.field(default_factory=list)


def judge(globals_named: list[tuple[str, str]], custom: Any, config: Any, dialect: str = "keras3") -> Verdict:
    verdict = Verdict()
    undecided: list[str] = []  # what only the loading process can judge
    table_dialect = dialect_traits.of(dialect).name
    for module, name in globals_named:
        if (module, name) in CALLABLE_GLOBALS or is_stdlib(module):
            continue  # allowed; or refused outright (reported with the stream)
        path = f"{module}.{name}"
        if tables.owning_dialect(module) is not None:
            reason = tables.table_refusal(path, tables.KERAS_ROLE)
            if reason is not None:
                verdict.refusals.append(f"{short(path)}: {reason}")
            continue
        undecided.append(short(path))
    table = custom if isinstance(custom, dict) else {}
    for key, value in table.items():
        carried = carried_name(value)
        if carried is not None:
            verdict.refusals.append(
                f"{short(carried)} is carried by value (its code is in the payload): safe mode refuses it unless "
                "keras_pickle.loads(data, allow_by_value=True), or the loading process's main script defines it"
            )
        if isinstance(value, Global):
            named = f"{value.module}.{value.name}"
            if package_of(value.module) in KERAS_PACKAGES:
                verdict.refusals.append(f"custom object {short(key)} names Keras's own {named}")
            elif is_stdlib(value.module):
                verdict.refusals.append(f"custom object {short(key)} names the standard library's {named}")
    named_custom = {key: _custom_candidate(value) for key, value in table.items()}
    unjudged: list[str] = []
    candidates = lambda node: _candidates(node, named_custom, table_dialect)  # noqa: E731
    judged = config_refusals(
        config,
        KERAS_FREE_POLICY,
        candidates,
        dialect=dialect_traits.BY_NAME[dialect].title if dialect in dialect_traits.BY_NAME else "Keras",
        unjudged=unjudged,
        vocabulary=table_dialect,
        custom_names=frozenset(table),
        resolve_string=lambda text: _string_candidates(text, named_custom, table_dialect, unjudged),
    )
    for error in judged:
        verdict.refusals.append(str(error).removeprefix("Safe mode refused ").rstrip("."))
    undecided += (f"{short(description)} (named by the config)" for description in unjudged)
    if undecided:
        verdict.flagged.append(f"{UNDECIDED}: " + ", ".join(dict.fromkeys(undecided)))
    return verdict


def _custom_candidate(value: Any) -> Any:
    """A custom object the stream names as a global: judged by the vocabulary where Keras's packages define it,
    else where the payload loads."""
    if isinstance(value, Global) and tables.owning_dialect(value.module) is not None:
        return tables.Named(f"{value.module}.{value.name}")
    return None  # reported with the stream's globals (or as carried by value)


def _string_candidates(text: str, custom: dict[str, Any], dialect: str, unjudged: list[str]) -> Iterator[Any]:
    """What a plain string of the config resolves to, by name alone: a custom object of the payload, or an object
    Keras's registry holds (as the vocabulary lists them); a registered-looking name (``package>name``) the
    vocabulary does not know is judged where the payload loads."""
    if text in custom:
        found = custom[text]
        yield (found if found is not None else resolution.Unjudged(f"custom object {short(text)}")), False
    elif text in tables.vocabulary(dialect).registered:
        yield tables.Named(tables.vocabulary(dialect).registered[text]), False
    elif ">" in text and len(text) < 200:
        unjudged.append(f"{text!r}, a name a registry of the loading process may hold")


def _candidates(node: dict, custom: dict[str, Any], dialect: str) -> Iterator[Any]:
    """What the payload's dialect could resolve ``node`` to, by name alone: the payload's custom objects, the
    vocabulary's entries (:func:`~keras_pickle._safe_mode.tables.static_candidates`), and what a tf-keras op
    layer calls (judged where TensorFlow is imported here)."""
    spelt = config_walk.spellings(node)
    if node.get("class_name") in SPECIAL_VALUES - {"__typespec__"}:  # Keras looks a typespec's class up by name
        return
    found = [custom[name] for name in spelt if name in custom]
    yield from ((obj, False) for obj in found if obj is not None)
    if not found:
        yield from ((obj, False) for obj in tables.static_candidates(node, dialect, spelt))
    if dialect_traits.of(dialect).op_layer_calls:
        yield from resolution.op_layer_calls(resolution.op_layer_spelt(node), node)


def carried_name(value: Any) -> str | None:
    """``module.qualname`` of a ``keras_pickle._format.by_value(module, qualname, data)`` call, else None."""
    if isinstance(value, Call) and isinstance(value.function, Global) and value.function.key == BY_VALUE:
        if isinstance(value.args, tuple) and len(value.args) == 3 and all(isinstance(a, str) for a in value.args[:2]):
            return qualified_name(InertReference(None, f"{value.args[0]}.{value.args[1]}"))
    return None
