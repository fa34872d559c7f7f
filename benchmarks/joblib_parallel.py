"""joblib.Parallel with a model as an argument, beside the same weights as a list of numpy arrays.

Per backend (a child process each, ``KERAS_BACKEND`` set), for each model (bench.py's ``dense100mb``:
96 MiB of weights, Adam slots 288 MiB of state in all; ``resnet50``: keras.applications, weights=None),
one loky pool of 2 workers (warmed: Keras imported in both), ``--tasks`` tasks that each read one
weight, timed best of ``--repeat``, interleaved:

* ``arrays``: the weights as numpy arrays (what joblib is built for);
* ``keras_pickle``: the model, keras_pickle installed (each weight handed to joblib as a numpy array);
* ``keras``: the model, keras_pickle uninstalled (Keras's own ``__reduce__``: a .keras zip per task);
* ``state_copied``: the model's whole state (variables and optimizer slots) as numpy arrays, each copied
  out of joblib's map by the task: the least a task pays whose model owns its data, as a loaded one does;

under joblib's default (arrays over 1 MB memory-mapped) and ``max_nbytes=None`` (everything pickled per
task). Prints seconds, the ratio of each model path to ``arrays`` (the issue's goal: keras_pickle <= 3x),
and keras_pickle's ratio to ``state_copied``.

It also times, in the parent, what one task's argument costs a worker once its bytes are on disk:
``joblib.load(path, mmap_mode="r")`` of a ``joblib.dump`` of the model against the same of the arrays
(the model is rebuilt from its config every time; the arrays are only mapped).

    python benchmarks/joblib_parallel.py [--backend tensorflow jax torch] [--model dense100mb resnet50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BACKENDS = ("tensorflow", "jax", "torch")
MODELS = ("dense100mb", "resnet50")


def read_one(weights_or_model, index: int) -> float:
    """A task: one number read off the first weight (of a list of arrays, or of a model)."""
    import numpy as np

    first = weights_or_model[0] if isinstance(weights_or_model, list) else weights_or_model.weights[0]
    return float(np.asarray(first).reshape(-1)[index])


def copy_all(arrays: list, index: int) -> float:
    """A task that owns its data: every array copied out of joblib's memory map, as a loaded model must."""
    import numpy as np

    owned = [np.array(a, copy=True) for a in arrays]
    return float(owned[0].reshape(-1)[index])


def best_of(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(backend: str, model_name: str, tasks: int, repeat: int) -> dict:
    """In a process whose Keras runs ``backend``: every figure for ``model_name``."""
    import joblib
    import numpy as np
    from _bench_models import dense100mb, resnet50

    import keras_pickle

    model = {"dense100mb": dense100mb, "resnet50": resnet50}[model_name]()
    arrays = [np.asarray(v) for v in model.weights]
    optimizer = getattr(model, "optimizer", None)
    state = [np.asarray(v) for v in model.variables] + [np.asarray(v) for v in getattr(optimizer, "variables", [])]
    result = {"backend": backend, "model": model_name, "weight_mib": round(sum(a.nbytes for a in arrays) / 2**20, 1)}
    for label, max_nbytes in (("memmap", "1M"), ("pickled", None)):
        with joblib.Parallel(n_jobs=2, max_nbytes=max_nbytes) as parallel:
            keras_pickle.install()
            parallel(joblib.delayed(read_one)(model, i) for i in range(2))  # warm: both workers import Keras
            runs = {
                "arrays": lambda: parallel(joblib.delayed(read_one)(arrays, i) for i in range(tasks)),
                "state_copied": lambda: parallel(joblib.delayed(copy_all)(state, i) for i in range(tasks)),
                "keras_pickle": lambda: parallel(joblib.delayed(read_one)(model, i) for i in range(tasks)),
            }
            times = {name: [] for name in (*runs, "keras")}
            for _ in range(repeat):
                for name, run in runs.items():
                    times[name].append(best_of(1, run))
                keras_pickle.uninstall()
                try:
                    times["keras"].append(best_of(1, runs["keras_pickle"]))
                except Exception as e:  # Keras's own pickling may fail where keras_pickle does not
                    times["keras"].append(float("nan"))
                    result["keras_error"] = f"{type(e).__name__}: {str(e)[:120]}"
                keras_pickle.install()
        best = {name: min(values) for name, values in times.items()}
        result[label] = {name: round(seconds, 3) for name, seconds in best.items()}
        result[label]["ratio_keras_pickle"] = round(best["keras_pickle"] / best["arrays"], 1)
        result[label]["ratio_keras"] = round(best["keras"] / best["arrays"], 1)
        result[label]["ratio_to_copy_floor"] = round(best["keras_pickle"] / best["state_copied"], 1)
    with tempfile.TemporaryDirectory() as folder:
        model_path, arrays_path = Path(folder, "model.joblib"), Path(folder, "arrays.joblib")
        joblib.dump(model, model_path)
        joblib.dump(arrays, arrays_path)
        result["worker_load_s"] = {
            "keras_pickle": round(best_of(repeat, lambda: joblib.load(model_path, mmap_mode="r")), 3),
            "arrays": round(best_of(repeat, lambda: joblib.load(arrays_path, mmap_mode="r")), 4),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--model", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(HERE))
        for model_name in args.model:
            print(json.dumps(measure(args.backend[0], model_name, args.tasks, args.repeat)), flush=True)
        return
    for backend in args.backend:
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(HERE)}
        command = [sys.executable, __file__, "--child", "--backend", backend, "--model", *args.model,
                   "--tasks", str(args.tasks), "--repeat", str(args.repeat)]  # fmt: skip
        output = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        lines = [line for line in output.stdout.splitlines() if line.startswith("{")]
        if output.returncode != 0 or not lines:
            print(f"{backend}: failed\n{output.stderr[-2000:]}")
            continue
        for line in lines:
            r = json.loads(line)
            print(f"{r['backend']:10} {r['model']:10} {r['weight_mib']:6} MiB  worker load {r['worker_load_s']}")
            for label in ("memmap", "pickled"):
                f = r[label]
                print(f"    {label:8} arrays {f['arrays']:7.3f} s  keras_pickle {f['keras_pickle']:7.3f} s "
                      f"({f['ratio_keras_pickle']}x)  keras {f['keras']:7.3f} s ({f['ratio_keras']}x)  "
                      f"state copied {f['state_copied']:7.3f} s (keras_pickle {f['ratio_to_copy_floor']}x)")  # fmt: skip
            if "keras_error" in r:
                print(f"    keras: {r['keras_error']}")


if __name__ == "__main__":
    main()
