"""tf-keras (Keras 2): its own pickling against keras_pickle's, on the same models, in one process.

tf-keras's own ``Model.__reduce__`` writes a SavedModel into a temporary in-memory filesystem and
tars it; keras_pickle writes its payload. For each model (``models.TF_KERAS``: Dense layers, Adam,
one training step), interleaved (``common.race``): dumps and loads (protocol 5, in band), the first
call of each (tf-keras traces and caches functions there) and the best of ``--repeat``, whether each
result holds every weight and optimizer slot of the original, and, each in a fresh child process,
the peak extra resident memory of dumps and of loads as a multiple of the state bytes::

    python -m benchmarks tf_keras_pickling [--repeat 5] [--models small,100mb] [--no-memory]
    python -m benchmarks tf_keras_pickling --behaviour   # what each keeps, on tests/tf_keras_models.py

``--behaviour`` pickles the Functional model of ``tests/tf_keras_models.py`` (an unregistered custom
layer, Dropout, BatchNormalization, AdamW) both ways, loads it in a fresh process that imports the
layer's module, deep-copies it, and pickles a ``Mean`` metric and the optimizer. Goals: keras_pickle
at least 10x faster than tf-keras's own pickling on the small model, 5x on the 100 MB one.
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks.common import KERAS, KP, Contender

NAMES = {KERAS: "tf-keras", KP: "keras_pickle"}


def state_bytes(model) -> int:
    return sum(v.numpy().nbytes for v in list(model.variables) + list(model.optimizer.variables))


def faithful(original, loaded) -> str:
    """What the loaded model kept: every weight, and every optimizer variable (iterations, slots)."""

    def same(a, b) -> bool:
        return len(a) == len(b) and all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))

    weights = "weights" if same(original.weights, loaded.weights) else "WEIGHTS DIFFER"
    slots = same(original.optimizer.variables, loaded.optimizer.variables)
    return weights + (", optimizer slots" if slots else ", optimizer state lost")


def speed(name: str, repeat: int) -> dict:
    from benchmarks import models

    model = models.tf_keras_model(name)
    row: dict = {"model": name, "state_bytes": state_bytes(model)}
    contenders = []
    for impl in common.IMPLS:
        written: dict = {}

        def dump(written=written):
            written["data"] = pickle.dumps(model, protocol=5)
            return written["data"]

        def kept(loaded, first: bool, impl=impl, written=written) -> None:
            row[f"{NAMES[impl]} result"], row[f"{NAMES[impl]} bytes"] = faithful(model, loaded), len(written["data"])

        contenders += [Contender(f"{NAMES[impl]} dumps", impl, dump)]
        contenders += [
            Contender(f"{NAMES[impl]} loads", impl, lambda written=written: pickle.loads(written["data"]), kept)
        ]
    for key, times in common.race(contenders, repeat).items():
        row[key], row[key.replace(" ", " first ")] = min(times), times[0]
    return row


def memory(name: str) -> dict:
    """Peak extra RSS of one dumps and one loads, as a multiple of the state bytes, each impl in a fresh child."""
    row = {}
    for impl in common.IMPLS:
        results, error = common.child("tf_keras_pickling", "--memory-child", name, impl)
        if error:
            raise RuntimeError(error)
        row[f"{NAMES[impl]} dumps memory"], row[f"{NAMES[impl]} loads memory"] = results[0]
    return row


def memory_child(name: str, impl: str) -> list[float]:
    from benchmarks import models

    common.use(impl)
    warm = models.tf_keras_model("small")
    pickle.loads(pickle.dumps(warm, protocol=5))
    model = models.tf_keras_model(name)
    data, dumps_peak, _ = common.peak_memory(lambda: pickle.dumps(model, protocol=5))
    _loaded, loads_peak, _ = common.peak_memory(lambda: pickle.loads(data))
    return [dumps_peak / state_bytes(model), loads_peak / state_bytes(model)]


def report(rows: list[dict]) -> None:
    import tf_keras

    import keras_pickle

    theirs, ours = NAMES.values()
    table = []
    for row in rows:
        row.update({f"{impl} both": row[f"{impl} dumps"] + row[f"{impl} loads"] for impl in (theirs, ours)})
        name = f"{row['model']} ({row['state_bytes'] / 1e6:.1f} MB of state)"
        for op in ("first dumps", "first loads", "dumps", "loads", "both"):
            a, b = row[f"{theirs} {op}"], row[f"{ours} {op}"]
            table.append([name, op, f"{a * 1e3:.1f} ms", f"{b * 1e3:.1f} ms", f"{a / b:.1f}x"])
        table.append([name, "bytes", f"{row[f'{theirs} bytes']:,}", f"{row[f'{ours} bytes']:,}", ""])
        for op in ("dumps", "loads") if f"{ours} dumps memory" in row else ():
            memory = [f"{row[f'{impl} {op} memory']:.2f}x the state" for impl in (theirs, ours)]
            table.append([name, f"peak extra memory, {op}", *memory, ""])
        table.append([name, "result", row[f"{theirs} result"], row[f"{ours} result"], ""])
    title = f"tf-keras {tf_keras.__version__} vs keras_pickle {keras_pickle.__version__}, protocol 5 in band, best of N"
    common.table(title, ["model", "op", "tf-keras own", "keras_pickle", "speed-up"], table)


FRESH_LOAD = """
import pickle, sys
import numpy as np, tf_keras, tf_keras_models as tm
model = pickle.loads(open(sys.argv[1], "rb").read())
saved = np.load(sys.argv[2])
same = all(np.array_equal(a, saved[f"arr_{i}"]) for i, a in enumerate(tm.all_values(model)))
print("loaded, every value equal" if same and len(saved.files) == len(tm.all_values(model)) else "VALUES DIFFER")
"""


def behaviour() -> None:
    import tf_keras

    from benchmarks import models

    tm = models.from_tests("tf_keras_models")
    model = tm.trained("functional")

    def outcome(function) -> str:
        try:
            return function()
        except Exception as e:
            return f"{type(e).__name__}: {str(e)[:90]}"

    with tempfile.TemporaryDirectory() as tmp:
        np.savez(f"{tmp}/values.npz", *tm.all_values(model))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(common.ROOT), str(common.ROOT / "tests")])}
        for impl in common.IMPLS:
            common.use(impl)
            Path(f"{tmp}/model.pkl").write_bytes(pickle.dumps(model))
            argv = [sys.executable, "-c", FRESH_LOAD, f"{tmp}/model.pkl", f"{tmp}/values.npz"]
            run = subprocess.run(argv, capture_output=True, text=True, env=env)
            mean = tf_keras.metrics.Mean()
            mean.update_state([1.0, 2.0])
            print(
                f"{NAMES[impl]}:\n  fresh process: {(run.stdout.strip() or run.stderr.strip().splitlines()[-1])[:120]}"
            )
            print(f"  deepcopy: {outcome(lambda: faithful(model, copy.deepcopy(model)))}")
            print(
                f"  Mean of [1, 2]: {outcome(lambda m=mean: f'result {float(pickle.loads(pickle.dumps(m)).result())}')}"
            )
            print(f"  optimizer: {outcome(lambda: f'pickled, {len(pickle.dumps(model.optimizer))} bytes')}")
    common.use(KP)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # before TensorFlow is imported: see common.peak_memory
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", default="small,100mb")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--behaviour", action="store_true", help="what each implementation keeps, then exit")
    parser.add_argument("--memory-child", nargs=2, metavar=("MODEL", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        common.emit(memory_child(*args.memory_child))
    elif args.behaviour:
        behaviour()
    else:
        report([{**speed(n, args.repeat), **({} if args.no_memory else memory(n))} for n in args.models.split(",")])
    return 0
