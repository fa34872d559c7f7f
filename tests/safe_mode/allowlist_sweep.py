"""Run in a fresh process by tests/safe_mode/test_allowlist.py: a realistic worker's imports, then safe mode's
decision on every plain function they made reachable, and hostile payloads naming a sample of them.

Prints one JSON object: counts, and every function the decision or a load let through that it should
not have. Generated from ``sys.modules``, never from a list of names: a package added to the
environment is covered without an edit.
"""

from __future__ import annotations

import copy
import importlib
import json
import sys
import types

WORKER_IMPORTS = ("keras_hub", "distributed", "ray", "sklearn", "mlflow", "click", "scikeras")
"""What a Dask, Ray, scikit-learn, MLflow or KerasHub worker imports besides Keras and its backend."""


def main() -> None:
    imported = []
    for name in WORKER_IMPORTS:
        try:
            importlib.import_module(name)
            imported.append(name)
        except ImportError:
            pass
    import keras
    import redteam

    import keras_pickle
    from keras_pickle._rebuild.vetting import globals_policy
    from keras_pickle._safe_mode.decision import is_stdlib, refusal
    from keras_pickle._safe_mode.resolution import resolve_as_defined

    functions = {}
    for module_name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or is_stdlib(module_name):
            continue
        for name, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType) and value.__module__ == module_name and value.__qualname__ == name:
                try:
                    resolve_as_defined(module_name, name)
                except Exception:
                    continue
                functions[f"{module_name}.{name}"] = value
    from keras_pickle._safe_mode import tables

    policy = globals_policy()

    def vouched_function(f) -> bool:
        """A computation on tensors the vocabulary lists, or a function registered outside Keras's packages."""
        if tables.owning_dialect(f.__module__) is not None:
            return tables.role_of(f"{f.__module__}.{f.__qualname__}") == tables.TENSOR
        return policy.registered(f)

    let_through = [path for path, f in functions.items() if refusal(f, policy) is None and not vouched_function(f)]
    refused_vouched = [path for path, f in functions.items() if refusal(f, policy) is not None and vouched_function(f)]

    # End to end: per top-level package, its first function refused by the decision, in each place Keras calls one.
    sample = {}
    for _path, f in sorted(functions.items()):
        package = f.__module__.split(".")[0]
        if package not in sample and refusal(f, policy) is not None:
            sample[package] = f
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    header, body = redteam.payload_parts(model)
    loaded, wrong_error = [], []
    loads = 0
    for f in sample.values():
        for place in PLACES:
            for spelling in SPELLINGS:
                ref = spelling(f)
                edited = place(json.loads(body["config"]), ref)
                table = {f.__name__: redteam.GlobalRef(f.__module__, f.__qualname__)}
                data = redteam.craft(header, {**body, "config": json.dumps(edited), "custom_objects": table})
                loads += 1
                try:
                    keras_pickle.loads(data)
                    loaded.append(f"{f.__module__}.{f.__qualname__} as {place.__name__}")
                except keras_pickle.UnsafePayloadError:
                    pass
                except Exception as e:  # noqa: BLE001
                    wrong_error.append(
                        f"{f.__module__}.{f.__qualname__} as {place.__name__}: {type(e).__name__}: {e}"[:300]
                    )
    print(
        json.dumps(
            {
                "imported": imported,
                "functions": len(functions),
                "packages": len(sample),
                "loads": loads,
                "let_through": let_through[:50],
                "n_let_through": len(let_through),
                "refused_vouched": refused_vouched[:50],
                "loaded": loaded[:50],
                "wrong_error": wrong_error[:50],
            }
        )
    )


def _fn(f, module=True):
    ref = {"class_name": "function", "config": f.__name__}
    if module:
        ref.update(module=f.__module__, registered_name=f.__name__)
    return ref


SPELLINGS = (lambda f: _fn(f), lambda f: _fn(f, module=False))


def _layer(config):
    return config["config"]["layers"][-1]["config"]


def layer_field(field: str):
    """A place: ``field`` of the model's last layer (an activation, initializer, regularizer, constraint)."""

    def place(config, ref):
        _layer(config)[field] = ref
        return config

    place.__name__ = field
    return place


activation, initializer, regularizer, constraint = map(
    layer_field, ("activation", "kernel_initializer", "kernel_regularizer", "kernel_constraint")
)


def learning_rate(config, ref):
    config["compile_config"]["optimizer"]["config"]["learning_rate"] = ref
    return config


def loss(config, ref):
    config["compile_config"]["loss"] = ref
    return config


def metric(config, ref):
    config["compile_config"]["metrics"] = [ref]
    return config


def lambda_function(config, ref):
    import redteam

    inner = redteam.lambda_layer_config("lam", "x")
    inner["function"] = copy.deepcopy(ref)
    config["config"]["layers"][-1] = {"class_name": "Lambda", "config": inner}
    return config


PLACES = (activation, initializer, regularizer, constraint, learning_rate, loss, metric, lambda_function)


if __name__ == "__main__":
    main()
