"""Write safe mode's vocabulary: what a payload may name in each dialect, from the installed Keras.

    python tests/safe_mode/make_vocabulary.py [OUT]    # from the repository root, with TensorFlow,
                                                       # KerasHub and tf-keras installed

Writes ``keras3.json`` (Keras 3 and KerasHub) and ``tf_keras.json`` to OUT, by default the package's
``keras_pickle/_safe_mode/vocabulary/``.
Each table maps a class's or function's defining path (``module.qualname``) to its role, or to the
reason it is refused; every public symbol of the packages is mentioned, by its defining path or by its
public name (``public``: public name to defining path). ``generated_from`` records the versions read.
``tests/safe_mode/test_vocabulary.py`` checks the committed tables against the installed packages.

A class is classified by its bases, a function by where Keras exports it and by its signature: the
rules are the ``*_ROLES`` tables below, each with its reason. Run it again after upgrading Keras, and
read the diff: a new class or function is refused until the table lists it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

OUT = Path(__file__).resolve().parents[2] / "keras_pickle" / "_safe_mode" / "vocabulary"

CALLABLE_PARAMETERS = frozenset(
    {"f", "fn", "fun", "func", "pyfunc", "function", "functions", "fns", "branches", "true_fn", "false_fn", "cond",
     "body", "body_fun", "cond_fun", "loop_fn", "callable", "callback"}
)  # fmt: skip
"""Parameter names of ops and functions that take a function to call: what makes one higher-order."""

REASONS = {
    "lambda": "runs the Python code stored in the payload",
    "foreign": "embeds code or another format (a torch module, JAX or Flax functions, a SavedModel) and runs it",
    "not_built": "is a class Keras does not build from a config (a utility, a data pipeline, a file or network helper)",
    "not_tensor": "is a function that is not a computation on tensors (it reads, writes, loads, registers or builds)",
    "lookup": "looks an object up by name or builds one from a config: a payload never chooses what it resolves",
    "higher_order": "calls a function its arguments name: a payload would choose what it calls",
    "registered": "is a function KerasHub registers that is not a computation on tensors: registration says it can "
    "be saved, not that a payload may call it",
}
"""Why each kind of refused entry is refused, read after "it" (``tables.table_refusal``)."""

KERAS3_PACKAGES = ("keras", "keras_hub")
TF_KERAS_PACKAGES = ("tf_keras",)


def public_symbols(package: types.ModuleType) -> dict[str, object]:
    """Every public name of ``package``'s API modules (not ``src``), with its object."""
    found, stack, seen = {}, [package], set()
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        for name, value in vars(module).items():
            if name.startswith("_"):
                continue
            if isinstance(value, types.ModuleType):
                inside = value.__name__.startswith(package.__name__ + ".")
                if inside and ".src" not in value.__name__ and "._" not in value.__name__:
                    stack.append(value)
                continue
            found[f"{module.__name__}.{name}"] = value
    return found


BACKEND_MODULES = (
    "keras.src.backend.tensorflow.optimizer",
    "keras.src.backend.jax.optimizer",
    "keras.src.backend.torch.optimizers",
    *(f"keras.src.backend.torch.optimizers.torch_{name}"
      for name in ("adadelta", "adagrad", "adam", "adamax", "adamw", "lion", "nadam", "optimizer",
                   "parallel_optimizer", "rmsprop", "sgd")),
)  # fmt: skip
"""Modules of each backend that define classes a config names (a backend's own optimizer classes: a model
compiled on PyTorch names ``keras.src.backend.torch.optimizers.torch_adam.Adam``): imported, where that
backend is installed, whichever backend the generator runs on."""


def import_backend_modules() -> None:
    for name in BACKEND_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as error:
            print(f"not imported: {name} ({error})")


def defined_classes(packages: tuple[str, ...]) -> list[type]:
    """Every class defined in an imported module of ``packages``."""
    classes = []
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or name.split(".", 1)[0] not in packages:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                classes.append(value)
    return classes


def path(obj: object) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def higher_order(obj: object) -> bool:
    """Whether ``obj`` (an op class or a function) takes a function to call, by its parameters' names (every
    name ``keras.src.ops`` gives a callable parameter: ``f``, ``fn``, ``fun``, ``pyfunc``, ``branches``...)."""
    targets = [obj.__init__, getattr(obj, "call", None), getattr(obj, "compute_output_spec", None)]
    targets = targets if isinstance(obj, type) else [obj]
    names = set()
    for target in targets:
        try:
            names |= set(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            continue
    return bool(names & CALLABLE_PARAMETERS)


def classify_class(cls: type, rules: dict) -> str:
    """``cls``'s role, or ``"refused:<reason>"``."""
    for base, reason in rules["refused"]:
        if issubclass(cls, base):
            return f"refused:{reason}"
    if rules["records"] and issubclass(cls, rules["records"]):
        return "record"
    if issubclass(cls, rules["callbacks"]):
        return "callback"
    if rules["ops"] and issubclass(cls, rules["ops"]) and not issubclass(cls, rules["layers"]):
        return "control_flow" if higher_order(cls) else "op"
    if issubclass(cls, rules["built"]):
        return "build"
    return "refused:not_built"


def classify_function(function: types.FunctionType, public_names: list[str], rules: dict) -> str:
    if function.__name__ in ("get", "serialize", "deserialize"):
        return "refused:lookup"
    if path(function) in rules["registered_refused"]:
        return "refused:registered"
    if not any(name.rpartition(".")[0] in rules["tensor_namespaces"] for name in public_names):
        return "refused:not_tensor"
    return "refused:higher_order" if higher_order(function) else "tensor"


def table(packages: tuple[str, ...], rules: dict, versions: dict[str, str]) -> dict:
    symbols: dict[str, object] = {}
    for package in packages:
        symbols.update(public_symbols(sys.modules[package]))
    public_of: dict[int, list[str]] = {}
    for name, value in symbols.items():
        public_of.setdefault(id(value), []).append(name)
    entries: dict[str, str] = {}
    public: dict[str, str] = {}
    for cls in defined_classes(packages):
        role = classify_class(cls, rules)
        if role != "refused:not_built" or id(cls) in public_of:
            entries[path(cls)] = role
    for name, value in symbols.items():
        if isinstance(value, type):
            entries.setdefault(path(value), classify_class(value, rules))
        elif isinstance(value, types.FunctionType):
            entries.setdefault(path(value), classify_function(value, public_of[id(value)], rules))
        else:
            entries[name] = "refused:not_built"
            continue
        if path(value) != name:
            public[name] = path(value)
    return {
        "generated_from": versions,
        "reasons": REASONS,
        "entries": dict(sorted(entries.items())),
        "public": dict(sorted(public.items())),
        "registered": registered_names(packages),
    }


def registered_names(packages: tuple[str, ...]) -> dict[str, str]:
    """Each name Keras's registry holds for an object of ``packages``, with that object's defining path."""
    if packages == TF_KERAS_PACKAGES:
        from tf_keras.src.saving.object_registration import _GLOBAL_CUSTOM_OBJECTS as registry
    else:
        from keras.src.saving.object_registration import GLOBAL_CUSTOM_OBJECTS as registry
    return {
        name: path(value)
        for name, value in sorted(registry.items())
        if isinstance(value, (type, types.FunctionType)) and value.__module__.split(".", 1)[0] in packages
    }


def keras3_rules() -> dict:
    import keras
    from keras.src.ops.operation import Operation
    from keras.src.saving.keras_saveable import KerasSaveable

    built = (KerasSaveable, keras.initializers.Initializer, keras.regularizers.Regularizer,
             keras.constraints.Constraint, keras.optimizers.schedules.LearningRateSchedule, keras.DTypePolicy,
             keras.quantizers.Quantizer)  # fmt: skip
    foreign = [getattr(keras.layers, name) for name in ("TorchModuleWrapper", "JaxLayer", "FlaxLayer", "TFSMLayer")]
    return {
        "refused": [(keras.layers.Lambda, "lambda"), *((cls, "foreign") for cls in foreign)],
        "records": (keras.callbacks.History,),
        "callbacks": (keras.callbacks.Callback,),
        "ops": (Operation,),
        "layers": (keras.layers.Layer,),
        "built": built,
        "tensor_namespaces": {"keras.activations", "keras.losses", "keras.metrics", "keras.ops", "keras.ops.nn",
                              "keras.ops.numpy", "keras.ops.image", "keras.ops.linalg", "keras.ops.math",
                              "keras.ops.random", "keras.ops.core", "keras.ops.signal", "keras_hub.layers"},
        "registered_refused": set(),
    }  # fmt: skip


def tf_keras_rules() -> dict:
    import tf_keras

    built = (tf_keras.layers.Layer, tf_keras.losses.Loss, tf_keras.metrics.Metric, tf_keras.optimizers.Optimizer,
             tf_keras.optimizers.legacy.Optimizer, tf_keras.initializers.Initializer,
             tf_keras.regularizers.Regularizer, tf_keras.constraints.Constraint,
             tf_keras.optimizers.schedules.LearningRateSchedule, tf_keras.mixed_precision.Policy)  # fmt: skip
    return {
        "refused": [(tf_keras.layers.Lambda, "lambda")],
        "records": (tf_keras.callbacks.History,),
        "callbacks": (tf_keras.callbacks.Callback,),
        "ops": (),
        "layers": (tf_keras.layers.Layer,),
        "built": built,
        "tensor_namespaces": {"tf_keras.activations", "tf_keras.losses", "tf_keras.metrics"},
        "registered_refused": set(),
    }


def keras_hub_registered(rules: dict) -> None:
    """KerasHub's registered plain functions: refused unless they are tensor computations (activations)."""
    from keras.src.saving import object_registration

    for name, value in object_registration.GLOBAL_CUSTOM_OBJECTS.items():
        if isinstance(value, types.FunctionType) and name.startswith(("keras_hub>", "keras_nlp>")):
            if name.rpartition(">")[2] not in ("gelu_approximate",):
                rules["registered_refused"].add(path(value))


def write(out: Path, name: str, content: dict) -> None:
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(content, indent=0) + "\n")
    print(f"{name}: {len(content['entries'])} entries, {len(content['public'])} public names -> {out / name}.json")


def main() -> None:
    import importlib.metadata as metadata

    import keras  # noqa: F401
    import keras_hub  # noqa: F401

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    import_backend_modules()
    rules = keras3_rules()
    keras_hub_registered(rules)
    versions = {package: metadata.version(package.replace("_", "-")) for package in ("keras", "keras_hub")}
    write(out, "keras3", table(KERAS3_PACKAGES, rules, versions))
    import tf_keras  # noqa: F401

    write(out, "tf_keras", table(TF_KERAS_PACKAGES, tf_keras_rules(), {"tf_keras": metadata.version("tf-keras")}))


if __name__ == "__main__":
    main()
