"""joblib.Parallel with a model as an argument, beside the same weights as a list of numpy arrays.

Per backend (a child process each, ``KERAS_BACKEND`` set), for each model (bench's ``dense100mb``:
96 MiB of weights, 288 MiB of state with Adam's slots; ``resnet50``: keras.applications,
weights=None), one loky pool of 2 workers (warmed: Keras imported in both), ``--tasks`` tasks that
each read one weight, best of ``--repeat``, interleaved:

* ``arrays``: the weights as numpy arrays (what joblib is built for);
* ``keras_pickle``: the model, keras_pickle installed (each weight reaches joblib as a numpy array);
* ``keras``: the model, keras_pickle uninstalled (Keras's own ``__reduce__``: a .keras zip per task);
* ``state_copied``: the model's whole state (variables and optimizer slots) as numpy arrays, each
  copied out of joblib's map by the task: the least a task pays whose model owns its data;

under joblib's default (arrays over 1 MB memory-mapped) and ``max_nbytes=None`` (everything pickled
per task). Prints seconds, each model path's ratio to ``arrays`` (goal: keras_pickle <= 3x) and
keras_pickle's to ``state_copied``; and, in the child, what one task's argument costs a worker once
on disk: ``joblib.load(path, mmap_mode="r")`` of a ``joblib.dump`` of the model against the arrays'::

    python -m benchmarks joblib_parallel [--backend tensorflow jax torch] [--model dense100mb resnet50] [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks import common

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

    return float([np.array(a, copy=True) for a in arrays][0].reshape(-1)[index])


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(backend: str, name: str, tasks: int, repeat: int, quick: bool) -> dict:
    """In a process whose Keras runs ``backend``: every figure for one model."""
    import joblib
    import numpy as np

    from benchmarks import models

    model = models.BENCH[name](quick)
    arrays = [np.asarray(v) for v in model.weights]
    state = [np.asarray(v) for v in common.state_variables(model)]
    result = {"backend": backend, "model": name, "weight_mib": round(sum(a.nbytes for a in arrays) / 2**20, 1)}
    for label, max_nbytes in (("memmap", "1M"), ("pickled", None)):
        with joblib.Parallel(n_jobs=2, max_nbytes=max_nbytes) as parallel:
            common.use(common.KP)
            parallel(joblib.delayed(read_one)(model, i) for i in range(2))  # warm: both workers import Keras
            runs = {
                "arrays": ("keras_pickle", lambda: parallel(joblib.delayed(read_one)(arrays, i) for i in range(tasks))),
                "state_copied": (
                    "keras_pickle",
                    lambda: parallel(joblib.delayed(copy_all)(state, i) for i in range(tasks)),
                ),
                "keras_pickle": (
                    "keras_pickle",
                    lambda: parallel(joblib.delayed(read_one)(model, i) for i in range(tasks)),
                ),
                "keras": ("keras", lambda: parallel(joblib.delayed(read_one)(model, i) for i in range(tasks))),
            }
            times: dict = {name: [] for name in runs}
            for _ in range(repeat):
                for run_name, (impl, run) in runs.items():
                    common.use(impl)
                    try:
                        times[run_name].append(seconds(run))
                    except Exception as e:  # Keras's own pickling may fail where keras_pickle does not
                        times[run_name].append(float("nan"))
                        result[f"{run_name}_error"] = f"{type(e).__name__}: {str(e)[:120]}"
            common.use(common.KP)
        best = {name: min(values) for name, values in times.items()}
        result[label] = {name: round(s, 3) for name, s in best.items()}
        result[label]["ratio_keras_pickle"] = round(best["keras_pickle"] / best["arrays"], 1)
        result[label]["ratio_keras"] = round(best["keras"] / best["arrays"], 1)
        result[label]["ratio_to_copy_floor"] = round(best["keras_pickle"] / best["state_copied"], 1)
    with tempfile.TemporaryDirectory() as folder:
        model_path, arrays_path = Path(folder, "model.joblib"), Path(folder, "arrays.joblib")
        joblib.dump(model, model_path)
        joblib.dump(arrays, arrays_path)
        result["worker_load_s"] = {
            "keras_pickle": round(
                min(seconds(lambda: joblib.load(model_path, mmap_mode="r")) for _ in range(repeat)), 3
            ),
            "arrays": round(min(seconds(lambda: joblib.load(arrays_path, mmap_mode="r")) for _ in range(repeat)), 4),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--model", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny models (a smoke test, not a measurement)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        for name in args.model:
            common.emit(measure(args.backend[0], name, args.tasks, args.repeat, args.quick))
        return 0
    rows, loads, failed = [], [], False
    for backend in args.backend:
        argv = ["--child", "--backend", backend, "--model", *args.model, f"--tasks={args.tasks}"]
        argv += [f"--repeat={args.repeat}", *["--quick"] * args.quick]
        results, error = common.child("joblib_parallel", *argv, env={"KERAS_BACKEND": backend})
        if error:
            failed = True
            print(f"{backend}: failed\n{error}")
        for r in results:
            for label in ("memmap", "pickled"):
                f = r[label]
                cells = [f"{f['arrays']:.3f} s", f"{f['keras_pickle']:.3f} s ({f['ratio_keras_pickle']}x)"]
                cells += [f"{f['keras']:.3f} s ({f['ratio_keras']}x)", f"{f['state_copied']:.3f} s"]
                rows.append(
                    [
                        r["backend"],
                        f"{r['model']}, {r['weight_mib']} MiB",
                        label,
                        *cells,
                        f"{f['ratio_to_copy_floor']}x",
                    ]
                )
            worker = ", ".join(f"{k} {v} s" for k, v in r["worker_load_s"].items())
            errors = "; ".join(f"{k.removesuffix('_error')}: {v}" for k, v in r.items() if k.endswith("_error"))
            loads.append(f"{r['backend']} {r['model']}: worker load {worker}" + (f"; {errors}" if errors else ""))
    header = ["backend", "model", "joblib", "arrays", "keras_pickle (x arrays)", "keras (x arrays)", "state copied"]
    common.table(
        f"{args.tasks} tasks on 2 workers, best of {args.repeat}", [*header, "keras_pickle / state copied"], rows
    )
    print("\n".join(["", *loads]))
    return 1 if failed else 0
