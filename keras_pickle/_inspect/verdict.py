"""Safe mode's verdict, reached without Keras and without resolving anything the process has not imported.

The inspector reports what :func:`keras_pickle.loads` would refuse, judged as the restricted
reader and the reconstructor judge it: a global resolves only as its module defines it (checked
here for modules this process has imported, with the reader's own function); a custom object never
names a Keras class or function (Keras resolves its own by name) nor a standard-library one; the
layers the config builds are read after the payload's custom objects are applied, so a custom
object standing for ``Lambda`` is a Lambda layer. A library function among the custom objects
(:data:`~keras_pickle._reader.allowlist.LIBRARY_PACKAGES`) is flagged: safe mode loads it only if
Keras vouches for it, which only the loading process can tell.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from .._reader.allowlist import CALLABLE_GLOBALS, KERAS_PACKAGES, LIBRARY_PACKAGES, is_stdlib, package_of
from .._reader.safe import resolve_as_defined
from .._wire import configs
from .._wire.refs import InertReference, qualified_name
from .._wire.schema import BY_VALUE
from ..errors import UnsafePayloadError
from .values import Call, Global, short

REFUSED_LAYER_NAMES = ("Lambda", *configs.FOREIGN_LAYERS)


@dataclasses.dataclass
class Verdict:
    """Why safe mode refuses the payload (empty: it loads if the modules it names are imported),
    the Lambda layers found through custom objects, and callables worth a second look."""

    refusals: list[str] = dataclasses.field(default_factory=list)
    aliased_lambdas: list[str] = dataclasses.field(default_factory=list)
    flagged: list[str] = dataclasses.field(default_factory=list)


def judge(globals_named: list[tuple[str, str]], custom: Any, config: Any) -> Verdict:
    verdict = Verdict()
    for module, name in globals_named:
        if (module, name) in CALLABLE_GLOBALS or is_stdlib(module) or module not in sys.modules:
            continue  # allowed; refused outright (reported with the stream); or judged only where imported
        try:
            resolve_as_defined(module, name)
        except UnsafePayloadError as e:
            verdict.refusals.append(str(e).removeprefix("Safe mode refused ").rstrip("."))
    table = custom if isinstance(custom, dict) else {}
    for key, value in table.items():
        carried = carried_name(value)
        if carried is not None and not any(short(carried) in flagged for flagged in verdict.flagged):
            verdict.flagged.append(
                f"{short(carried)} is carried by value (its code is in the payload): safe mode refuses it "
                "unless allow_by_value=True, or the loading process's main script defines it"
            )
        if not isinstance(value, Global):
            continue
        named = f"{value.module}.{value.name}"
        if package_of(value.module) in KERAS_PACKAGES:
            verdict.refusals.append(f"custom object {short(key)} names Keras's own {named}")
        elif is_stdlib(value.module):
            verdict.refusals.append(f"custom object {short(key)} names the standard library's {named}")
        elif package_of(value.module) in LIBRARY_PACKAGES:
            verdict.flagged.append(
                f"custom object {short(key)} names {named}, of a library: safe mode loads it only if it is a class, "
                "or a function Keras registered or ships as an activation, loss, metric or op"
            )
    for ref in configs.object_refs(config):
        target = _through_table(ref, table)
        if target is None:
            continue
        refused = target.name.rpartition(".")[2]
        if package_of(target.module) in KERAS_PACKAGES and refused in REFUSED_LAYER_NAMES:
            inner = ref.get("config")
            layer = short(inner.get("name", "?") if isinstance(inner, dict) else "?")
            verdict.refusals.append(f"layer {layer} is a {refused}, named {short(ref.get('class_name'))}")
            if refused == "Lambda":
                verdict.aliased_lambdas.append(str(layer))
    return verdict


def carried_name(value: Any) -> str | None:
    """``module.qualname`` of a ``keras_pickle._format.by_value(module, qualname, data)`` call, else None."""
    if isinstance(value, Call) and isinstance(value.function, Global) and value.function.key == BY_VALUE:
        if isinstance(value.args, tuple) and len(value.args) == 3 and all(isinstance(a, str) for a in value.args[:2]):
            return qualified_name(InertReference(None, f"{value.args[0]}.{value.args[1]}"))
    return None


def _through_table(ref: dict, table: dict) -> Global | None:
    """The custom object Keras would use for ``ref`` (it consults custom objects first), as the stream names it."""
    key = configs.custom_object_key(ref)
    value = table.get(key) if isinstance(key, str) else None
    return value if isinstance(value, Global) else None
