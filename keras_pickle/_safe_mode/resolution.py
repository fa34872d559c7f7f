"""How a name a payload spells resolves, computed without running or importing anything.

Everything is looked up statically in what this process has already imported (``sys.modules``; a
module's lazy ``__getattr__`` never runs): :func:`resolve_as_defined`, a global of the stream as the
restricted unpickler resolves it; :func:`dotted_attribute`, ``"a.b"`` in a module as tf-keras resolves
it; :func:`module_candidates`, what a config node's ``module`` makes a dialect's deserializer find;
:func:`op_layer_calls`, what a tf-keras op layer would call; :func:`static_path` and
:func:`named_classes`, the classes :mod:`.rules` names. What cannot be known without running code is
:class:`Unresolved` (refused); what this process cannot look up without importing is :class:`Unjudged`
(only the Keras-free inspector meets it: judged where the payload loads).
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from .._wire import config_walk, dialect_traits
from .._wire.reprs import bounded_repr
from .._wire.schema import DIALECT_KERAS3, DIALECT_TF_KERAS
from ..errors import UnsafePayloadError
from .rules import KERAS3_IMPORTS, OP_LAYERS, OP_LAYERS_MODULE, REFUSED_TENSOR_OPS, TENSOR_OP_MODULES


def static_path(dotted: str) -> Any:
    """The object at ``dotted`` (``package.attribute...``), each step read from a ``__dict__``; ``None``
    where the package is not imported or a step is missing."""
    first, *rest = dotted.split(".")
    found: Any = sys.modules.get(first)
    for part in rest:
        found = vars(found).get(part) if isinstance(found, (types.ModuleType, type)) else None
    return found


def named_classes(names: Iterable[str], homes: Iterable[str]) -> dict[type, str]:
    """Each class named in ``names`` that an imported module of ``homes`` defines, with its name."""
    found = {}
    for home in homes:
        module = sys.modules.get(home)
        for name in names if isinstance(module, types.ModuleType) else ():
            cls = vars(module).get(name)
            if isinstance(cls, type):
                found.setdefault(cls, name)
    return found


def resolve_as_defined(module: str, name: str) -> Any:
    """The class or function that ``module`` defines under the qualified name ``name``; else refused.

    Only a module already in ``sys.modules``, looked up statically (a lazy ``__getattr__`` never
    runs); a dotted ``name`` descends through classes only, never through another module
    (``keras_pickle._safe_mode.resolution`` + ``inspect.os.system`` is refused); and the object found must
    say it is defined there under that name (its ``__module__`` is that module, or the same
    module object as the main script's ``__main__`` / ``__mp_main__``, and its ``__qualname__`` is
    ``name``), so an alias one module keeps of another's object never resolves.
    """
    qualified = f"{module}.{name}"
    loaded = sys.modules.get(module)
    if not isinstance(loaded, types.ModuleType):
        raise UnsafePayloadError(
            f"Safe mode refused global {qualified}: module '{module}' is not imported, and "
            "safe mode never imports modules. Import it first if you trust it, or load "
            "with safe_mode=False.",
            what=qualified,
        )
    target: Any = loaded
    for part in name.split("."):
        if target is not loaded and not isinstance(target, type):
            raise UnsafePayloadError(
                f"Safe mode refused global {qualified}: it reaches {part!r} through a "
                f"{type(target).__name__}, and a global resolves only through the classes its module defines.",
                what=qualified,
            )
        target = inspect.getattr_static(target, part, None)
        if target is None:
            raise UnsafePayloadError(f"Safe mode refused global {qualified}: no such attribute.", what=qualified)
    defining = getattr(target, "__module__", None)
    same_module = isinstance(defining, str) and sys.modules.get(defining) is loaded
    if not (same_module and getattr(target, "__qualname__", None) == name):
        raise UnsafePayloadError(
            f"Safe mode refused global {qualified}: the object found there is "
            f"{bounded_repr(defining)}.{bounded_repr(getattr(target, '__qualname__', None))}, defined elsewhere "
            "(a global resolves only to what its module defines under that name).",
            what=qualified,
        )
    return target


class Unresolved:
    """What :func:`dotted_attribute` answers for a name it cannot resolve as the deserializer would
    without running code: safe mode refuses it (it cannot judge what it cannot see)."""

    def __init__(self, dotted: str) -> None:
        self.dotted = dotted

    def __repr__(self) -> str:
        return f"Unresolved({self.dotted!r})"


class Unjudged(NamedTuple):
    """What this process cannot look up without importing (a module, TensorFlow): the Keras-free inspector
    reports it as judged where the payload loads; anything else that meets it refuses."""

    description: str


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


def imported_module(module: Any, dialect: str) -> str | None:
    """The module a dialect's deserializer imports to resolve a node whose ``module`` is ``module``: tf-keras
    any module (``keras.*`` as ``tf_keras.*``), Keras 3 only those of :data:`~.rules.KERAS3_IMPORTS`;
    ``None`` where it imports none."""
    if not (isinstance(module, str) and module):
        return None
    traits = dialect_traits.of(dialect)
    if traits.imports_any_module:
        return traits.own_module(module)
    return module if module.split(".", 1)[0] in KERAS3_IMPORTS else None


_NOT_IMPORTED = {
    DIALECT_KERAS3: "Safe mode refused {what}, named by the Keras config: its module is not imported, Keras would "
    "import it to resolve the name, and safe mode never imports modules. Import it first if you trust it.",
    DIALECT_TF_KERAS: "Safe mode refused {what}, named by the tf-keras config: tf-keras would import module "
    "{module} to resolve it, and safe mode never imports modules.",
}


def module_candidates(node: dict, dialect: str, *, missing: str = "refuse") -> Iterator[tuple[Any, bool]]:
    """What ``node``'s ``module`` makes the dialect's deserializer find there, each spelling and each dotted
    name (:func:`dotted_attribute`), with ``False`` (the payload carries none of it). A module it would import
    raises :class:`UnsafePayloadError` (``missing="refuse"``: safe mode never imports) or yields
    :class:`Unjudged` (``missing="unjudged"``, the Keras-free inspector's view of a process that may have it)."""
    name = imported_module(node.get("module"), dialect)
    if name is None:
        return
    names = config_walk.spellings(node)
    loaded = sys.modules.get(name)
    if loaded is None:
        what = f"{node['module']}.{names[0] if names else '?'}"
        if missing != "refuse":
            yield Unjudged(f"{bounded_repr(what)}, in a module this process has not imported"), False
            return
        message = _NOT_IMPORTED[dialect].format(what=bounded_repr(what), module=bounded_repr(node["module"]))
        raise UnsafePayloadError(message, what=what)
    for spelt in names:
        yield vars(loaded).get(spelt), False
    for dotted in config_walk.dotted_names(node):
        yield dotted_attribute(vars(loaded), dotted), False


# --------------------------------------------------------------------------
# tf-keras's op layers
# --------------------------------------------------------------------------

_OP_KIND = {"SlicingOpLambda": "TFOpLambda", "InstanceMethod": "InstanceProperty"}


def op_layer_kinds(classes: Iterable[type]) -> list[tuple[str, str]]:
    """``(name, kind)`` of each of ``classes`` that is a tf-keras op layer (``kind``: ``TFOpLambda``,
    ``ClassMethod`` or ``InstanceProperty``, whose subclasses do as they do), where tf-keras has them."""
    op_layers = sys.modules.get(OP_LAYERS_MODULE)
    if op_layers is None:
        return []
    kinds = [(kind, vars(op_layers).get(kind)) for kind in ("TFOpLambda", "ClassMethod", "InstanceProperty")]
    return [
        (cls.__name__, next(kind for kind, base in kinds if isinstance(base, type) and issubclass(cls, base)))
        for cls in classes
        if any(isinstance(base, type) and issubclass(cls, base) for _, base in kinds)
    ]


def op_layer_spelt(node: dict) -> list[tuple[str, str]]:
    """``(name, kind)`` for each op layer of :data:`~.rules.OP_LAYERS` ``node`` names by one of its spellings:
    the Keras-free inspector's view (:func:`op_layer_kinds` judges the classes tf-keras would build)."""
    return [(name, _OP_KIND.get(name, name)) for name in config_walk.spellings(node) if name in OP_LAYERS]


def public_symbol(api_name: Any) -> Any:
    """TensorFlow's API symbol ``api_name`` (``"math.add"``), as tf-keras's op layers find it; ``None`` where
    it names none; :class:`Unjudged` where TensorFlow is not imported."""
    if not isinstance(api_name, str):
        return None
    from_tf = sys.modules.get("tensorflow.python.util.tf_export")
    if from_tf is None:
        return Unjudged(f"TensorFlow's {bounded_repr(api_name)}, TensorFlow not being imported here")
    return from_tf.get_symbol_from_name(api_name)


def tensor_op_refusal(function: Any) -> str | None:
    """Why an op layer may not call ``function`` (a TensorFlow API symbol, its decorators unwrapped); ``None``
    if it is a tensor computation: a function of :data:`~.rules.TENSOR_OP_MODULES` that
    :data:`~.rules.REFUSED_TENSOR_OPS` does not list."""
    decorator = sys.modules.get("tensorflow.python.util.tf_decorator")
    target = decorator.unwrap(function)[1] if decorator is not None else function
    if not (isinstance(target, types.FunctionType) and target.__module__ in TENSOR_OP_MODULES):
        return "a TensorFlow function that is not a tensor computation"
    refused = REFUSED_TENSOR_OPS.get((target.__module__, target.__name__))
    return None if refused is None else f"a TensorFlow function that acts outside the tensors it is given ({refused})"


def op_layer_calls(layers: list[tuple[str, str]], node: dict) -> Iterator[tuple[Any, bool]]:
    """What tf-keras op layers (``(name, kind)``, from :func:`op_layer_kinds` or :func:`op_layer_spelt`) call by
    a name ``node``'s config stores: ``TFOpLambda`` (and ``SlicingOpLambda``) a TensorFlow symbol,
    ``ClassMethod`` a class method of one, ``InstanceProperty`` and ``InstanceMethod`` an attribute of the
    tensor they are called on. Only a tensor computation (:func:`tensor_op_refusal`) or a public tensor
    attribute passes, yielded as one the payload may name; anything else raises :class:`UnsafePayloadError`."""
    inner = node.get("config") if isinstance(node.get("config"), dict) else {}
    for name, kind in layers:
        if kind == "TFOpLambda":
            function, spelt = public_symbol(inner.get("function")), inner.get("function")
        elif kind == "ClassMethod":
            owner = public_symbol(inner.get("cls_symbol"))
            method = inner.get("method_name")
            spelt = f"{inner.get('cls_symbol')}.{method}"
            if isinstance(owner, Unjudged):
                yield owner, False  # judged where TensorFlow is imported
                continue
            if owner is None:
                continue  # tf-keras finds no class and fails
            found = vars(owner).get(method) if isinstance(owner, type) and isinstance(method, str) else None
            if not isinstance(found, classmethod):  # what tf-keras writes: a class method the class defines
                raise _op_refusal(name, spelt, "something other than a class method its class defines")
            function = found.__func__
        else:
            attribute = inner.get("attr_name")
            if isinstance(attribute, str) and attribute.isidentifier() and not attribute.startswith("_"):
                continue
            raise _op_refusal(name, attribute, "an attribute of a tensor that is not public")
        if isinstance(function, Unjudged):
            yield function, False  # judged where TensorFlow is imported
            continue
        if function is None:
            continue  # tf-keras finds nothing to call and fails
        refused = tensor_op_refusal(function)
        if refused is not None:
            raise _op_refusal(name, spelt, refused)
        yield function, True


def _op_refusal(layer: str, spelt: Any, what: str) -> UnsafePayloadError:
    named = f"{layer} calling {bounded_repr(spelt)}"
    return UnsafePayloadError(
        f"Safe mode refused tf-keras layer {named}: it names {what}, and a payload may make an op layer call "
        "only TensorFlow's tensor computations (math, arrays, nn, linalg, strings, images, random, ragged, "
        "sparse). If you trust the source of this payload, load it with keras_pickle.loads(data, safe_mode=False).",
        what=named,
    )
