"""What survives pickling: Keras's built-in ``__reduce__`` (or tf-keras's) vs keras_pickle, side by side.

Each check runs in this one process, first with keras_pickle uninstalled (Keras's own path), then
installed, and prints one markdown row per check; a fresh-process check loads the payload in a new
interpreter, as a worker would. Keras 3: ``benchmarks.models.custom_layer_model`` (an unregistered
custom layer); ``--tf-keras``: the Functional model of ``tests/tf_keras_models.py`` (an unregistered
custom layer, Dropout, BatchNormalization, AdamW), loaded where its module is importable and compared
value by value (weights and optimizer slots)::

    python -m benchmarks behaviour [--tf-keras]
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import keras_pickle
from benchmarks import common, models

COMPARE = """
import numpy as np, tf_keras_models as tm
values, saved = tm.all_values(obj), np.load(sys.argv[2])
assert len(values) == len(saved.files) and all(np.array_equal(a, saved[f"arr_{i}"]) for i, a in enumerate(values))
print("yes, every value bit-exact")
"""


def fresh_process_load(obj, all_values=None) -> str:
    """Pickle ``obj``, load it in a new interpreter (tests/ on its path) and, given ``all_values``, compare
    every value; 'yes' or the error's last line."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "obj.pkl").write_bytes(pickle.dumps(obj))
        if all_values is not None:
            np.savez(f"{tmp}/values.npz", *all_values(obj))
        code = "import pickle, sys; obj = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        code += COMPARE if all_values is not None else "print('yes')"
        argv = [sys.executable, "-c", code, f"{tmp}/obj.pkl", f"{tmp}/values.npz"]
        result = subprocess.run(argv, env=common.env(tests=True), capture_output=True, text=True, timeout=300)
    if result.returncode == 0:
        return result.stdout.strip().splitlines()[-1]
    lines = [line for line in result.stderr.splitlines() if "Could not locate" in line or "Error" in line]
    located = [line for line in lines if "Could not locate" in line]
    return "no: " + ((located or lines or ["failed"])[-1].split(". ")[0][-70:])


def same_variables(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.variables, b.variables))


def checks(tf_keras: bool) -> dict:
    k = importlib.import_module("tf_keras" if tf_keras else "keras")

    def metric_state():
        metric = k.metrics.Mean()
        metric.update_state([1.0, 2.0])
        return f"{float(pickle.loads(pickle.dumps(metric)).result())} (expected 1.5)"

    def optimizer_state():
        optimizer = make().optimizer
        restored = pickle.loads(pickle.dumps(optimizer))
        built = "" if getattr(restored, "built", True) else ", unbuilt"
        return f"iterations {int(restored.iterations)} of {int(optimizer.iterations)}{built}"

    if tf_keras:
        tm = models.from_tests("tf_keras_models")
        model = tm.trained("functional")  # built once, keras_pickle installed

        def make():
            return model

        return {
            "load in a fresh process that imports the layer's module": lambda: fresh_process_load(model, tm.all_values),
            "copy.deepcopy": lambda: f"no: {p}" if (p := common.mismatch(model, copy.deepcopy(model))) else "yes",
            "Mean metric of [1, 2]": metric_state,
            "standalone optimizer": optimizer_state,
        }
    make = models.custom_layer_model

    def protocol_0():
        pickle.loads(pickle.dumps(make(), protocol=0))
        return "yes"

    def out_of_band():
        data, buffers = common.dumps(make())
        return f"{len(buffers)} buffers, {len(data) / 1e3:.1f} kB in band"

    def training_continues():
        model = make(custom=False)
        twin = copy.deepcopy(model)
        x = np.random.default_rng(1).normal(size=(16, 4)).astype("float32")
        for m in (model, twin):
            m.fit(x, np.ones((16, 8), "float32"), shuffle=False, verbose=0)
        return "yes" if same_variables(model, twin) else "no: weights differ (Dropout seed state lost)"

    def dask_ships():
        from distributed.protocol import deserialize, serialize

        model = make()
        header, frames = serialize(model, on_error="raise")  # what client.submit / scatter do
        same = same_variables(model, deserialize(header, frames))
        return f"yes, {len(frames) - 1} zero-copy weight frames" if same else "no: weights differ"

    def dask_token():
        from dask.base import tokenize

        model = make()
        same = tokenize(model, ensure_deterministic=True) == tokenize(copy.deepcopy(model), ensure_deterministic=True)
        return "yes" if same else "no: a copy gets another token"

    found = {
        "custom layer loads in a fresh process": lambda: fresh_process_load(make()),
        "protocol 0 works": protocol_0,
        "protocol 5 out-of-band weights": out_of_band,
        "Mean metric of [1, 2] after pickling": metric_state,
        "standalone optimizer after pickling": optimizer_state,
        "deepcopy (Dense+Dropout) trains bit-identically": training_continues,
    }
    if importlib.util.find_spec("distributed") is not None:
        found["Dask sends the model to a worker"] = dask_ships
        found["Dask tokenize(model) deterministic, same for a copy"] = dask_token
    return found


def attempt(check) -> str:
    try:
        return check()
    except keras_pickle.PickleRefusedError:
        return "refused: PickleRefusedError says why and what to do"
    except Exception as e:
        return f"no: {type(e).__name__}: {str(e).splitlines()[0][:60]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tf-keras", action="store_true", help="tf-keras (Keras 2) models and its own pickling")
    args = parser.parse_args(argv)
    rows = []
    for name, check in checks(args.tf_keras).items():
        outcomes = []
        for impl in common.IMPLS:
            common.use(impl)
            outcomes.append(attempt(check))
        rows.append([name, *outcomes])
    common.use(common.KP)
    k = importlib.import_module("tf_keras" if args.tf_keras else "keras")
    theirs = f"{'tf-keras' if args.tf_keras else 'Keras'} {k.__version__} built-in"
    common.table("What survives pickling", ["check", theirs, f"keras_pickle {keras_pickle.__version__}"], rows)
    return 0
