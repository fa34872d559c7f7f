"""joblib.Parallel with a model as an argument, beside the same weights as a list of numpy arrays.

On ``KERAS_BACKEND``'s backend, per model (bench's ``dense100mb``, 96 MiB of weights, 288 MiB of state; ``resnet50``,
weights=None): a warmed loky pool of 2 workers, ``--tasks`` tasks that each read one weight, best of ``--repeat``,
interleaved (``common.race``), passing ``arrays`` (the weights), ``keras_pickle`` (the model, installed),
``keras`` (the model, uninstalled: a .keras zip per task) or ``floor`` (the whole state as arrays, which joblib
memory-maps, each copied out of joblib's map by the task: the least a task whose model owns its data pays);
under joblib's default (arrays over 1 MB memory-mapped) and ``max_nbytes=None``. Prints, per model, the arrays'
seconds, the floor's, keras_pickle's and its ratio to the floor (Keras's own too), and a worker's
``joblib.load(path, mmap_mode="r")`` of the model's ``joblib.dump`` against the arrays'::

    KERAS_BACKEND=jax python -m benchmarks joblib_parallel [--model dense100mb resnet50] [--quick]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks.common import KERAS, KP, Contender

MODELS = ("dense100mb", "resnet50")


def read_one(weights_or_model, index: int) -> float:
    """A task: one number read off the first weight (of a list of arrays, or of a model)."""
    first = weights_or_model[0] if isinstance(weights_or_model, list) else weights_or_model.weights[0]
    return float(np.asarray(first).reshape(-1)[index])


def copy_all(arrays: list, index: int) -> float:
    """A task that owns its data: every array copied out of joblib's memory map, as a loaded model must."""
    return float([np.array(a, copy=True) for a in arrays][0].reshape(-1)[index])


def measure(name: str, tasks: int, repeat: int, quick: bool) -> dict:
    """Every figure for one model, on the backend ``KERAS_BACKEND`` names."""
    import joblib

    from benchmarks import models

    model = models.BENCH[name](quick)
    arrays = [np.asarray(v) for v in model.weights]
    state = [np.asarray(v) for v in common.state_variables(model)]
    result = {"model": name, "weight_mib": round(sum(a.nbytes for a in arrays) / 2**20, 1)}
    runs = {"arrays": (KP, read_one, arrays), "floor": (KP, copy_all, state)}
    runs.update({"keras_pickle": (KP, read_one, model), "keras": (KERAS, read_one, model)})
    for label, max_nbytes in (("memmap", "1M"), ("pickled", None)):
        with joblib.Parallel(n_jobs=2, max_nbytes=max_nbytes) as parallel:
            common.use(KP)
            parallel(joblib.delayed(read_one)(model, i) for i in range(2))  # warm: both workers import Keras

            def run(task, argument):
                return lambda: parallel(joblib.delayed(task)(argument, i) for i in range(tasks))

            notes: list[str] = []
            contenders = [Contender(key, impl, run(task, argument)) for key, (impl, task, argument) in runs.items()]
            result[label] = {key: min(times) for key, times in common.race(contenders, repeat, notes).items()}
            result[label]["notes"] = notes
    with tempfile.TemporaryDirectory() as folder:
        for key, obj in (("keras_pickle", model), ("arrays", arrays)):
            joblib.dump(obj, Path(folder, key))
            seconds = []
            for _ in range(repeat):
                start = time.perf_counter()
                joblib.load(Path(folder, key), mmap_mode="r")
                seconds.append(time.perf_counter() - start)
            result.setdefault("worker_load_s", {})[key] = min(seconds)
    return result


def main(argv: list[str] | None = None) -> int:
    import keras

    parser = common.parser(__doc__, repeat=2)
    parser.add_argument("--model", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--tasks", type=int, default=8)
    args = parser.parse_args(argv)
    rows, lines = [], []
    for r in (measure(name, args.tasks, args.repeat, args.quick) for name in args.model):
        for label in ("memmap", "pickled"):
            f = r[label]
            cells = [f"{f[key]:.3f} s" for key in ("arrays", "floor", "keras_pickle")]
            cells += [f"{f['keras_pickle'] / f['floor']:.2f}x", f"{f['keras']:.3f} s ({f['keras'] / f['floor']:.1f}x)"]
            rows.append([f"{r['model']}, {r['weight_mib']} MiB", label, *cells])
            lines += [f"{r['model']} {label}: {note}" for note in f["notes"]]
        worker = ", ".join(f"{k} {v:.4f} s" for k, v in r["worker_load_s"].items())
        lines.append(f"{r['model']}: worker load {worker}")
    header = ["model", "joblib", "arrays", "floor", "keras_pickle", "keras_pickle / floor", "keras (x floor)"]
    title = f"{keras.backend.backend()}: {args.tasks} tasks on 2 workers, best of {args.repeat}"
    lines.insert(0, "floor: the state as arrays (memory-mapped by joblib), copied by each task")
    common.table(title, header, rows, tuple(lines))
    return 0
