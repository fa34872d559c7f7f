"""What survives pickling: Keras's built-in ``__reduce__`` (or tf-keras's) vs keras_pickle, side by side.

Each check runs in this process with keras_pickle uninstalled, then installed: one markdown row per check.
The fresh-process check loads the payload in an interpreter that never installs keras_pickle, as a worker
would, and compares every value. Keras 3: ``models.custom_layer_model`` (an unregistered custom layer);
``--tf-keras``: ``tests/tf_keras_models.py``'s Functional model (a custom layer, Dropout, BatchNormalization,
AdamW), loaded where its module is importable::

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

import numpy as np

import keras_pickle
from benchmarks import common, models

FRESH = """
import pickle, sys, numpy as np
from benchmarks import common
obj, saved = pickle.loads(open(sys.argv[1], "rb").read()), np.load(sys.argv[2])
values = [np.asarray(v) for v in common.state_variables(obj)]
same = len(values) == len(saved.files) and all(np.array_equal(a, saved[f"arr_{i}"]) for i, a in enumerate(values))
print("yes, every value bit-exact" if same else "no: values differ")
"""


def fresh_process_load(obj) -> str:
    """Pickle ``obj`` and load it in a new interpreter (tests/ on its path): what it says, or the error's gist."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/obj.pkl", "wb") as f:
            f.write(pickle.dumps(obj))
        np.savez(f"{tmp}/values.npz", *(np.asarray(v) for v in common.state_variables(obj)))
        argv = [sys.executable, "-c", FRESH, f"{tmp}/obj.pkl", f"{tmp}/values.npz"]
        result = subprocess.run(argv, env=common.env(tests=True), capture_output=True, text=True, timeout=300)
    if result.returncode == 0:
        return result.stdout.strip().splitlines()[-1]
    lines = [line for line in result.stderr.splitlines() if "Could not locate" in line or "Error" in line]
    located = [line for line in lines if "Could not locate" in line]
    return "no: " + ((located or lines or ["failed"])[-1].split(". ")[0][-70:])


def checks(tf_keras: bool) -> dict:
    k = importlib.import_module("tf_keras" if tf_keras else "keras")
    model = models.from_tests("tf_keras_models").trained("functional") if tf_keras else None  # built once
    make = (lambda custom=True: model) if tf_keras else models.custom_layer_model

    def metric_state():
        metric = k.metrics.Mean()
        metric.update_state([1.0, 2.0])
        return f"{float(pickle.loads(pickle.dumps(metric)).result())} (expected 1.5)"

    def optimizer_state():
        optimizer = make().optimizer
        restored = pickle.loads(pickle.dumps(optimizer))
        built = "" if getattr(restored, "built", True) else ", unbuilt"
        return f"iterations {int(restored.iterations)} of {int(optimizer.iterations)}{built}"

    def deepcopy_values():
        problem = common.mismatch(model, copy.deepcopy(model))
        return f"no: {problem}" if problem else "yes"

    if tf_keras:
        return {
            "load in a fresh process that imports the layer's module": lambda: fresh_process_load(model),
            "copy.deepcopy": deepcopy_values,
            "Mean metric of [1, 2]": metric_state,
            "standalone optimizer": optimizer_state,
        }

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
        return "no: weights differ (Dropout seed state lost)" if common.mismatch(model, twin) else "yes"

    def dask_ships():
        from distributed.protocol import deserialize, serialize

        model = make()
        header, frames = serialize(model, on_error="raise")  # what client.submit / scatter do
        problem = common.mismatch(model, deserialize(header, frames))
        return f"no: {problem}" if problem else f"yes, {len(frames) - 1} zero-copy weight frames"

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
