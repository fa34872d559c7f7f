"""Safe mode's one decision, :func:`refusal`: whether a payload may name an object, and why not.

An object is judged on what it is, never on its spelling nor on which package defines it, with the
rules of :mod:`.rules`: Keras's own classes and the functions Keras vouches for, subclasses of
Keras's base classes wherever they are defined, and what the caller names are allowed; every other
function, class or callable is refused, whatever the loading process has imported. The restricted
unpickler asks it for every global of the stream, the reconstructor for every custom object and for
every object a config could make Keras or tf-keras resolve (:mod:`.configs`), and ``inspect`` for
what it can resolve. :class:`GlobalsPolicy` holds the rules' classes as this process has them
(:func:`policy_here`); what only a dialect can tell (which functions its registry holds, what the
caller's scope names) comes from that dialect's package. Imports no Keras.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from .names import named_classes, static_path
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
    NEVER_VOUCHED,
    RECORD_CLASSES,
    REFUSED_LAYER_HOMES,
    REFUSED_LAYERS,
    STANDARD_LIBRARY,
    VOUCHED_NAMESPACES,
)


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

    ``allowed_bases``: classes whose subclasses may be named, wherever they are defined.
    ``refused_bases``: classes whose subclasses may never be named, even where ``allowed_bases``
    admit them (Keras's Lambda layer and the layers that embed another format).
    ``vouched_function(f)``: whether Keras vouches for the plain function ``f``: one it ships as a
    built-in activation, loss, metric or op, or one registered with
    ``keras.saving.register_keras_serializable``. ``named_by_caller``: ``id()`` of the objects the
    loading code named itself (``custom_objects=``, a ``custom_object_scope`` it holds): always allowed.
    ``callback_bases``: callbacks, which act on files by design: refused unless ``allow_callbacks``,
    ``record_classes`` aside (``History``: plain records). ``file_reading``: classes that read a file a
    string in their config names, with those fields; ``module_merging``: tf-keras's cell wrappers, which
    merge a module their config names into their own (:mod:`.configs` judges both).
    """

    allowed_bases: tuple[type, ...]
    refused_bases: tuple[type, ...] = ()
    vouched_function: Callable[[Any], bool] = lambda function: False
    named_by_caller: frozenset[int] = frozenset()
    callback_bases: tuple[type, ...] = ()
    record_classes: tuple[type, ...] = ()
    allow_callbacks: bool = False
    own_packages: tuple[str, ...] = KERAS_PACKAGES
    file_reading: tuple[tuple[type, tuple[str, ...]], ...] = ()
    module_merging: tuple[type, ...] = ()


def _classes(paths: Iterable[str]) -> tuple[type, ...]:
    return tuple(cls for cls in map(static_path, paths) if isinstance(cls, type))


def policy_here(
    registered: Callable[[Any], bool], named_by_caller: frozenset[int], allow_callbacks: bool
) -> GlobalsPolicy:
    """Safe mode's policy in this process: the classes :mod:`.rules` names, in each Keras imported here
    (tf-keras's only where tf-keras is imported: nothing is imported for it), the functions Keras exports in
    :data:`~.rules.VOUCHED_NAMESPACES` or ``registered(f)`` says its registry holds, what the caller named."""
    exported = frozenset().union(*(_exported(namespace) for namespace in VOUCHED_NAMESPACES))

    def vouched(function: Any) -> bool:
        return id(function) in exported or registered(function)

    file_reading = named_classes(FILE_READING_LAYERS, FILE_READING_HOMES)
    return GlobalsPolicy(
        allowed_bases=_classes(ALLOWED_BASES),
        refused_bases=tuple(named_classes(REFUSED_LAYERS, REFUSED_LAYER_HOMES)),
        vouched_function=vouched,
        named_by_caller=named_by_caller,
        callback_bases=_classes(CALLBACK_BASES),
        record_classes=_classes(RECORD_CLASSES),
        allow_callbacks=allow_callbacks,
        file_reading=tuple((cls, FILE_READING_LAYERS[name]) for cls, name in file_reading.items()),
        module_merging=tuple(named_classes(MODULE_MERGING_LAYERS, MODULE_MERGING_HOMES)),
    )


def _exported(namespace: str) -> frozenset[int]:
    module = static_path(namespace)
    return _exported_by(module) if isinstance(module, types.ModuleType) else frozenset()


@functools.cache
def _exported_by(module: types.ModuleType) -> frozenset[int]:
    """``id()`` of every plain function a Keras namespace module exports, :data:`~.rules.NEVER_VOUCHED` aside."""
    return frozenset(
        id(value)
        for name, value in vars(module).items()
        if isinstance(value, types.FunctionType) and name not in NEVER_VOUCHED
    )


def is_keras_own(obj: Any, policy: GlobalsPolicy) -> bool:
    """Whether Keras itself (either dialect) defines ``obj``."""
    return package_of(getattr(obj, "__module__", "") or "") in policy.own_packages


def refusal(obj: Any, policy: GlobalsPolicy, *, carried: bool = False) -> str | None:
    """Why safe mode refuses to let a payload name ``obj``; ``None`` if it may. The one decision.

    Decided on what ``obj`` is (its type, its bases, the module that defines it, who vouches for it),
    never on how the payload spelt it or which package it comes from: the restricted reader asks it
    for every global, the reconstructor for every custom object and for every object a config could
    make Keras (or tf-keras) resolve, and ``inspect`` for what it can resolve. ``carried``: ``obj`` is
    one the payload's own writing process legitimately carries (a class or function of its main
    script under ``allow_by_value``, a ``defined_here`` token of this very process, a TensorFlow
    computation an op layer may call).

    Allowed: what the caller named; Keras's own classes but its refused layers and callbacks; a
    subclass of one of ``allowed_bases`` wherever it is defined; a plain function Keras vouches for
    (a built-in, or registered) or that the payload carries. Everything else is refused: a plain
    function of any other package, whatever this process has imported, a standard-library object,
    any other kind of callable.
    """
    if id(obj) in policy.named_by_caller:
        return None
    defining = getattr(obj, "__module__", None)
    if not isinstance(defining, str) or is_stdlib(defining):
        return STANDARD_LIBRARY.format(module=defining)
    if isinstance(obj, type):
        if policy.refused_bases and issubclass(obj, policy.refused_bases):
            return "it is (a subclass of) a Keras layer that runs code or another format stored in its config"
        if policy.callback_bases and issubclass(obj, policy.callback_bases):
            if policy.allow_callbacks or (policy.record_classes and issubclass(obj, policy.record_classes)):
                return None
            return f"it is a Keras callback. {ALLOW_CALLBACKS_ADVICE}"
        if is_keras_own(obj, policy) or issubclass(obj, policy.allowed_bases):
            return None
        return "it is a class that is not a Keras class"
    if isinstance(obj, types.FunctionType):
        if carried or policy.vouched_function(obj):
            return None
        path = f"{defining}.{getattr(obj, '__qualname__', '?')}"
        return (
            "it is a plain function that Keras neither ships as a built-in activation, loss, metric or op nor has "
            "registered, and that the caller did not name; safe mode never lets a payload choose a function "
            "to call, whatever package defines it. " + ALLOW_FUNCTION_ADVICE.format(key=obj.__name__, path=path)
        )
    return f"it is a {type(obj).__name__}, neither a Keras class nor a plain Python function"


KERAS_FREE_POLICY = GlobalsPolicy(
    allowed_bases=(object,), vouched_function=lambda f: package_of(getattr(f, "__module__", "")) in KERAS_PACKAGES
)
"""The inspector's policy where keras_pickle's Keras level is not loaded: classes are not told apart (a Keras
subclass or not: judged where the payload loads), Keras's own functions are taken as vouched for."""


Candidates = Callable[[dict], Iterable[tuple[Any, bool]]]
"""A dialect's resolver: every object its deserializer could resolve a config node to, each with
whether the payload legitimately carries it (see :func:`refusal`); it raises
:class:`~keras_pickle.UnsafePayloadError` for a name it would have to import a module to resolve."""


_policy_provider: list[tuple[Callable[[], GlobalsPolicy], Callable[[dict, str], Candidates]]] = []


def provide_policy(policy: Callable[[], GlobalsPolicy], resolver: Callable[[dict, str], Candidates]) -> None:
    """Register how this process builds safe mode's policy and a dialect's resolver (``resolver(table,
    dialect)``; keras_pickle's Keras level does, on import), so that the Keras-free inspector judges with
    them where they are loaded, without importing them."""
    _policy_provider[:] = [(policy, resolver)]


def current_policy() -> tuple[GlobalsPolicy, Callable[[dict, str], Candidates]] | None:
    """The policy and resolver ``keras_pickle.loads`` would use here now, if keras_pickle's Keras level is loaded."""
    if not _policy_provider:
        return None
    policy, resolver = _policy_provider[0]
    return policy(), resolver
