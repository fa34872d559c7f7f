"""Safe mode's one decision, :func:`refusal`: whether a payload may name an object, and why not.

An object is judged on what it is and on the role it stands in, never on its spelling: what Keras's
packages define, as the vocabulary lists it (:mod:`.tables`); elsewhere, with the rules of
:mod:`.rules`, subclasses of Keras's base classes and registered functions where Keras calls them with
its own arguments; what the caller names, anywhere. Every other function, class or callable is refused,
whatever the loading process has imported. The restricted
unpickler asks it for every global of the stream, the reconstructor for every custom object and for
every object a config could make Keras or tf-keras resolve (:mod:`.config_judge`), and ``inspect`` for
what it can resolve. :class:`GlobalsPolicy` holds the rules' classes as this process has them
(:func:`policy_here`); what only a dialect can tell (which functions its registry holds, what the
caller's scope names) comes from that dialect's package. Imports no Keras.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from .resolution import named_classes, static_path
from .rules import (
    ALLOW_CALLBACKS_ADVICE,
    ALLOW_FUNCTION_ADVICE,
    ALLOWED_BASES,
    CALLABLE_GLOBALS,
    CALLBACK_BASES,
    EXPECTED_CALL_PREFIXES,
    FILE_READING_HOMES,
    FILE_READING_LAYERS,
    KERAS_PACKAGES,
    MODULE_MERGING_HOMES,
    MODULE_MERGING_LAYERS,
    RECORD_CLASSES,
    REFUSED_LAYER_HOMES,
    REFUSED_LAYERS,
    STANDARD_LIBRARY,
)
from .tables import ARGUMENT_ADVICE, ARGUMENT_ROLE, KERAS_ROLE, owning_dialect, table_refusal


def is_stdlib(module: str) -> bool:
    return module.split(".", 1)[0] in sys.stdlib_module_names or module == "builtins"


def package_of(module: str) -> str:
    return module.split(".", 1)[0]


def refused_outright(module: str, name: str) -> bool:
    """Whether safe mode refuses this global whatever is imported: a standard-library callable it does not list."""
    return (module, name) not in CALLABLE_GLOBALS and is_stdlib(module)


def expected_call(description: str) -> bool:
    """Whether a call, as the inspector describes it, is one of :data:`~.rules.CALLABLE_GLOBALS`."""
    return description.startswith(EXPECTED_CALL_PREFIXES)


@dataclasses.dataclass(frozen=True)
class GlobalsPolicy:
    """What safe mode lets a payload name beyond :data:`~.rules.CALLABLE_GLOBALS`, as inert references.

    What Keras's own packages define is judged by the vocabulary (:mod:`.tables`); the fields below judge
    everything else. ``allowed_bases``: classes whose subclasses may be named, wherever they are defined.
    ``refused_bases``: classes whose subclasses may never be named, even where ``allowed_bases`` admit them
    (Keras's Lambda layer and the layers that embed another format). ``registered(f)``: whether the plain
    function ``f`` is registered with ``keras.saving.register_keras_serializable`` (allowed where Keras calls
    it with its own arguments only). ``named_by_caller``: ``id()`` of the objects the loading code named
    itself (``custom_objects=``, a ``custom_object_scope`` it holds): always allowed. ``callback_bases``:
    callbacks, which act on files by design: refused unless ``allow_callbacks``, ``record_classes`` aside
    (``History``: plain records). ``allow_control_flow``: Keras's control-flow ops may be built.
    ``file_reading``: classes that read a file a string in their config names, with those fields;
    ``module_merging``: tf-keras's cell wrappers, which merge a module their config names into their own
    (:mod:`.config_judge` judges both).
    """

    allowed_bases: tuple[type, ...]
    refused_bases: tuple[type, ...] = ()
    registered: Callable[[Any], bool] = lambda function: False
    named_by_caller: frozenset[int] = frozenset()
    callback_bases: tuple[type, ...] = ()
    record_classes: tuple[type, ...] = ()
    allow_callbacks: bool = False
    allow_control_flow: bool = False
    own_packages: tuple[str, ...] = KERAS_PACKAGES
    file_reading: tuple[tuple[type, tuple[str, ...]], ...] = ()
    module_merging: tuple[type, ...] = ()


def _classes(paths: Iterable[str]) -> tuple[type, ...]:
    return tuple(cls for cls in map(static_path, paths) if isinstance(cls, type))


def policy_here(
    registered: Callable[[Any], bool],
    named_by_caller: frozenset[int],
    allow_callbacks: bool,
    allow_control_flow: bool = False,
) -> GlobalsPolicy:
    """Safe mode's policy in this process: the classes :mod:`.rules` names, in each Keras imported here
    (tf-keras's only where tf-keras is imported: nothing is imported for it), the functions ``registered(f)``
    says a registry holds, what the caller named, and the caller's ``allow_*`` switches."""
    file_reading = named_classes(FILE_READING_LAYERS, FILE_READING_HOMES)
    return GlobalsPolicy(
        allowed_bases=_classes(ALLOWED_BASES),
        refused_bases=tuple(named_classes(REFUSED_LAYERS, REFUSED_LAYER_HOMES)),
        registered=registered,
        named_by_caller=named_by_caller,
        callback_bases=_classes(CALLBACK_BASES),
        record_classes=_classes(RECORD_CLASSES),
        allow_callbacks=allow_callbacks,
        allow_control_flow=allow_control_flow,
        file_reading=tuple((cls, FILE_READING_LAYERS[name]) for cls, name in file_reading.items()),
        module_merging=tuple(named_classes(MODULE_MERGING_LAYERS, MODULE_MERGING_HOMES)),
    )


def is_keras_own(obj: Any, policy: GlobalsPolicy) -> bool:
    """Whether Keras itself (either dialect) defines ``obj``."""
    return package_of(getattr(obj, "__module__", "") or "") in policy.own_packages


def refusal(obj: Any, policy: GlobalsPolicy, *, carried: bool = False, role: str = KERAS_ROLE) -> str | None:
    """Why safe mode refuses to let a payload name ``obj`` standing in ``role``; ``None`` if it may. The one
    decision.

    Decided on what ``obj`` is (the module and name that define it, its type and bases, who names it),
    never on how the payload spelt it: the restricted reader asks it for every global, the reconstructor
    for every custom object and for every object a config could make Keras (or tf-keras) resolve, each
    with its role (:data:`~.tables.KERAS_ROLE`: Keras builds it or calls it with its own arguments;
    :data:`~.tables.ARGUMENT_ROLE`: the payload chooses the arguments). ``carried``: ``obj`` is one the
    payload's own writing process legitimately carries (a class or function of its main script under
    ``allow_by_value``, a ``defined_here`` token of this very process, a TensorFlow computation an op
    layer may call).

    Allowed: what the caller named, in any role; what Keras's own packages define, as the vocabulary
    lists it (:func:`~.tables.table_refusal`: classes Keras builds from a config, computations on
    tensors; in the argument role computations on tensors only); elsewhere, in the Keras role only, a
    subclass of one of ``allowed_bases`` (a user's layer), its refused layers and callbacks aside, and a
    plain function registered with Keras or carried. Everything else is refused: a standard-library
    object, any other function or class, any other kind of callable.
    """
    if id(obj) in policy.named_by_caller:
        return None
    defining = getattr(obj, "__module__", None)
    if not isinstance(defining, str) or is_stdlib(defining):
        return STANDARD_LIBRARY.format(module=defining)
    qualname = getattr(obj, "__qualname__", None)
    if owning_dialect(defining) is not None and isinstance(qualname, str):
        return table_refusal(
            f"{defining}.{qualname}",
            role,
            allow_callbacks=policy.allow_callbacks,
            allow_control_flow=policy.allow_control_flow,
        )
    path = f"{defining}.{qualname or '?'}"
    if role == ARGUMENT_ROLE and not carried:
        return ARGUMENT_ADVICE.format(key=getattr(obj, "__name__", "?"), path=path)
    if isinstance(obj, type):
        if policy.refused_bases and issubclass(obj, policy.refused_bases):
            return "it is (a subclass of) a Keras layer that runs code or another format stored in its config"
        if policy.callback_bases and issubclass(obj, policy.callback_bases):
            if policy.allow_callbacks or (policy.record_classes and issubclass(obj, policy.record_classes)):
                return None
            return f"it is a Keras callback. {ALLOW_CALLBACKS_ADVICE}"
        if issubclass(obj, policy.allowed_bases):
            return None
        return "it is a class that is not a Keras class"
    if isinstance(obj, types.FunctionType):
        if carried or policy.registered(obj):
            return None
        return (
            "it is a plain function that is neither one of Keras's computations on tensors nor registered with "
            "Keras, and that the caller did not name; safe mode never lets a payload choose a function to call, "
            "whatever package defines it. " + ALLOW_FUNCTION_ADVICE.format(key=obj.__name__, path=path)
        )
    return f"it is a {type(obj).__name__}, neither a Keras class nor a plain Python function"


KERAS_FREE_POLICY = GlobalsPolicy(allowed_bases=(object,))
"""The policy where no Keras is loaded: what Keras's packages define is judged by the vocabulary all the same;
other classes are not told apart (a Keras subclass or not: judged where the payload loads)."""


Candidates = Callable[[dict], Iterable[tuple[Any, bool]]]
"""A dialect's resolver: every object its deserializer could resolve a config node to, each with
whether the payload legitimately carries it (see :func:`refusal`); it raises
:class:`~keras_pickle.UnsafePayloadError` for a name it would have to import a module to resolve."""
