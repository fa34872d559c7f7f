"""Speed per backend: Keras's own pickling vs keras_pickle, side by side.

Keras picks its backend once per process, so each backend (TensorFlow, JAX,
PyTorch) is measured in a child process of its own (this script with
``KERAS_BACKEND`` set). The child builds bench.py's ``dense100mb`` model
(Sequential, 6 x Dense(2048) on 2048 inputs: 96 MiB of weights; compiled with
Adam and trained one step so the optimizer slots exist: 288 MiB of state) and
times, for Keras's own path (``keras_pickle.uninstall()``) and keras_pickle's
(``keras_pickle.install()``), interleaved, best of ``--repeat``, with
``gc.collect()`` outside the timed region:

* dumps in band: ``pickle.dumps(model, protocol=5)``
* dumps out of band: ``pickle.dumps(model, protocol=5, buffer_callback=buffers.append)``
* loads: ``pickle.loads(data, buffers=buffers)`` of that implementation's own
  out-of-band payload (Keras's has no buffers).

Beside Keras's path, in-band dumps against the floor bench.py sets (Keras's config JSON plus
exactly one copy of the state bytes, ``b"".join`` of every state variable's raw bytes read without
a copy), interleaved, best of ``--repeat``: ``pickle.dumps(model, protocol=5)`` and
``keras_pickle.dumps(model, protocol=5)``, which knows there is no ``buffer_callback`` (PyTorch's
values are then read without a clone: the stream copies them before it returns). Goal: <= 1.3x.

Outside the timed region every loaded model (and one load of each in-band
payload) is checked to hold every variable of the original, equal
(``keras.ops.convert_to_numpy`` + ``np.array_equal``); a wrong keras_pickle
result is fatal, a wrong Keras result is recorded.

It also counts how many of the buffers keras_pickle's out-of-band dumps hands
out share memory with the live variables (zero-copy) and how many are copies,
by comparing address ranges. JAX gives a variable's address
(``unsafe_buffer_pointer``), PyTorch too (``data_ptr``). TensorFlow gives none:
two reads of the variable held at once that alias each other are taken as its
buffer (a read that copied would give two distinct blocks); where no address
can be had the count is "n/a".

Usage::

    nice -n 19 python benchmarks/backends.py [--backend NAME ...] [--repeat N] [--quick] [--json P]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "backends.json"  # benchmarks/results/ is git-ignored
BACKENDS = ("tensorflow", "jax", "torch")
OPS = ("dumps in band", "dumps out of band", "loads")
GOALS = {"dumps out of band": 50.0, "dumps in band": 5.0, "loads": 5.0}  # minimum ratio, on each backend
FLOOR_GOAL = 1.3  # in-band dumps at most this multiple of the floor (config + one copy of the state bytes)
MARK = "BACKENDS-RESULT "


# --------------------------------------------------------------------------
# Child: one backend
# --------------------------------------------------------------------------


def child(quick: bool, repeat: int) -> dict:
    sys.path.insert(0, str(HERE))
    import pickle
    from importlib.metadata import version

    import bench  # the same model, implementations and checks as bench.py (imports keras)
    import keras
    import numpy as np

    import keras_pickle

    backend = keras.backend.backend()
    for impl in bench.IMPLS:  # warm both code paths up on a tiny model
        bench.activate(impl)
        warm = bench.dense100mb(quick=True)
        pickle.loads(pickle.dumps(warm, protocol=5))
        bench.loads(bench.dumps(warm))
    del warm
    bench.activate(bench.KP)
    model = bench.dense100mb(quick)
    notes: list[str] = []

    def inband():
        return pickle.dumps(model, protocol=5), []

    ops = {"dumps in band": inband, "dumps out of band": lambda: bench.dumps(model)}
    payloads = {}
    for impl in bench.IMPLS:
        bench.activate(impl)
        payloads[impl] = bench.dumps(model)
        bench.check_payload(impl, payloads[impl])
    times: dict[str, dict[str, list[float]]] = {op: {impl: [] for impl in bench.IMPLS} for op in OPS}
    gc.collect()
    gc.freeze()  # later collections scan only new objects (Keras + a backend make a full one slow)
    try:
        for op in OPS:
            for _ in range(repeat):
                for impl in bench.IMPLS:
                    bench.activate(impl)
                    gc.collect()
                    if op == "loads":
                        start = time.perf_counter()
                        result = bench.loads(payloads[impl])
                        elapsed = time.perf_counter() - start
                        bench.verify(impl, model, result, notes)
                    else:
                        start = time.perf_counter()
                        result = ops[op]()
                        elapsed = time.perf_counter() - start
                        bench.check_payload(impl, result)
                    times[op][impl].append(elapsed)
                    del result
        for impl in bench.IMPLS:  # the in-band payloads load correctly too (not timed)
            bench.activate(impl)
            bench.verify(impl, model, bench.loads(inband()), notes)
    finally:
        gc.unfreeze()
    del payloads
    gc.collect()
    floors = in_band_floor(model, repeat, bench)
    bench.activate(bench.KP)
    return {
        "backend": backend,
        "versions": {
            "keras": keras.__version__,
            backend: version({"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}.get(backend, backend)),
            "numpy": np.__version__,
            "keras_pickle": keras_pickle.__version__,
        },
        "keras_pickle_file": keras_pickle.__file__,
        "keras_pickle_source": bench._source_revision(),
        "model": {"name": "dense100mb", "quick": quick, **bench.describe(model)},
        "timings": [
            {
                "op": op,
                "keras_s": min(times[op][bench.KERAS]),
                "keras_pickle_s": min(times[op][bench.KP]),
                "ratio": min(times[op][bench.KERAS]) / min(times[op][bench.KP]),
                "keras_all_s": times[op][bench.KERAS],
                "keras_pickle_all_s": times[op][bench.KP],
            }
            for op in OPS
        ],
        "copies": copies(model, backend, bench, np),
        "floor": floors,
        "notes": notes,
    }


def in_band_floor(model, repeat: int, bench) -> dict:
    """Best-of-``repeat`` seconds of the in-band floor and of both in-band writers, interleaved."""
    import pickle

    import keras_pickle

    variables = bench.state_variables(model)
    contenders = {
        "floor": lambda: (bench.keras_config_json(model), b"".join([bench.raw_bytes(v) for v in variables])),
        "pickle.dumps": lambda: pickle.dumps(model, protocol=5),
        "keras_pickle.dumps": lambda: keras_pickle.dumps(model, protocol=5),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, run in contenders.items():
            bench.activate(bench.KERAS if name == "floor" else bench.KP)
            gc.collect()
            start = time.perf_counter()
            result = run()
            times[name].append(time.perf_counter() - start)
            del result
    best = {name: min(t) for name, t in times.items()}
    return {
        "floor_s": best["floor"],
        "state_bytes": bench.nbytes(variables),
        "writers": {
            name: {"s": best[name], "ratio": best[name] / best["floor"]} for name in contenders if name != "floor"
        },
        "all_s": times,
    }


def copies(model, backend: str, bench, np) -> dict:
    """How many of keras_pickle's out-of-band buffers share memory with the live variables."""
    variables = {id(v): v for v in bench.state_variables(model)}
    for metric in model.metrics:
        variables.update((id(v), v) for v in metric.variables)
    keep: list = []  # what the ranges point into stays alive while they are compared

    def storage(v) -> tuple[int, int] | None:
        value = v.value
        if backend == "jax" and hasattr(value, "unsafe_buffer_pointer"):
            return value.unsafe_buffer_pointer(), value.nbytes
        if backend == "torch" and hasattr(value, "data_ptr"):
            return value.data_ptr(), value.numel() * value.element_size()
        if backend == "tensorflow" and hasattr(value, "read_value"):
            first, second = value.read_value(), value.read_value()
            a, b = np.asarray(first), np.asarray(second)
            keep.extend([first, second, a, b])
            if address(a) == address(b):
                return address(a), a.nbytes
        return None

    def address(array) -> int:
        return array.__array_interface__["data"][0]

    bench.activate(bench.KP)
    _, buffers = bench.dumps(model)
    raw = [np.frombuffer(b.raw(), np.uint8) for b in buffers]
    out: dict = {"buffers": len(buffers), "buffer_bytes": int(sum(r.nbytes for r in raw))}
    ranges = []
    for v in variables.values():
        try:
            found = storage(v)
        except Exception as e:  # an API this backend lacks: no address, no guess
            found, out["error"] = None, f"{v.path}: {e!r}"
        if found is None:
            out.update(zero_copy=None, copies=None, reason=f"no address for {v.path} on {backend}")
            return out
        ranges.append((found[0], found[0] + found[1]))
    shared = [r for r in raw if any(address(r) < end and start < address(r) + r.nbytes for start, end in ranges)]
    out.update(zero_copy=len(shared), copies=len(buffers) - len(shared))
    out["zero_copy_bytes"] = int(sum(r.nbytes for r in shared))
    out["copied_bytes"] = out["buffer_bytes"] - out["zero_copy_bytes"]
    return out


# --------------------------------------------------------------------------
# Parent: one child per backend, the table, the JSON
# --------------------------------------------------------------------------


def run_child(backend: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--repeat", str(args.repeat)]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}  # PYTHONPATH passes on
    proc = subprocess.run(cmd + (["--quick"] if args.quick else []), env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        return {"backend": backend, "error": f"child exited {proc.returncode}", "stderr": proc.stderr[-4000:]}
    result = json.loads(lines[-1][len(MARK) :])
    if result["backend"] != backend:
        return {"backend": backend, "error": f"the child ran {result['backend']!r}, not {backend!r}"}
    return result


def print_table(results: list[dict], repeat: int) -> None:
    columns = ["backend", "op", "Keras s", "keras_pickle s", "ratio"]
    rows = [
        [r["backend"], t["op"], f"{t['keras_s']:.4f}", f"{t['keras_pickle_s']:.4f}", f"{t['ratio']:.1f}×"]
        for r in results
        if "timings" in r
        for t in r["timings"]
    ]
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(columns)]
    print(f"\nKeras's own pickling vs keras_pickle, best of {repeat}, ratio = Keras s / keras_pickle s")
    for row in [columns, ["-" * w for w in widths], *rows]:
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    print(f"\nIn-band dumps vs the floor (config JSON + one copy of the state bytes), goal <= {FLOOR_GOAL:g}×")
    for r in results:
        if "floor" in r:
            f = r["floor"]
            cells = [f"{name} {w['s']:.4f} s = {w['ratio']:.2f}×" for name, w in f["writers"].items()]
            print(f"{r['backend']}: floor {f['floor_s']:.4f} s; " + "; ".join(cells))
    print()
    for r in results:
        if "error" in r:
            print(f"{r['backend']}: FAILED ({r['error']})\n{r.get('stderr', '')}")
            continue
        c = r["copies"]
        if c["zero_copy"] is None:
            print(f"copies {r['backend']}: n/a of {c['buffers']} buffers ({c['reason']})")
        else:
            print(
                f"copies {r['backend']}: {c['copies']} of {c['buffers']} out-of-band buffers are copies "
                f"({c['copied_bytes'] / 2**20:.1f} MiB), {c['zero_copy']} share memory with the live variables "
                f"({c['zero_copy_bytes'] / 2**20:.1f} MiB)"
            )
        goals = [
            f"{op} >= {need:g}×: {'holds' if g['holds'] else 'MISSED'} ({g['ratio']:.2f}×)"
            for op, need, g in goal_rows(r)
        ]
        quick = " (--quick: a smoke test, not a measurement)" if r["model"]["quick"] else ""
        print(f"goals  {r['backend']}{quick}: " + "; ".join(goals))
        for note in r["notes"]:
            print(f"note   {r['backend']}: {note}")


def goal_rows(result: dict) -> list[tuple[str, float, dict]]:
    by_op = {t["op"]: t for t in result["timings"]}
    return [
        (op, need, {"holds": by_op[op]["ratio"] >= need, "ratio": by_op[op]["ratio"]}) for op, need in GOALS.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable (default: all three)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    parser.add_argument("--quick", action="store_true", help="a tiny model (a smoke test, not a measurement)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")
    if args.child:
        print(MARK + json.dumps(child(args.quick, args.repeat)), flush=True)
        return 0
    backends = list(dict.fromkeys(args.backend or BACKENDS))
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = []
    for backend in backends:
        print(f"{time.perf_counter() - started:7.1f}s  [{backend}] measuring in a child process", flush=True)
        results.append(run_child(backend, args))
    print_table(results, args.repeat)
    for r in results:
        if "timings" in r:
            r["goals"] = [{"op": op, "min_ratio": need, **g} for op, need, g in goal_rows(r)]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "what": "speed per backend, Keras's own pickling vs keras_pickle (see benchmarks/backends.py)",
        "command": [Path(sys.executable).name, *sys.argv],
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "repeat": args.repeat,
        "quick": args.quick,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "nice": os.nice(0)},
        "load_average_before_after": [load_before, os.getloadavg()],
        "elapsed_s": time.perf_counter() - started,
        "results": results,
    }
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nresults: {args.json}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
