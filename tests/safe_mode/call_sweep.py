"""Run in a fresh, worker-like process by tests/safe_mode/test_calls_in_configs.py: every ``Operation`` class
Keras builds from a Functional config, called with every kind of value a payload may put among its
arguments, and every function Keras's registry holds in a worker (KerasHub's among them) in every place
where the payload chooses the arguments it is called with. Each payload is loaded, and where it loads,
called, predicted with and fit once, with an audit hook watching and the working directory and HOME in a
scratch directory.

    python call_sweep.py SCRATCH OUT

Writes each payload to OUT (for a Keras-free ``inspect`` beside it) and prints one JSON object: per payload
(``cases``), what ``loads`` did (``refused``, ``loaded``, or the error class) and every audited effect seen;
and every file that appeared under SCRATCH (the working directory and HOME) after a warm-up (``created``).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
import types
from pathlib import Path

WORKER_IMPORTS = ("keras_hub", "tf_keras", "distributed", "mlflow")

SCRATCH = Path(sys.argv[1]).resolve()
EVENTS: list[str] = []
WATCHING = [False]
WATCHED = ("open", "os.", "shutil.", "glob.", "subprocess.", "socket.", "urllib.", "ctypes.dlopen", "sqlite3.")


def _audit(event: str, args: tuple) -> None:
    if WATCHING[0] and event.startswith(WATCHED):
        shown = repr(args)[:200]
        if str(SCRATCH) in shown or not event.startswith(("open", "os.listdir", "os.scandir", "os.stat")):
            EVENTS.append(f"{event}{shown}")


def keras_tensor(layer: str) -> dict:
    return {"class_name": "__keras_tensor__", "config": {"shape": [None, 2], "dtype": "float32",
                                                          "keras_history": [layer, 0, 0]}}  # fmt: skip


def function_node(module: str, name: str, registered: str = "function") -> dict:
    return {"module": module, "class_name": "function", "config": name, "registered_name": registered}


def values(registered: list[tuple[str, types.FunctionType]]) -> dict[str, object]:
    """What a payload may put among an op's arguments, each kind once: ``expect`` (refused always, or only
    in a control-flow op) with the value."""
    name, function = registered[0]
    return {
        "registered function": ("refused", function_node(function.__module__, function.__name__, name)),
        "keras function": ("control_flow", function_node("builtins", "relu")),
        "keras class as function": ("refused", function_node("keras.layers", "Dense")),
        "keras class": ("refused", {"module": "keras.layers", "class_name": "Dense", "config": {"units": 1}}),
        "non-layer class": ("refused", function_node("keras.utils", "Progbar")),
        "path string": ("harmless", str(SCRATCH / "written_by_payload.txt")),
    }


def positions(value: object, tensor: dict) -> dict[str, dict]:
    """Where among a call's arguments the value goes."""
    return {
        "second argument": {"args": [tensor, value], "kwargs": {}},
        "first argument": {"args": [value, tensor], "kwargs": {}},
        "in a list": {"args": [tensor, [value, value], tensor], "kwargs": {}},
        "keyword": {"args": [tensor], "kwargs": {"f": value}},
    }


def main() -> None:
    out = Path(sys.argv[2])
    for name in WORKER_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    import keras
    import numpy as np
    import redteam
    from keras.src.saving.object_registration import GLOBAL_CUSTOM_OBJECTS

    from keras_pickle._safe_mode import tables

    sys.addaudithook(_audit)
    registered = sorted((k, v) for k, v in GLOBAL_CUSTOM_OBJECTS.items() if isinstance(v, types.FunctionType))
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,), name="x")
    hidden = keras.layers.Dense(2, name="hidden")(inputs)
    model = keras.Model(inputs, keras.ops.add(hidden, hidden))
    model.compile(optimizer="sgd", loss="mse")
    header, body = redteam.payload_parts(model)
    x, y = np.ones((4, 3), "float32"), np.ones((4, 2), "float32")
    ops = sorted(path for path, role in tables.vocabulary("keras3").entries.items() if role in ("op", "control_flow"))
    load(redteam.craft(header, body), x, y)  # warm up: what Keras and its backend write under HOME on first use
    before = files_under(SCRATCH)
    results = {}
    for path in ops:
        module, _, class_name = path.rpartition(".")
        control_flow = tables.role_of(path) == "control_flow"
        for kind, (expect, value) in values(registered).items():
            for where, call in positions(value, keras_tensor("hidden")).items():

                def edit(config, call=call, module=module, class_name=class_name):
                    node = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "Add")
                    node.update(module=module, class_name=class_name, registered_name=class_name)
                    node["inbound_nodes"] = [copy.deepcopy(call)]

                data = redteam.craft(header, redteam.edit_config(body, edit))
                case = f"{class_name} | {kind} | {where}"
                (out / f"{len(results)}.pkl").write_bytes(data)
                expected = expect == "refused" or (expect == "control_flow" and control_flow)
                results[case] = {"file": f"{len(results)}.pkl", "must_refuse": expected, **load(data, x, y)}
    for name, function in registered:  # every registered function, in every place the payload chooses arguments
        for where, data in registered_in_argument_roles(name, function, header, body, keras).items():
            (out / f"{len(results)}.pkl").write_bytes(data)
            outcome = load(data, x, y, allow_control_flow=True)
            results[f"{name} | {where}"] = {"file": f"{len(results)}.pkl", "must_refuse": True, **outcome}
    print(json.dumps({"cases": results, "created": sorted(files_under(SCRATCH) - before)}))


def files_under(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*")}


def registered_in_argument_roles(name: str, function, header: dict, body: dict, keras) -> dict[str, bytes]:
    """Payloads placing the registered ``function`` where the payload chooses its arguments: a branch of
    ``switch`` (loaded with control flow allowed), an op's operand, a loss and a metric wrapper's ``fn``
    beside keyword arguments."""
    import redteam

    node = {"module": "builtins", "class_name": "function", "config": name, "registered_name": "function"}
    inputs = keras.Input((3,), name="x")
    index = keras.ops.cast(keras.ops.sum(inputs[:, :1]) > 0, "int32")
    switch = keras.Model(inputs, keras.ops.switch(index, [keras.activations.relu, keras.activations.tanh], inputs))
    switch_header, switch_body = redteam.payload_parts(switch)

    def branch(config):
        layer = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "Switch")
        layer["inbound_nodes"][0]["args"][1][1] = copy.deepcopy(node)

    def operand(config):
        layer = next(layer for layer in config["config"]["layers"] if layer["class_name"] == "Add")
        layer["inbound_nodes"][0]["args"][1] = copy.deepcopy(node)

    def wrapper(key: str, module: str, class_name: str):
        def edit(config):
            wrapped = {
                "module": module,
                "class_name": class_name,
                "registered_name": None,
                "config": {"fn": copy.deepcopy(node), "name": "w", "path": str(SCRATCH / "wrapped.txt")},
            }
            config["compile_config"][key] = wrapped if key == "loss" else [wrapped]

        return edit

    loss = wrapper("loss", "keras.src.losses.losses", "LossFunctionWrapper")
    metric = wrapper("metrics", "keras.metrics", "MeanMetricWrapper")
    return {
        "switch branch": redteam.craft(switch_header, redteam.edit_config(switch_body, branch)),
        "op operand": redteam.craft(header, redteam.edit_config(body, operand)),
        "loss wrapper": redteam.craft(header, redteam.edit_config(body, loss)),
        "metric wrapper": redteam.craft(header, redteam.edit_config(body, metric)),
    }


def load(data: bytes, x, y, **options) -> dict:
    import keras_pickle

    EVENTS.clear()
    WATCHING[0] = True
    try:
        try:
            restored = keras_pickle.loads(data, **options)
        except keras_pickle.UnsafePayloadError:
            return {"outcome": "refused", "events": list(EVENTS)}
        except Exception as error:  # noqa: BLE001  (an op given nonsense fails while Keras builds it)
            return {"outcome": type(error).__name__, "events": list(EVENTS)}
        try:  # the first use: a call, a prediction, one step of training
            restored(x)
            restored.predict(x, verbose=0)
            restored.fit(x, y, epochs=1, verbose=0)
        except Exception:  # noqa: BLE001, S110  (what matters is what it touched)
            pass
        return {"outcome": "loaded", "events": list(EVENTS)}
    finally:
        WATCHING[0] = False
        os.chdir(SCRATCH)


if __name__ == "__main__":
    os.chdir(SCRATCH)
    main()
