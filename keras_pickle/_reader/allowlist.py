"""What a keras_pickle payload may name in safe mode: an allow-list, decided by :func:`refusal`.

Safe mode's one decision. The restricted reader asks it for every global of the stream, the
reconstructor for every custom object a payload carries and for every object a config could make
Keras or tf-keras resolve (:func:`judge_config`), and the inspector for what it can resolve. An
object is judged on what it is, never on its spelling nor on which package defines it: Keras's
own classes and the functions Keras vouches for, subclasses of Keras's base classes wherever they
are defined, and what the caller names are allowed; every other function, class or callable is
refused, whatever the loading process has imported. What needs Keras to decide (its base classes,
its refused layer kinds, which of its functions it vouches for, how it resolves a config's names)
comes from the caller: this module imports no Keras.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._wire import configs
from .._wire.reprs import bounded_repr
from .._wire.schema import RECONSTRUCTORS
from ..errors import LambdaLayerError, UnsafePayloadError

NUMPY_RECONSTRUCTION = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }
)
"""What numpy's own pickles of arrays, scalars and dtypes call."""

CODECS_ENCODE = ("_codecs", "encode")
"""How protocols 0-2 spell ``bytes``: ``_codecs.encode(text, "latin1")``."""

CALLABLE_GLOBALS = frozenset(RECONSTRUCTORS) | NUMPY_RECONSTRUCTION | {CODECS_ENCODE}
"""Globals safe mode lets the stream call (each checks its arguments)."""

EXPECTED_CALL_PREFIXES = (
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer",
    "numpy.dtype",
    "__setstate__ of the result of numpy.",
    *(f"{module}.{name}" for module, name in RECONSTRUCTORS),
)
"""Descriptions of the calls a payload's stream makes: numpy's and keras_pickle's reconstructors (each
checks its arguments when it runs)."""


def is_stdlib(module: str) -> bool:
    return module.split(".", 1)[0] in sys.stdlib_module_names or module == "builtins"


def refused_outright(module: str, name: str) -> bool:
    """Whether safe mode refuses this global whatever is imported: a standard-library callable it does not list."""
    return (module, name) not in CALLABLE_GLOBALS and is_stdlib(module)


def expected_call(description: str) -> bool:
    """Whether a call, as the inspector describes it, is one that numpy's pickles make."""
    return description.startswith(EXPECTED_CALL_PREFIXES)


KERAS_PACKAGES = ("keras", "tf_keras")
"""The packages Keras itself lives in: no payload's custom object stands for what they define."""


DESERIALIZERS = frozenset({"get", "serialize", "deserialize"})
"""Names in a Keras function namespace that look objects up or build them: never vouched for."""


def exported_functions(package: Any, namespaces: tuple[str, ...]) -> frozenset[int]:
    """``id()`` of every plain function ``package`` (Keras or tf-keras, passed in: nothing is imported
    here) exports in ``namespaces`` (``"activations"``, ``"losses"``...), :data:`DESERIALIZERS` aside."""
    return frozenset(
        id(value)
        for namespace in namespaces
        for name, value in vars(getattr(package, namespace)).items()
        if isinstance(value, types.FunctionType) and name not in DESERIALIZERS
    )


def package_of(module: str) -> str:
    return module.split(".", 1)[0]


@dataclasses.dataclass(frozen=True)
class GlobalsPolicy:
    """What safe mode lets a payload name beyond :data:`CALLABLE_GLOBALS`, as inert references.

    ``allowed_bases``: classes whose subclasses may be named, wherever they are defined.
    ``refused_bases``: classes whose subclasses may never be named, even where ``allowed_bases``
    admit them (Keras's Lambda layer and the layers that embed another format).
    ``vouched_function(f)``: whether Keras vouches for the plain function ``f``: one it ships as a
    built-in activation, loss, metric or op, or one registered with
    ``keras.saving.register_keras_serializable``. ``named_by_caller``: ``id()`` of the objects the
    loading code named itself (``custom_objects=``, a ``custom_object_scope`` it holds): always allowed.
    ``callback_bases``: callbacks, which act on files by design: refused unless ``allow_callbacks``,
    ``record_classes`` aside (``History``: plain records).
    """

    allowed_bases: tuple[type, ...]
    refused_bases: tuple[type, ...] = ()
    vouched_function: Callable[[Any], bool] = lambda function: False
    named_by_caller: frozenset[int] = frozenset()
    callback_bases: tuple[type, ...] = ()
    record_classes: tuple[type, ...] = ()
    allow_callbacks: bool = False
    own_packages: tuple[str, ...] = KERAS_PACKAGES


ALLOW_FUNCTION_ADVICE = (
    "If you trust it, register it with @keras.saving.register_keras_serializable() in the module that defines it "
    "(imported before loading), or name it yourself: keras_pickle.loads(data, custom_objects={{{key!r}: {path}}})"
)
"""The two ways to let safe mode load a plain function (both tested to work when followed)."""

ALLOW_CALLBACKS_ADVICE = (
    "Callbacks act on files by design (ModelCheckpoint writes where its config says, BackupAndRestore deletes "
    "its directory). If you trust the source of this payload, load it with "
    "keras_pickle.loads(data, allow_callbacks=True)"
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
    script under ``allow_by_value``, a ``defined_here`` token of this very process).

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
        return f"it is defined in the standard library ({defining}), which a keras_pickle payload never names"
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


Candidates = Callable[[dict], Iterable[tuple[Any, bool]]]
"""A dialect's resolver: every object its deserializer could resolve a config node to, each with
whether the payload legitimately carries it (see :func:`refusal`); it raises
:class:`UnsafePayloadError` for a name it would have to import a module to resolve."""


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


class Unresolved:
    """What :func:`dotted_attribute` answers for a name it cannot resolve as the deserializer would
    without running code: safe mode refuses it (it cannot judge what it cannot see)."""

    def __init__(self, dotted: str) -> None:
        self.dotted = dotted

    def __repr__(self) -> str:
        return f"Unresolved({self.dotted!r})"


def dotted_attribute(namespace: dict, dotted: str) -> Any:
    """What ``getattr(namespace[a], b)`` reaches for ``dotted`` = ``"a.b"``, as tf-keras resolves a dotted
    name in a module, computed without running anything; :class:`Unresolved` where that cannot be known.

    A name that is not in ``namespace`` reaches nothing (``None``: tf-keras finds nothing either). Known
    exactly, without running code: ``b`` in a module's own ``__dict__``, and a plain function, class or
    ``staticmethod`` in a class's own ``__dict__``. Everything else ``getattr`` could reach (an attribute of a
    function or an instance, an inherited or metaclass attribute, a descriptor, a module's lazy
    ``__getattr__``, which may import, and names with more than one dot, whose resolution no judge
    should guess) is :class:`Unresolved`, which safe mode refuses.
    """
    first, _, rest = dotted.partition(".")
    outer = namespace.get(first)
    if outer is None:
        return None
    if "." in rest or not rest:
        return Unresolved(dotted)
    inner = vars(outer).get(rest) if isinstance(outer, (types.ModuleType, type)) else None
    if isinstance(outer, type) and isinstance(inner, staticmethod):
        inner = inner.__func__
    if isinstance(inner, (types.ModuleType, type, types.FunctionType)):
        return inner
    return Unresolved(dotted)


def judge_config(config: Any, policy: GlobalsPolicy, candidates: Candidates, *, dialect: str = "Keras") -> None:
    """Raise the first of :func:`config_refusals`: what safe mode refuses in a decoded config."""
    for error in config_refusals(config, policy, candidates, dialect=dialect):
        raise error


def config_refusals(
    config: Any, policy: GlobalsPolicy, candidates: Candidates, *, dialect: str = "Keras"
) -> Iterator[UnsafePayloadError]:
    """Every refusal of a decoded config, in document order: what it names that :func:`refusal` refuses,
    at any depth and under any spelling (with or without ``module``, ``registered_name``, Keras's legacy
    spellings).

    Every node with a string ``class_name`` is judged: a Lambda or foreign-format layer named any way is
    refused by its name first (no lookup can make it safe); Python code stored anywhere else
    (:func:`keras_pickle._wire.configs.inline_code`, in any dict) is refused; then
    every object ``candidates`` says the dialect's deserializer could resolve the node to (with the
    payload's custom objects applied) is judged, so a name that resolves through a custom object, a
    registered name, Keras's legacy layer namespace or a module is refused wherever it leads. An
    error ``candidates`` raises (a module Keras would import) is one of the refusals.
    """
    for node in configs.iter_nodes(config):
        named = isinstance(node.get("class_name"), str)
        kind = configs.refused_layer_spelt(node) if named else None
        if kind is not None:
            yield _layer_refusal(node, kind, dialect)
            continue
        code = configs.inline_code(node)
        if code is not None:
            what = "an inline Python lambda" if code.field is None else f"a Python lambda stored as {code.field!r}"
            yield _trust_refusal(
                what,
                f"{what} in the {dialect} config: loading it would run the Python code stored in the payload",
                LambdaLayerError,
            )
            continue
        merged = configs.merged_module_field(node)
        if merged is not None:
            what = f"module {bounded_repr(merged[1])}"
            yield _trust_refusal(
                what,
                f"{what}, which the {dialect} config names as {merged[0]!r}: tf-keras would merge that module's "
                "whole namespace into its RNN cell-wrapper module for the rest of the process",
            )
            continue
        if not named:
            continue
        path = configs.vocabulary_path(node)
        if path is not None:
            what = f"vocabulary file {bounded_repr(path)}"
            yield _trust_refusal(
                what,
                f"the {what} of layer {bounded_repr(configs.layer_name(node))} in the {dialect} config: the layer "
                "would read that path (a local file or any URL its file system reaches) when it is built, a "
                "vocabulary file outside of the model archive (Keras's own safe mode refuses it too)",
            )
            continue
        try:
            for obj, carried in candidates(node):
                if isinstance(obj, Unresolved):
                    what = bounded_repr(obj.dotted)
                    yield UnsafePayloadError(
                        f"Safe mode refused {what}, which the {dialect} config names as {_spelt(node)}: "
                        f"{dialect} would resolve it by getattr on an object whose attribute safe mode cannot "
                        "read without running code (a function's or an instance's attribute, an inherited or "
                        "lazily imported one), so it cannot judge what would be built or called.",
                        what=what,
                    )
                    break
                if obj is None or isinstance(obj, types.ModuleType) or not callable(obj):
                    continue  # nothing Keras could build or call
                if isinstance(obj, type) and policy.refused_bases and issubclass(obj, policy.refused_bases):
                    closest = max((b for b in policy.refused_bases if issubclass(obj, b)), key=lambda b: len(b.__mro__))
                    yield _layer_refusal(node, closest.__name__, dialect, named=obj)
                    break
                reason = refusal(obj, policy, carried=carried)
                if reason is not None:
                    what = _qualified(obj)
                    yield UnsafePayloadError(
                        f"Safe mode refused {what}, which the {dialect} config names as {_spelt(node)}: {reason}.",
                        what=what,
                    )
                    break
        except UnsafePayloadError as error:
            yield error


def _layer_refusal(node: dict, kind: str, dialect: str, named: Any = None) -> UnsafePayloadError:
    layer = bounded_repr(configs.layer_name(node))
    spelt = named.__qualname__ if isinstance(named, type) else node.get("class_name")
    alias = "" if spelt == kind else f" (named {bounded_repr(spelt)})"
    what = f"{kind} layer {layer}"
    runs = configs.REFUSED_LAYERS.get(kind, "code stored in the payload")
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
