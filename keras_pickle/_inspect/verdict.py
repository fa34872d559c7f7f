"""Safe mode's verdict on a payload, reached without unpickling and without importing anything.

The inspector asks safe mode's policy (:mod:`keras_pickle._safe_mode`) about everything it can resolve
without importing: a global of a module this process has imported, resolved as the restricted reader
resolves it and judged by the one decision (:func:`~keras_pickle._safe_mode.decision.refusal`); the
payload's custom objects; every node of its config (:func:`~keras_pickle._safe_mode.configs.config_refusals`),
under every spelling, with the payload's custom objects applied. Where keras_pickle's Keras level is loaded
in this process, the policy and the dialect's resolver are the ones ``keras_pickle.loads`` uses here
(:func:`~keras_pickle._safe_mode.decision.current_policy`), so the verdict is loads'. Otherwise the policy
is :data:`~keras_pickle._safe_mode.decision.KERAS_FREE_POLICY` (it decides the same for everything but
Keras's classes and functions, which only a process with Keras can tell apart), and config names are
resolved as the payload's dialect resolves them in what this process has imported: a module's names and
dotted names, and what a tf-keras op layer calls where TensorFlow is imported. A name in a module this
process has not imported (TensorFlow's, for an op layer) is judged where it loads: the report says so.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from .._safe_mode import names
from .._safe_mode.configs import config_refusals
from .._safe_mode.decision import KERAS_FREE_POLICY, current_policy, is_stdlib, package_of, refusal
from .._safe_mode.rules import CALLABLE_GLOBALS, KERAS_PACKAGES
from .._wire import configs
from .._wire.refs import InertReference, qualified_name
from .._wire.schema import BY_VALUE, DIALECT_NAMES, DIALECT_TF_KERAS
from ..errors import UnsafePayloadError
from .values import Call, Global, short


@dataclasses.dataclass
class Verdict:
    """Why safe mode refuses the payload (empty: it loads if the modules it names are imported),
    and names worth a second look that only the loading process can judge."""

    refusals: list[str] = dataclasses.field(default_factory=list)
    flagged: list[str] = dataclasses.field(default_factory=list)


def judge(globals_named: list[tuple[str, str]], custom: Any, config: Any, dialect: str = "keras3") -> Verdict:
    verdict = Verdict()
    loaded = current_policy()
    policy = loaded[0] if loaded else KERAS_FREE_POLICY
    for module, name in globals_named:
        if (module, name) in CALLABLE_GLOBALS or is_stdlib(module):
            continue  # allowed; or refused outright (reported with the stream)
        if module not in sys.modules:
            verdict.flagged.append(
                f"{short(f'{module}.{name}')} is in a module this process has not imported: safe mode refuses it "
                "where that module is not imported, and judges it where it is"
            )
            continue
        try:
            reason = refusal(names.resolve_as_defined(module, name), policy)
        except UnsafePayloadError as e:
            reason = str(e).removeprefix("Safe mode refused ").rstrip(".")
        if reason is not None:
            verdict.refusals.append(f"{short(f'{module}.{name}')}: {reason}")
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
    resolved = {key: obj for key, obj in ((k, _resolved(v)) for k, v in table.items()) if obj is not None}
    candidates = loaded[1](resolved, dialect) if loaded else (lambda node: _candidates(node, resolved, dialect))
    unjudged: list[str] = []
    for error in config_refusals(config, policy, candidates, dialect=DIALECT_NAMES.get(dialect, "Keras"),
                                 unjudged=unjudged):  # fmt: skip
        verdict.refusals.append(str(error).removeprefix("Safe mode refused ").rstrip("."))
    for description in dict.fromkeys(unjudged):
        verdict.flagged.append(f"the config names {short(description)}: safe mode judges it where the payload loads")
    return verdict


def _resolved(value: Any) -> Any:
    """A custom object the stream names as a global of an imported module, resolved as the reader would."""
    if not (isinstance(value, Global) and value.module in sys.modules):
        return None
    try:
        return names.resolve_as_defined(value.module, value.name)
    except UnsafePayloadError:
        return None


def _candidates(node: dict, resolved: dict[str, Any], dialect: str) -> Iterator[tuple[Any, bool]]:
    """What the payload's dialect could resolve ``node`` to, as far as this process (without keras_pickle's
    Keras level) can tell without importing: the payload's custom objects; for tf-keras, which resolves a
    name in any module, the names and dotted names of a module other than Keras's own (judged where Keras
    is loaded), and what an op layer calls."""
    yield from ((resolved[name], False) for name in configs.spellings(node) if name in resolved)
    if dialect != DIALECT_TF_KERAS:
        return
    module = names.imported_module(node.get("module"), dialect)
    if module is not None and package_of(module) not in KERAS_PACKAGES:
        yield from names.module_candidates(node, dialect, missing="unjudged")
    yield from names.op_layer_calls(names.op_layer_spelt(node), node)


def carried_name(value: Any) -> str | None:
    """``module.qualname`` of a ``keras_pickle._format.by_value(module, qualname, data)`` call, else None."""
    if isinstance(value, Call) and isinstance(value.function, Global) and value.function.key == BY_VALUE:
        if isinstance(value.args, tuple) and len(value.args) == 3 and all(isinstance(a, str) for a in value.args[:2]):
            return qualified_name(InertReference(None, f"{value.args[0]}.{value.args[1]}"))
    return None
