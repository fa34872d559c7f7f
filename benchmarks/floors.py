"""keras_pickle against the floors any pickler of a Keras model pays, on each backend, as ratios (ours ÷ floor).

The floors, measured in the same process as the operation, interleaved with it (``common.race``), median of
``--repeat`` runs:

* dumps floor: Keras's config serialization (``serialize_keras_object`` + ``json.dumps``) plus one copy of the
  state's bytes (every variable and optimizer variable; ``common.in_band_floor``). Against it: ``dumps in band``
  (``keras_pickle.dumps(model, protocol=5)``), ``pickle in band`` (``pickle.dumps(model, protocol=5)``) and
  ``dumps oob`` (the same with a ``buffer_callback``, whose buffers never change after it returns).
* loads floor: what any loader must do: Keras's ``deserialize_keras_object`` (``from_config``) of the config with
  every ``*_initializer`` replaced by ``Zeros``, which compiles with the same optimizer, ``optimizer.build``,
  plus one copy of the state's bytes. Against it: ``loads`` (``pickle.loads`` of the out-of-band payload, its
  buffers given back) and ``deepcopy`` (``copy.deepcopy``).
* joblib floor: a loky pool of 2 workers running ``--tasks`` tasks that each own their model: the state as
  arrays (which joblib memory-maps) copied by each task (``joblib_parallel.copy_all``). Against it: the model
  as each task's argument (``joblib_parallel.read_one``); the table gives the floor per task.

Every result is checked outside the timed region (ours against the original's variables; the floor builds as
many variables). Each backend runs in a child process of its own (Keras picks its backend once per process);
the parent prints one table and writes benchmarks/results/floors.json::

    python -m benchmarks floors [--backends tensorflow jax torch] [--models dense100mb resnet50 ...]
                                [--repeat 5] [--tasks 8] [--no-joblib] [--quick]
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import pickle
import statistics
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks.common import KERAS, KP, Contender

BACKENDS = ("tensorflow", "jax", "torch")
MODELS = ("dense100mb", "resnet50", "mobilenetv3small", "mlp3")
LABELS = {"dense100mb": "6×Dense(2048)+Adam", "resnet50": "ResNet50", "mobilenetv3small": "MobileNetV3Small"}
LABELS["mlp3"] = "3-layer MLP+Adam"
OPS = ("dumps in band", "pickle in band", "dumps oob", "loads", "deepcopy", "joblib")
FLOOR_OF = {op: "dumps" for op in OPS[:3]} | {"loads": "loads", "deepcopy": "loads", "joblib": "joblib"}
ZEROS = {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": None}


def zeroed(config):
    """``config`` with every ``*_initializer`` that names one replaced by ``Zeros``."""
    if isinstance(config, dict):
        return {k: ZEROS if k.endswith("_initializer") and v is not None else zeroed(v) for k, v in config.items()}
    if isinstance(config, list):
        return [zeroed(v) for v in config]
    return config


def loads_floor(config_text: str, state: list[np.ndarray]):
    """The loads floor: ``from_config`` with zero initializers (which compiles), the optimizer built, the state
    copied once."""
    import keras

    model = keras.saving.deserialize_keras_object(json.loads(config_text))
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    return model, [np.array(array, copy=True) for array in state]


def in_process(name: str, model, repeat: int) -> tuple[dict, list[str]]:
    """Median seconds of every in-process operation and its floor, for one model."""
    import keras

    notes: list[str] = []
    variables = common.state_variables(model)
    state = [np.array(v, copy=True) for v in variables]
    config_text = json.dumps(zeroed(keras.saving.serialize_keras_object(model)))
    oob = common.dumps(model)

    def state_copied(result, first):
        if len(result[1]) != common.nbytes(variables):
            raise AssertionError(f"the dumps floor copied {len(result[1])} bytes, not the state's")

    def as_many_variables(result, first):
        if len(common.state_variables(result[0])) != len(variables):
            raise AssertionError(f"the loads floor built {len(common.state_variables(result[0]))} variables")

    def same_model(result, first):
        return common.mismatch(model, result) if first else None

    def payload(result, first):
        data = result[0] if isinstance(result, tuple) else result
        if not common.is_ours(data):
            raise AssertionError("not keras_pickle's payload: the wrong path was timed")
        return same_model(common.loads(result if isinstance(result, tuple) else (data, [])), first) if first else None

    contenders = [
        Contender("dumps floor", KERAS, lambda: common.in_band_floor(model), state_copied),
        Contender("dumps in band", KP, lambda: keras_pickle_dumps(model), payload),
        Contender("pickle in band", KP, lambda: pickle.dumps(model, protocol=5), payload),
        Contender("dumps oob", KP, lambda: common.dumps(model), payload),
        Contender("loads floor", KERAS, lambda: loads_floor(config_text, state), as_many_variables),
        Contender("loads", KP, lambda: common.loads(oob), same_model),
        Contender("deepcopy", KP, lambda: copy.deepcopy(model), same_model),
    ]
    times = common.race(contenders, repeat, notes)
    return {key: statistics.median(t) for key, t in times.items()}, [f"{name}: {note}" for note in notes]


def keras_pickle_dumps(model) -> bytes:
    import keras_pickle

    return keras_pickle.dumps(model, protocol=5)


def through_joblib(models: dict, tasks: int, repeat: int) -> tuple[dict, list[str]]:
    """Median seconds of ``tasks`` tasks each given the model, and of the joblib floor, per model."""
    import joblib

    from benchmarks.joblib_parallel import copy_all, read_one

    results, notes = {}, []
    with joblib.Parallel(n_jobs=2) as parallel:
        common.use(KP)
        for name, model in models.items():
            state = [np.asarray(v) for v in common.state_variables(model)]
            arrays = [np.asarray(v) for v in model.weights]
            parallel(joblib.delayed(read_one)(model, i) for i in range(2))  # warm: both workers import Keras

            def run(task, argument):
                return lambda: parallel(joblib.delayed(task)(argument, i) for i in range(tasks))

            contenders = [Contender("arrays", KP, run(read_one, arrays))]
            contenders += [
                Contender("joblib floor", KP, run(copy_all, state)),
                Contender("joblib", KP, run(read_one, model)),
            ]
            times = common.race(contenders, repeat, notes)
            results[name] = {key: statistics.median(t) / tasks for key, t in times.items()}
    return results, notes


def child_main(args) -> int:
    """One backend (this process's ``KERAS_BACKEND``): a result per model, emitted as it is measured."""
    import keras

    import keras_pickle
    from benchmarks import models

    keras_pickle.install()
    built = {}
    for name in args.models:
        model = built[name] = models.BENCH[name](args.quick)
        common.loads(common.dumps(model))  # warm the code paths
        seconds, notes = in_process(name, model, args.repeat)
        state = common.nbytes(common.state_variables(model))
        common.emit({"backend": keras.backend.backend(), "model": name, "state_bytes": state, "s": seconds})
        common.emit({"backend": keras.backend.backend(), "model": name, "notes": notes})
    if not args.no_joblib:
        seconds, notes = through_joblib({n: m for n, m in built.items()}, args.tasks, args.repeat)
        for name, s in seconds.items():
            common.emit({"backend": keras.backend.backend(), "model": name, "joblib_s": s, "notes": notes})
    common.emit({"backend": keras.backend.backend(), "meta": common.meta()})
    return 0


def merge(results: list[dict]) -> tuple[dict, dict]:
    """The children's results as ``{(backend, model): row}`` and ``{backend: meta}``."""
    rows, metas = {}, {}
    for r in results:
        if "meta" in r:
            metas[r["backend"]] = r["meta"]
            continue
        row = rows.setdefault((r["backend"], r["model"]), {"backend": r["backend"], "model": r["model"]})
        row.setdefault("s", {}).update(r.get("s", {}) | r.get("joblib_s", {}))
        row.setdefault("notes", []).extend(n for n in r.get("notes", []) if n not in row["notes"])
        row.setdefault("state_bytes", r.get("state_bytes"))
    for row in rows.values():
        s = row["s"]
        row["ratios"] = {op: common.ratio(s.get(op), s.get(f"{FLOOR_OF[op]} floor")) for op in OPS if op in s}
    return rows, metas


def cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def as_ratio(ratios: dict, op: str) -> str:
    return "-" if ratios.get(op) is None else f"{ratios[op]:.2f}×"


def report(rows: dict, args) -> None:
    header = ["backend", "model", "state", "dumps floor", *OPS[:3], "loads floor", "loads", "deepcopy"]
    header += ["joblib floor / task", "joblib / task"]
    lines = []
    for row in rows.values():
        s = row["s"]
        x = functools.partial(as_ratio, row["ratios"])
        cells = [row["backend"], LABELS.get(row["model"], row["model"]), common.mb(row["state_bytes"] or 0)]
        cells += [cell(s.get("dumps floor")), *map(x, OPS[:3]), cell(s.get("loads floor")), x("loads"), x("deepcopy")]
        cells += [cell(s.get("joblib floor")), x("joblib")]
        lines.append(cells)
    notes = (
        "ratio = keras_pickle ÷ the floor measured beside it in the same process; median of "
        f"{args.repeat}{' (tiny models: a smoke test, not a measurement)' * args.quick}",
        "dumps floor: serialize_keras_object + json.dumps + one copy of the state's bytes; "
        "loads floor: from_config with Zeros initializers, compile, optimizer.build + one copy of the state's bytes",
        f"joblib: {args.tasks} tasks on a loky pool of 2 workers; floor: the state as arrays joblib memory-maps, "
        "copied by each task",
        *[note for row in rows.values() for note in row["notes"]],
    )
    common.table("Ratios to the floors (ours ÷ floor)", header, lines, notes)


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__, repeat=5, summary="median")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--tasks", type=int, default=8, help="joblib tasks per run (default 8)")
    parser.add_argument("--no-joblib", action="store_true", help="skip the joblib pool")
    parser.add_argument("--json", type=Path, default=common.RESULTS / "floors.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    results, errors = [], []
    forwarded = ["--child", "--models", *args.models, "--repeat", str(args.repeat), "--tasks", str(args.tasks)]
    forwarded += ["--no-joblib"] * args.no_joblib + ["--quick"] * args.quick
    for backend in args.backends:
        got, error = common.child("floors", *forwarded, extra={"KERAS_BACKEND": backend})
        results += got
        if error:
            errors.append(f"{backend}: {error}")
            print(f"{backend}: {error}")
    rows, metas = merge(results)
    report(rows, args)
    for backend, m in metas.items():
        versions = f"Keras {m['keras']}, {backend} {m[backend]}, numpy {m['numpy']}, Python {m['python']}"
        print(f"  {backend}: {versions}; {m['platform']}, {m['cpus']} CPUs, load average {m['load_average']}")
    common.write_json(args.json, {"metas": metas, "rows": list(rows.values()), "errors": errors})
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
