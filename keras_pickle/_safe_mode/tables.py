"""Safe mode's vocabulary: every class and function Keras's own packages define that a payload may name,
with its role, and every other one with the reason it is refused. Data, read from ``vocabulary/*.json``.

The tables are generated from the installed Keras 3, KerasHub and tf-keras by
``tests/safe_mode/make_vocabulary.py`` and committed; ``tests/safe_mode/test_vocabulary.py`` reports every
public symbol of the installed packages they do not mention. What they do not list is refused: a class or
function added by a newer Keras stays refused until the tables list it (closed by default). Each entry is
keyed by the object's defining path (``module.qualname``), so ``loads`` (which resolves objects) and
``inspect`` (which reads names, without Keras) look up the same line. Imports no Keras.

Roles: ``build`` (a class Keras builds from its config: layers, models, losses, metrics, optimizers,
schedules, initializers, regularizers, constraints, dtype policies), ``op`` (an ``Operation`` node of a
Functional model, a computation on the tensors it is given), ``control_flow`` (an op that calls the
functions its arguments name: refused unless the caller passes ``allow_control_flow=True``),
``callback`` (refused unless ``allow_callbacks=True``), ``record`` (``History``), ``tensor`` (a pure
computation on tensors: an op, an activation, a loss or metric function). ``refused:<reason>``: refused,
with :data:`reasons`' text.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from .._wire import config_walk, dialect_traits
from .resolution import Unjudged, Unresolved
from .rules import ALLOW_CALLBACKS_ADVICE, KERAS3_IMPORTS

OWNED_PACKAGES = {
    **dict.fromkeys(KERAS3_IMPORTS, dialect_traits.KERAS3.name),
    dialect_traits.TF_KERAS.package: dialect_traits.TF_KERAS.name,
}
"""The packages Keras itself (either dialect) and KerasHub live in, with the table that lists what they define:
an object defined in one is allowed only as its table says."""

KERAS_ROLE = "keras"
"""Where Keras calls or builds what a node names with Keras's own arguments (a layer's config, an activation,
a loss, an initializer...)."""

ARGUMENT_ROLE = "argument"
"""Where the payload chooses the arguments it is called with: an op or layer node's call arguments, a wrapper's
``fn`` beside extra keyword arguments. Only :data:`TENSOR` functions and what the caller names may stand here."""

TENSOR = "tensor"
BUILT_CLASS_ROLES = frozenset({"build", "op", "record"})

NOT_LISTED = (
    "it is defined in {package} but keras_pickle's vocabulary for {dialect} (generated from {versions}) does not "
    "list it as a class Keras builds from a config or a computation on tensors; what the vocabulary does not "
    "list is refused. If you trust the source of this payload, name it yourself: "
    "keras_pickle.loads(data, custom_objects={{{key!r}: {path}}})"
)

CONTROL_FLOW_ADVICE = (
    "it is a control-flow op, which calls the functions its arguments name. If you trust the source of this "
    "payload, load it with keras_pickle.loads(data, allow_control_flow=True); each function it calls must still "
    "be one of Keras's tensor functions or named in custom_objects"
)

CALLBACK_ADVICE = f"it is a Keras callback. {ALLOW_CALLBACKS_ADVICE}"

ARGUMENT_ADVICE = (
    "it stands where the payload chooses the arguments it is called with, and there only Keras's computations on "
    "tensors and what the caller names may stand: registration says a function can be saved, not that any "
    "arguments are safe. If you trust it, name it yourself: keras_pickle.loads(data, custom_objects={{{key!r}: "
    "{path}}})"
)


class Named(NamedTuple):
    """An object known by its defining path only (the Keras-free inspector's view): judged by the tables."""

    path: str


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """One dialect's table: ``entries`` (defining path to role), ``public`` (public name to defining path),
    ``registered`` (Keras registry name to defining path), ``reasons``, ``generated_from`` (package versions)."""

    dialect: str
    entries: dict[str, str]
    public: dict[str, str]
    registered: dict[str, str]
    reasons: dict[str, str]
    generated_from: dict[str, str]

    def defining_path(self, name: str) -> str | None:
        """The defining path ``name`` (a defining path, a public name or a registered name) stands for."""
        if name in self.entries:
            return name
        return self.public.get(name) or self.registered.get(name)


@functools.cache
def vocabulary(dialect: str) -> Vocabulary:
    data = json.loads((Path(__file__).with_name("vocabulary") / dialect_traits.BY_NAME[dialect].vocabulary).read_text())
    return Vocabulary(
        dialect, data["entries"], data["public"], data.get("registered", {}), data["reasons"], data["generated_from"]
    )


def owning_dialect(module: str) -> str | None:
    """The dialect whose table lists what ``module`` defines, ``None`` for a module outside Keras's packages."""
    return OWNED_PACKAGES.get(module.split(".", 1)[0])


def role_of(path: str) -> str | None:
    """The role the tables give the object defined at ``path``; ``None`` where they do not list it."""
    dialect = owning_dialect(path)
    return None if dialect is None else vocabulary(dialect).entries.get(path)


def table_refusal(
    path: str, role: str, *, allow_callbacks: bool = False, allow_control_flow: bool = False
) -> str | None:
    """Why safe mode refuses the object Keras defines at ``path`` standing in ``role`` (:data:`KERAS_ROLE` or
    :data:`ARGUMENT_ROLE`); ``None`` if the tables allow it there."""
    dialect = owning_dialect(path)
    if dialect is None:
        return "it is not defined in Keras's packages, and the standard library is never named by a payload"
    table = vocabulary(dialect)
    listed = table.entries.get(path)
    module, _, name = path.rpartition(".")
    if listed is None:
        versions = ", ".join(f"{package} {version}" for package, version in table.generated_from.items())
        return NOT_LISTED.format(
            package=module.split(".", 1)[0], dialect=dialect, versions=versions, key=name, path=path
        )
    if listed.startswith("refused:"):
        return f"it {table.reasons[listed.partition(':')[2]]}"
    if role == ARGUMENT_ROLE and listed != TENSOR:
        return ARGUMENT_ADVICE.format(key=name, path=path)
    if listed == "control_flow":
        return None if allow_control_flow else CONTROL_FLOW_ADVICE
    if listed == "callback":
        return None if allow_callbacks else CALLBACK_ADVICE
    return None


BUILTIN_NAMESPACES = ("activations", "constraints", "initializers", "losses", "metrics", "optimizers", "regularizers")
"""Where Keras looks up a function or class a config places in module ``builtins``."""

LEGACY_HOMES = ("layers", "models", "src.models.functional", "src.engine.functional", "")
"""Where a dialect resolves a layer config that has no ``module``: its layer namespace and its model classes."""


def static_candidates(node: dict, dialect: str, spelt: list[str]) -> Iterator[Named | Unjudged]:
    """What ``node`` (spelt ``spelt``) names, found by name alone in the dialect's table, as the Keras-free
    inspector sees it: a :class:`Named` path the table judges (a name in Keras's packages that it does not list is
    refused), or :class:`~.names.Unjudged` for a module outside Keras's packages (judged where the payload
    loads: refused there unless registered, a Keras subclass or named by the caller)."""
    table, traits = vocabulary(dialect), dialect_traits.of(dialect)
    prefix = traits.package
    registered = [name for name in (node.get("registered_name"), *spelt) if isinstance(name, str)]
    for name in dict.fromkeys(registered):  # Keras's registry first, then the module
        if name in table.registered:
            yield Named(table.registered[name])
    module = node.get("module")
    if not (isinstance(module, str) and module):
        names = [f"{prefix}.{home}.{name}".replace("..", ".") for home in LEGACY_HOMES for name in spelt]
    elif module == "builtins":
        names = [f"{prefix}.{home}.{name}" for home in BUILTIN_NAMESPACES for name in spelt]
    else:
        module = traits.own_module(module)
        if owning_dialect(module) is None:
            if traits.dotted_class_names and any("." in name for name in config_walk.dotted_names(node)):
                yield Unresolved(f"{module}.{config_walk.dotted_names(node)[0]}")  # as names.dotted_attribute refuses
            elif module.split(".", 1)[0] in sys.stdlib_module_names or module == "builtins":
                yield Named(f"{module}.{spelt[0] if spelt else '?'}")  # a standard-library name: refused
            else:
                yield Unjudged(f"{module}.{spelt[0] if spelt else '?'}, defined outside Keras's packages")
            return
        names = [f"{module}.{name}" for name in spelt]
    for name in names:
        path = table.defining_path(name)
        if path is not None:
            yield Named(path)
            return
    if module == "builtins":  # not one of Keras's: Keras looks it up among custom and registered objects
        yield Unjudged(f"{spelt[0] if spelt else '?'}, a function Keras looks up among registered objects")
    elif names and module:
        yield Named(names[0])  # in Keras's packages, and not listed: refused


def unlisted(node: dict, dialect: str, custom_names: frozenset[str] = frozenset()) -> str | None:
    """The name in Keras's packages that ``node`` spells and the vocabulary does not list, if any: refused by
    ``loads`` and ``inspect`` alike, whether or not this process's Keras defines it; never a name of
    ``custom_names`` (the payload's and the caller's custom objects, which Keras looks up first)."""
    if node.get("class_name") == "function" and not isinstance(node.get("config"), str):
        return None  # Keras fails on it before it looks anything up
    if custom_names.intersection(config_walk.spellings(node)):
        return None
    for found in static_candidates(node, dialect, config_walk.spellings(node)):
        if isinstance(found, Named) and owning_dialect(found.path) and role_of(found.path) is None:
            return found.path
    return None
