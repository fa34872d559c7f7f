"""tf-keras (Keras 2): its own pickling against keras_pickle's, on the same models, in one process.

tf-keras's own ``Model.__reduce__`` writes a SavedModel into a temporary in-memory filesystem and
tars it; keras_pickle writes its payload (config, every variable, optimizer slots, random-generator
state). For each model: dumps and loads (``pickle.dumps`` / ``pickle.loads``, protocol 5, in band),
best of ``--repeat``, whether each result holds every weight and optimizer slot of the original,
and, the first call of each on its own (tf-keras traces and caches functions there), and, each in a
fresh child process, the peak extra resident memory of dumps and of loads as a
multiple of the state bytes (every weight and optimizer variable)::

    python benchmarks/tf_keras_pickling.py [--repeat 5] [--models small,100mb] [--no-memory]
    python benchmarks/tf_keras_pickling.py --behaviour   # what each keeps, on tests/tf_keras_models.py

``--behaviour`` pickles the Functional model of ``tests/tf_keras_models.py`` (an unregistered custom
layer, Dropout, BatchNormalization, AdamW) with each implementation and loads it in a fresh process
that imports the layer's module, deep-copies it, and pickles a ``Mean`` metric and the optimizer.

Goals: keras_pickle at least 10x faster than tf-keras's own pickling on the small model, 5x on
the 100 MB one.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # see _bench_memory: oneDNN's allocator hides new memory

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from _bench_memory import _measure  # noqa: E402

import keras_pickle  # noqa: E402

OURS, THEIRS = "keras_pickle", "tf-keras"
MODELS = {
    # name: (input features, hidden widths): Dense layers, Adam, one training step
    "small": (16, (32, 32, 1)),
    "100mb": (2560, (2560, 2560, 2560, 2560)),
}


def build(name: str) -> tf_keras.Model:
    """The model ``name``, compiled with Adam and trained one step (so its slots exist)."""
    features, widths = MODELS[name]
    tf.random.set_seed(0)
    layers = [tf_keras.Input((features,))]
    layers += [tf_keras.layers.Dense(width, activation="relu") for width in widths[:-1]] + [
        tf_keras.layers.Dense(widths[-1])
    ]
    model = tf_keras.Sequential(layers)
    model.compile(tf_keras.optimizers.Adam(1e-3), "mse")
    x = np.random.default_rng(0).random((8, features), dtype=np.float32)
    model.fit(x, np.zeros((8, widths[-1]), "float32"), epochs=1, batch_size=8, verbose=0)
    return model


def use(impl: str) -> None:
    if impl == OURS:
        keras_pickle.install()
    else:
        keras_pickle.uninstall()


def state_bytes(model: tf_keras.Model) -> int:
    return sum(v.numpy().nbytes for v in list(model.variables) + list(model.optimizer.variables))


def faithful(original: tf_keras.Model, loaded: tf_keras.Model) -> str:
    """What the loaded model kept: every weight, and every optimizer variable (iterations, slots)."""
    weights = len(original.weights) == len(loaded.weights) and all(
        np.array_equal(a.numpy(), b.numpy()) for a, b in zip(original.weights, loaded.weights)
    )
    slots = len(original.optimizer.variables) == len(loaded.optimizer.variables) and all(
        np.array_equal(a.numpy(), b.numpy()) for a, b in zip(original.optimizer.variables, loaded.optimizer.variables)
    )
    return ("weights" if weights else "WEIGHTS DIFFER") + (", optimizer slots" if slots else ", optimizer state lost")


def timed(repeat: int, function) -> tuple[float, float, object]:
    """The first call's time (it traces and caches what later calls reuse), the best of ``repeat``, the result."""
    times, result = [], None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return times[0], min(times), result


def speed(name: str, repeat: int) -> dict:
    model = build(name)
    row = {"model": name, "state_bytes": state_bytes(model)}
    for impl in (THEIRS, OURS):
        use(impl)
        row[f"{impl} first dumps"], row[f"{impl} dumps"], data = timed(repeat, lambda: pickle.dumps(model, protocol=5))
        row[f"{impl} first loads"], row[f"{impl} loads"], loaded = timed(repeat, lambda data=data: pickle.loads(data))
        row[f"{impl} bytes"] = len(data)
        row[f"{impl} result"] = faithful(model, loaded)
    keras_pickle.install()
    return row


def memory_child(name: str, impl: str) -> dict:
    """In a fresh interpreter: peak extra RSS of one dumps and one loads, as a multiple of the state bytes."""
    use(impl)
    warm = build("small")
    pickle.loads(pickle.dumps(warm, protocol=5))
    model = build(name)
    data, dumps_peak, _ = _measure(lambda: pickle.dumps(model, protocol=5))
    _loaded, loads_peak, _ = _measure(lambda: pickle.loads(data))
    size = state_bytes(model)
    return {"dumps_x": dumps_peak / size, "loads_x": loads_peak / size}


def memory(name: str) -> dict:
    row = {}
    for impl in (THEIRS, OURS):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", name, impl],
            capture_output=True, text=True, check=True, cwd=Path(__file__).parent,
        )  # fmt: skip
        result = json.loads(out.stdout.strip().splitlines()[-1])
        row[f"{impl} dumps memory"], row[f"{impl} loads memory"] = result["dumps_x"], result["loads_x"]
    return row


def report(rows: list[dict]) -> None:
    print(f"tf-keras {tf_keras.__version__}, keras_pickle {keras_pickle.__version__}, pickle protocol 5 in band")
    for row in rows:
        mb = row["state_bytes"] / 1e6
        print(f"\n{row['model']} ({mb:.1f} MB of state)")
        print(f"  {'':10} {'tf-keras own':>14} {'keras_pickle':>14} {'speed-up':>9}   (best of the repeats)")
        for op in ("first dumps", "first loads", "dumps", "loads"):
            theirs, ours = row[f"{THEIRS} {op}"], row[f"{OURS} {op}"]
            print(f"  {op:10} {theirs * 1e3:11.1f} ms {ours * 1e3:11.1f} ms {theirs / ours:8.1f}x")
        theirs_total = row[f"{THEIRS} dumps"] + row[f"{THEIRS} loads"]
        ours_total = row[f"{OURS} dumps"] + row[f"{OURS} loads"]
        print(
            f"  {'both':10} {theirs_total * 1e3:11.1f} ms {ours_total * 1e3:11.1f} ms {theirs_total / ours_total:8.1f}x"
        )
        print(f"  {'bytes':10} {row[f'{THEIRS} bytes']:14,} {row[f'{OURS} bytes']:14,}")
        if f"{OURS} dumps memory" in row:
            for op in ("dumps", "loads"):
                theirs, ours = row[f"{THEIRS} {op} memory"], row[f"{OURS} {op} memory"]
                print(f"  {op + ' mem':10} {theirs:13.2f}x {ours:13.2f}x   (peak extra RSS / state bytes)")
        print(f"  result     tf-keras own: {row[f'{THEIRS} result']}; keras_pickle: {row[f'{OURS} result']}")


TESTS_DIR = Path(__file__).resolve().parent.parent / "tests"
_FRESH_LOAD = """
import pickle, sys
import numpy as np, tf_keras, tf_keras_models as tm
model = pickle.loads(open(sys.argv[1], "rb").read())
saved = np.load(sys.argv[2])
same = all(np.array_equal(a, saved[f"arr_{i}"]) for i, a in enumerate(tm.all_values(model)))
print("loaded, every value equal" if same and len(saved.files) == len(tm.all_values(model)) else "VALUES DIFFER")
"""


def outcome(function) -> str:
    try:
        return function()
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:90]}"


def behaviour() -> None:
    import copy
    import tempfile

    sys.path.insert(0, str(TESTS_DIR))
    import tf_keras_models as tm

    model = tm.trained("functional")
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(f"{tmp}/values.npz", *tm.all_values(model))
        for impl in (THEIRS, OURS):
            use(impl)
            Path(f"{tmp}/model.pkl").write_bytes(pickle.dumps(model))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR.parent), str(TESTS_DIR)])}
            run = subprocess.run(
                [sys.executable, "-c", _FRESH_LOAD, f"{tmp}/model.pkl", f"{tmp}/values.npz"],
                capture_output=True, text=True, env=env,
            )  # fmt: skip
            fresh = run.stdout.strip() or run.stderr.strip().splitlines()[-1]
            twin = outcome(lambda: faithful(model, copy.deepcopy(model)))
            mean = tf_keras.metrics.Mean()
            mean.update_state([1.0, 2.0])
            metric = outcome(lambda mean=mean: f"result {float(pickle.loads(pickle.dumps(mean)).result())}")
            optimizer = outcome(lambda: f"pickled, {len(pickle.dumps(model.optimizer))} bytes")
            print(f"{impl}:\n  fresh process: {fresh[:120]}\n  deepcopy: {twin}\n  Mean of [1, 2]: {metric}")
            print(f"  optimizer: {optimizer}")
    keras_pickle.install()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--behaviour", action="store_true", help="what each implementation keeps, then exit")
    parser.add_argument("--memory-child", nargs=2, metavar=("MODEL", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(*args.memory_child)))
        return
    if args.behaviour:
        behaviour()
        return
    rows = []
    for name in args.models.split(","):
        row = speed(name, args.repeat)
        if not args.no_memory:
            row.update(memory(name))
        rows.append(row)
    report(rows)


if __name__ == "__main__":
    main()
