"""Safe mode's tf-keras facts: its base classes, what it vouches for, and how its deserializer
resolves a config's names.

tf-keras's deserializer resolves a config's ``module`` + ``class_name`` by importing any module and
taking any attribute of it, resolves module-less names at every depth, and keeps only Lambda
bytecode behind its safe mode. The decision is safe mode's one
(:func:`keras_pickle._reader.allowlist.refusal`, through ``judge_config``); this module gives it
tf-keras's bases, refused layers and vouched functions, and :func:`resolver`, every object tf-keras
could resolve a node to, refusing a name whose module is not imported (tf-keras would import it).
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Iterator
from typing import Any

from .._reader.allowlist import Candidates, dotted_attribute, exported_functions
from .._wire import configs
from .._wire.refs import is_carried, unwrap
from .._wire.reprs import bounded_repr
from ..errors import UnsafePayloadError
from . import classes

_PURE_NAMESPACES = ("activations", "losses", "metrics")
_MODULES = ("keras", "tf_keras")


def safe_mode_bases() -> tuple[type, ...]:
    """tf-keras's classes whose subclasses a payload may name (as safe mode's inert references)."""
    k = classes.tf_keras()
    return (
        k.layers.Layer,
        k.losses.Loss,
        k.metrics.Metric,
        k.optimizers.Optimizer,
        k.initializers.Initializer,
        k.regularizers.Regularizer,
        k.constraints.Constraint,
        k.optimizers.schedules.LearningRateSchedule,
        k.callbacks.Callback,
    )


def refused_layer_classes() -> dict[type, str]:
    """tf-keras layers whose loading runs code or another format stored in the config, and what it runs."""
    layers = classes.tf_keras().layers
    return {
        cls: runs
        for name, runs in configs.REFUSED_LAYERS.items()
        if isinstance(cls := getattr(layers, name, None), type)
    }


@functools.cache
def _pure_functions() -> frozenset[int]:
    return exported_functions(classes.tf_keras(), _PURE_NAMESPACES)


def _registry() -> Any:
    return classes.tf_keras().src.saving.object_registration


def registered_with_tf_keras(function: Any) -> bool:
    registry = _registry()
    name = registry._GLOBAL_CUSTOM_NAMES.get(function)
    return name is not None and registry._GLOBAL_CUSTOM_OBJECTS.get(name) is function


def vouched_function(function: Any) -> bool:
    """Whether tf-keras deserializes ``function`` as part of a model: a built-in activation, loss or
    metric, or a function registered with ``tf_keras.saving.register_keras_serializable``."""
    return id(function) in _pure_functions() or registered_with_tf_keras(function)


def named_by_caller() -> frozenset[int]:
    """``id()`` of the objects a ``tf_keras.saving.custom_object_scope`` the loading code holds names."""
    return frozenset(id(obj) for obj in _registry()._THREAD_LOCAL_CUSTOM_OBJECTS.__dict__.values())


def resolver(table: dict[str, Any], caller_objects: dict[str, Any]) -> Candidates:
    """Every object tf-keras's deserializer could resolve a config node to: custom objects (the payload's
    ``table``, the caller's, a held ``custom_object_scope``, the registry), tf-keras's layer namespaces
    (it resolves module-less names at every depth), its public API and built-in function modules, and
    the attribute of an imported module. tf-keras imports any module a config names: a module not
    imported is refused (safe mode never imports)."""
    namespaces = (vars(classes.tf_keras().layers), vars(classes.tf_keras().src.layers), _legacy_objects())

    def candidates(node: dict) -> Iterator[tuple[Any, bool]]:
        found = list(named(node))
        yield from found
        yield from _called_by_name(node, [obj for obj, _ in found if isinstance(obj, type)])

    def named(node: dict) -> Iterator[tuple[Any, bool]]:
        names = configs.spellings(node)
        scope = _registry()._THREAD_LOCAL_CUSTOM_OBJECTS.__dict__
        for name in names:
            for source in (table, caller_objects, scope, _registry()._GLOBAL_CUSTOM_OBJECTS):
                if name in source:
                    yield unwrap(source[name]), is_carried(source[name])
            if node["class_name"] != "function":
                for namespace in namespaces:
                    yield namespace.get(name), False
        module = node.get("module")
        if not (isinstance(module, str) and module):
            return
        if module in _MODULES or module.startswith(tuple(f"{m}." for m in _MODULES)):
            for name in names:
                yield _public_symbol(f"{module}.{name}"), False
        if module == "builtins":
            for namespace in classes.tf_keras().src.saving.serialization_lib.BUILTIN_MODULES:
                for name in names:
                    yield _public_symbol(f"keras.{namespace}.{name}"), False
            # Where none is found, tf-keras goes on to the builtins module itself, as below.
        tf_keras_module = "tf_" + module if module == "keras" or module.startswith("keras.") else module
        loaded = sys.modules.get(tf_keras_module)
        if loaded is None:
            what = f"{module}.{names[0] if names else '?'}"
            raise UnsafePayloadError(
                f"Safe mode refused {bounded_repr(what)}, named by the tf-keras config: tf-keras would import module "
                f"{bounded_repr(module)} to resolve it, and safe mode never imports modules.",
                what=what,
            )
        for name in names:
            yield vars(loaded).get(name), False
        for dotted in configs.dotted_names(node):
            yield dotted_attribute(vars(loaded), dotted), False

    return candidates


def _legacy_objects() -> dict[str, Any]:
    """The namespace tf-keras's layer deserializer resolves module-less class names in."""
    serialization = classes.tf_keras().src.layers.serialization
    serialization.populate_deserializable_objects()
    return dict(getattr(serialization.LOCAL, "ALL_OBJECTS", {}))


def _public_symbol(api_name: str) -> Any:
    from_tf = sys.modules.get("tensorflow.python.util.tf_export")
    return None if from_tf is None else from_tf.get_symbol_from_name(api_name)


TENSOR_OP_MODULES = frozenset(
    f"tensorflow.python.ops.{name}"
    for name in (
        "array_ops",
        "array_ops_stack",
        "gen_array_ops",
        "manip_ops",
        "gen_manip_ops",
        "tensor_getitem_override",
        "math_ops",
        "gen_math_ops",
        "special_math_ops",
        "gen_special_math_ops",
        "clip_ops",
        "sort_ops",
        "nn_ops",
        "gen_nn_ops",
        "nn_impl",
        "embedding_ops",
        "linalg_ops",
        "gen_linalg_ops",
        "linalg.linalg_impl",
        "gen_bitwise_ops",
        "gen_spectral_ops",
        "string_ops",
        "gen_string_ops",
        "image_ops_impl",
        "gen_image_ops",
        "random_ops",
        "gen_random_ops",
        "stateless_random_ops",
        "gen_stateless_random_ops",
        "gen_stateless_random_ops_v2",
        "sparse_ops",
        "gen_sparse_ops",
        "bincount_ops",
        "gen_count_ops",
        "histogram_ops",
        "check_ops",
        "numpy_ops.np_math_ops",
        "numpy_ops.np_array_ops",
        "ragged.ragged_tensor",
        "ragged.ragged_array_ops",
        "ragged.ragged_math_ops",
        "ragged.ragged_concat_ops",
        "ragged.ragged_getitem",
        "ragged.ragged_string_ops",
        "ragged.ragged_factory_ops",
        "ragged.ragged_functional_ops",
        "gen_ragged_array_ops",
        "gen_ragged_math_ops",
        "gen_ragged_conversion_ops",
    )
)
"""TensorFlow's modules of tensor computation: what tf-keras's op layers (``TFOpLambda``, ``SlicingOpLambda``,
``ClassMethod``) may call in safe mode. An allow-list: a TensorFlow function defined anywhere else (file and
``gfile`` I/O, ``tf.print``'s output streams, ``py_function``, ``load_op_library``, ``saved_model``, summaries,
lookup-table initializers that read files, resource and collective ops, ``tf.data``) is refused."""


def tensor_op(function: Any) -> bool:
    """Whether ``function`` (a TensorFlow API symbol, its decorators unwrapped) is defined in one of
    :data:`TENSOR_OP_MODULES`."""
    decorator = sys.modules.get("tensorflow.python.util.tf_decorator")
    target = decorator.unwrap(function)[1] if decorator is not None else function
    return isinstance(target, types.FunctionType) and target.__module__ in TENSOR_OP_MODULES


def _called_by_name(node: dict, classes_found: list[type]) -> Iterator[tuple[Any, bool]]:
    """What a tf-keras op layer calls by a name its config stores: ``TFOpLambda`` (and ``SlicingOpLambda``)
    a TensorFlow symbol, ``ClassMethod`` a class method of one, ``InstanceProperty`` and ``InstanceMethod`` an
    attribute of the tensor they are called on. Only a tensor computation (:func:`tensor_op`) or a public
    tensor attribute passes; anything else is refused here."""
    if not classes_found or "tf_keras.src.layers.core.tf_op_layer" not in sys.modules:
        return
    op_layers = sys.modules["tf_keras.src.layers.core.tf_op_layer"]
    inner = node.get("config") if isinstance(node.get("config"), dict) else {}
    for cls in classes_found:
        if issubclass(cls, op_layers.TFOpLambda):
            function, spelt = _public_symbol_named(inner.get("function")), inner.get("function")
        elif issubclass(cls, op_layers.ClassMethod):
            owner = _public_symbol_named(inner.get("cls_symbol"))
            method = inner.get("method_name")
            spelt = f"{inner.get('cls_symbol')}.{method}"
            if owner is None:
                continue  # tf-keras finds no class and fails
            found = vars(owner).get(method) if isinstance(owner, type) and isinstance(method, str) else None
            if not isinstance(found, classmethod):  # what tf-keras writes: a class method the class defines
                raise _op_refusal(cls, spelt, "something other than a class method its class defines")
            function = found.__func__
        elif issubclass(cls, op_layers.InstanceProperty):
            attribute = inner.get("attr_name")
            if isinstance(attribute, str) and attribute.isidentifier() and not attribute.startswith("_"):
                continue
            raise _op_refusal(cls, attribute, "an attribute of a tensor that is not public")
        else:
            continue
        if function is None:
            continue  # tf-keras finds nothing to call and fails
        if not tensor_op(function):
            raise _op_refusal(cls, spelt, "a TensorFlow function that is not a tensor computation")
        yield function, True


def _public_symbol_named(name: Any) -> Any:
    return _public_symbol(name) if isinstance(name, str) else None


def _op_refusal(cls: type, spelt: Any, what: str) -> UnsafePayloadError:
    named = f"{cls.__name__} calling {bounded_repr(spelt)}"
    return UnsafePayloadError(
        f"Safe mode refused tf-keras layer {named}: it names {what}, and a payload may make an op layer call "
        "only TensorFlow's tensor computations (math, arrays, nn, linalg, strings, images, random, ragged, "
        "sparse). If you trust the source of this payload, load it with keras_pickle.loads(data, safe_mode=False).",
        what=named,
    )
