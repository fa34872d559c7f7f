"""Benchmark keras_pickle against Keras 3's own pickling, side by side, in one process.

What is measured
----------------
Two implementations of the *same calls* (``pickle.dumps(model, protocol=5,
buffer_callback=buffers.append)``, ``pickle.loads(data, buffers=buffers)``,
``copy.deepcopy(model)``):

* ``keras``: after ``keras_pickle.uninstall()``, Keras's own
  ``KerasSaveable.__reduce__`` (a ``.keras`` zip with an HDF5 weights file
  written into a ``BytesIO``, reloaded through ``saving_lib``). It yields no
  out-of-band buffers.
* ``keras_pickle``: after ``keras_pickle.install()``; every weight array goes
  out of band through ``buffer_callback``.

The two are toggled before every single measurement and the repetitions are
interleaved (keras, keras_pickle, keras, ...), so drift hits both alike. Each
figure is the best of N runs (``time.perf_counter``), after a ``gc.collect()``
outside the timed region (objects alive before an operation's runs are
``gc.freeze()``-ed so that collection stays cheap; both paths alike). Every
object keras_pickle returns is checked, outside the timed region, to hold
exactly the original's variables (model and optimizer, ``np.array_equal``) so
a wrong result is never timed; Keras's results are checked the same way and a
mismatch is recorded, not fatal.

Workloads: ``dense100mb`` (Sequential, 6 x Dense(2048) on 2048 inputs,
compiled with Adam and trained one step so the optimizer slots exist: dumps,
loads, deepcopy), ``deep150`` (Sequential of 150 x Dense(32): dumps, loads),
``resnet50`` (``keras.applications.ResNet50(weights=None)``: dumps, loads and
their sum). ``--quick`` swaps in tiny models of the same shape of problem.

Peak extra resident memory of dumps and loads (protocol 5, out-of-band buffers)
is measured in a child process per (model, implementation): the child builds
the model, warms the code path up on a tiny model, resets the peak
(``echo 5 > /proc/self/clear_refs``) after ``malloc_trim(0)`` (so freed but
still-resident heap pages cannot hide new allocations), reads ``VmRSS``, runs
the operation and reads ``VmHWM``; the difference is reported as a multiple of the model's state
bytes (every variable pickled: weights and optimizer slots). With ``--quick``
a single child measures every tiny model in turn (a smoke test, not a
measurement).

A sweep times dumps and loads against parameter count (4 wide Dense layers)
and depth (n x Dense(32)), and measures memory against parameter count.
Results go to a JSON file and a 2x2 PNG chart.

Usage::

    python benchmarks/bench.py [--quick] [--repeat N] [--only WORKLOAD ...]
                               [--no-sweep] [--no-memory] [--json P] [--png P]
                               [--profile]

``--profile`` also runs cProfile over keras_pickle's loads of the selected
workloads and prints the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import json
import os
import pickle
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_pickle  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "results.json"
DEFAULT_PNG = HERE / "results" / "bench.png"

KERAS, KP = "keras", "keras_pickle"
IMPLS = (KERAS, KP)

# Goals this benchmark reports on: (label, workload, op, minimum ratio).
SPEED_GOALS = [
    ("dumps 100MB >= 5x", "dense100mb", "dumps", 5.0),
    ("loads 100MB >= 3x", "dense100mb", "loads", 3.0),
    ("deepcopy 100MB >= 3x", "dense100mb", "deepcopy", 3.0),
    ("loads 150-layer Sequential >= 10x", "deep150", "loads", 10.0),
    ("dumps+loads ResNet50 >= 2x", "resnet50", "dumps+loads", 2.0),
]
MEMORY_GOALS = [
    ("peak extra memory, dumps <= 0.25x state bytes", "dumps", 0.25),
    ("peak extra memory, loads <= 1.5x state bytes", "loads", 1.5),
]


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------


def dense100mb(quick: bool = False) -> keras.Model:
    """6 x Dense(2048) on 2048 inputs, Adam, trained one step (slots exist)."""
    width = 64 if quick else 2048
    model = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width, activation="relu") for _ in range(6)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, width)).astype("float32")
    model.train_on_batch(x, x)
    return model


def deep150(quick: bool = False) -> keras.Model:
    """A Sequential of 150 x Dense(32) on 32 inputs."""
    return deep_mlp(15 if quick else 150)


def resnet50(quick: bool = False) -> keras.Model:
    """keras.applications.ResNet50(weights=None), or a tiny residual net."""
    if not quick:
        return keras.applications.ResNet50(weights=None)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    for _ in range(2):
        y = keras.layers.Conv2D(8, 3, padding="same")(x)
        y = keras.layers.BatchNormalization()(y)
        y = keras.layers.Activation("relu")(y)
        x = keras.layers.Add()([x, y])
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))


def deep_mlp(depth: int) -> keras.Model:
    return keras.Sequential([keras.Input((32,))] + [keras.layers.Dense(32) for _ in range(depth)])


def wide_mlp(params: int) -> keras.Model:
    """4 Dense(w) layers on w inputs, with w chosen so the model has about ``params`` parameters."""
    width = max(2, int(round((params / 4) ** 0.5)))
    return keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width) for _ in range(4)])


WORKLOADS: dict[str, tuple[Callable[[bool], keras.Model], tuple[str, ...]]] = {
    "dense100mb": (dense100mb, ("dumps", "loads", "deepcopy")),
    "deep150": (deep150, ("dumps", "loads")),
    "resnet50": (resnet50, ("dumps", "loads")),
}

SWEEP_PARAMS = [1_000_000, 3_000_000, 10_000_000, 30_000_000, 100_000_000]
SWEEP_DEPTH = [10, 30, 100, 300]
QUICK_SWEEP_PARAMS = [10_000, 30_000]
QUICK_SWEEP_DEPTH = [3, 10]


def build(spec: dict) -> keras.Model:
    """A model from a JSON-able spec (also how memory children rebuild it)."""
    kind = spec["kind"]
    if kind in WORKLOADS:
        return WORKLOADS[kind][0](spec.get("quick", False))
    if kind == "wide":
        return wide_mlp(spec["params"])
    if kind == "depth":
        return deep_mlp(spec["depth"])
    raise ValueError(f"Unknown model kind {kind!r}")


def tiny_spec(spec: dict) -> dict:
    """A small model of the same kind, to warm code paths up."""
    if spec["kind"] in WORKLOADS:
        return {"kind": spec["kind"], "quick": True}
    if spec["kind"] == "wide":
        return {"kind": "wide", "params": 10_000}
    return {"kind": "depth", "depth": 3}


def state_variables(model: keras.Model) -> list:
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        variables += list(optimizer.variables)
    return variables


def nbytes(variables) -> int:
    return int(sum(np.dtype(v.dtype).itemsize * int(np.prod(v.shape)) for v in variables))


def describe(model: keras.Model) -> dict:
    return {
        "params": int(model.count_params()),
        "weight_bytes": nbytes(model.variables),
        "state_bytes": nbytes(state_variables(model)),
        "n_layers": len(model.layers),
    }


# --------------------------------------------------------------------------
# The two implementations, and correctness checks
# --------------------------------------------------------------------------


def activate(impl: str) -> None:
    """Make plain pickle/copy use ``impl``; check that it took."""
    if impl == KP:
        keras_pickle.install()
        assert keras_pickle.is_installed()
    else:
        keras_pickle.uninstall()
        assert not keras_pickle.is_installed()


def dumps(model: Any) -> tuple[bytes, list]:
    buffers: list = []
    data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    return data, buffers


def loads(payload: tuple[bytes, list]) -> Any:
    data, buffers = payload
    return pickle.loads(data, buffers=buffers)


def check_payload(impl: str, payload: tuple[bytes, list]) -> None:
    ours = b"keras_pickle._format" in payload[0]
    if ours != (impl == KP):
        raise AssertionError(f"{impl} produced {'a' if ours else 'no'} keras_pickle payload: wrong path measured.")


def mismatch(original: Any, other: Any) -> str | None:
    """None if ``other`` holds exactly ``original``'s variables, else what differs."""
    a, b = state_variables(original), state_variables(other)
    if len(a) != len(b):
        return f"{len(b)} variables instead of {len(a)}"
    for x, y in zip(a, b):
        if x is y:
            return f"variable {x.path} is shared, not copied"
        xa, ya = keras.ops.convert_to_numpy(x.value), keras.ops.convert_to_numpy(y.value)
        if xa.shape != ya.shape or xa.dtype != ya.dtype or not np.array_equal(xa, ya):
            return f"variable {x.path} differs"
    return None


def verify(impl: str, original: Any, result: Any, notes: list[str]) -> None:
    problem = mismatch(original, result)
    if problem is None:
        return
    if impl == KP:
        raise AssertionError(f"keras_pickle returned a wrong result: {problem}")
    note = f"Keras's result differs from the original: {problem}"
    if note not in notes:
        notes.append(note)


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def time_op(model: Any, op: str, repeat: int, notes: list[str]) -> dict[str, list[float]]:
    """Best-of-``repeat`` times of ``op`` for both implementations, interleaved."""
    payloads = {}
    if op == "loads":
        for impl in IMPLS:
            activate(impl)
            payloads[impl] = dumps(model)
            check_payload(impl, payloads[impl])
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    # With Keras and TensorFlow loaded a full collection takes ~0.4 s: freeze
    # what exists now so the collections between runs only scan new objects.
    # (The caller collects fully once it drops the model.)
    gc.freeze()
    try:
        _time_runs(model, op, repeat, payloads, times, notes)
    finally:
        gc.unfreeze()
    return times


def _time_runs(model, op, repeat, payloads, times, notes) -> None:
    for _ in range(repeat):
        for impl in IMPLS:
            activate(impl)
            gc.collect()
            if op == "dumps":
                start = time.perf_counter()
                result = dumps(model)
                elapsed = time.perf_counter() - start
                check_payload(impl, result)
            elif op == "loads":
                start = time.perf_counter()
                result = loads(payloads[impl])
                elapsed = time.perf_counter() - start
                verify(impl, model, result, notes)
            elif op == "deepcopy":
                start = time.perf_counter()
                result = copy.deepcopy(model)
                elapsed = time.perf_counter() - start
                verify(impl, model, result, notes)
            else:
                raise ValueError(op)
            times[impl].append(elapsed)
            del result


def row(workload: str, op: str, times: dict[str, list[float]] | None = None, **extra) -> dict:
    r = {"workload": workload, "op": op, **extra}
    if times is not None:
        r["keras_s"], r["keras_pickle_s"] = min(times[KERAS]), min(times[KP])
        r["keras_all_s"], r["keras_pickle_all_s"] = times[KERAS], times[KP]
    if r.get("keras_s") is not None and r.get("keras_pickle_s"):
        r["ratio"] = r["keras_s"] / r["keras_pickle_s"]
    return r


def run_workloads(names: list[str], quick: bool, repeat: int, errors: list[dict], say) -> tuple[list, dict]:
    rows, info = [], {}
    for name in names:
        builder, ops = WORKLOADS[name]
        say(f"[{name}] building")
        keras_pickle.install()
        model = builder(quick)
        info[name] = describe(model)
        say(
            f"[{name}] {info[name]['params']:,} params, {mb(info[name]['weight_bytes'])} weights, "
            f"{mb(info[name]['state_bytes'])} state incl. optimizer"
        )
        for op in ops:
            notes: list[str] = []
            say(f"[{name}] {op} x{repeat}")
            try:
                times = time_op(model, op, repeat, notes)
            except Exception as e:
                errors.append({"workload": name, "op": op, "error": repr(e), "traceback": traceback.format_exc()})
                say(f"[{name}] {op} FAILED: {e!r}\n{traceback.format_exc()}")
                rows.append(row(name, op, error=repr(e)))
                continue
            rows.append(row(name, op, times, notes=notes))
        if name == "resnet50":
            by_op = {r["op"]: r for r in rows if r["workload"] == name and "keras_s" in r}
            if "dumps" in by_op and "loads" in by_op:
                rows.append(
                    row(
                        name,
                        "dumps+loads",
                        keras_s=by_op["dumps"]["keras_s"] + by_op["loads"]["keras_s"],
                        keras_pickle_s=by_op["dumps"]["keras_pickle_s"] + by_op["loads"]["keras_pickle_s"],
                        notes=["sum of the best dumps and best loads"],
                    )
                )
        del model
        keras_pickle.install()
        keras.backend.clear_session()
        gc.collect()
    return rows, info


def run_sweep(quick: bool, repeat: int, errors: list[dict], say) -> dict:
    sweep: dict[str, list[dict]] = {"params": [], "depth": []}
    points = [("params", {"kind": "wide", "params": p}) for p in (QUICK_SWEEP_PARAMS if quick else SWEEP_PARAMS)]
    points += [("depth", {"kind": "depth", "depth": d}) for d in (QUICK_SWEEP_DEPTH if quick else SWEEP_DEPTH)]
    for axis, spec in points:
        keras_pickle.install()
        model = build(spec)
        point = {**spec, **describe(model)}
        say(f"[sweep {axis}={spec.get(axis)}] {point['params']:,} params")
        for op in ("dumps", "loads"):
            notes: list[str] = []
            try:
                times = time_op(model, op, repeat, notes)
            except Exception as e:
                errors.append(
                    {
                        "workload": f"sweep {axis}={spec.get(axis)}",
                        "op": op,
                        "error": repr(e),
                        "traceback": traceback.format_exc(),
                    }
                )
                say(f"  {op} FAILED: {e!r}")
                continue
            point[op] = row("sweep", op, times, notes=notes)
        sweep[axis].append(point)
        del model
        keras_pickle.install()
        keras.backend.clear_session()
        gc.collect()
    return sweep


# --------------------------------------------------------------------------
# Memory (in child processes)
# --------------------------------------------------------------------------


def _proc_status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _release_free_memory() -> None:
    """Hand freed heap memory back to the OS (glibc), so an operation cannot hide
    its allocations in pages that earlier, freed allocations left resident."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _measure(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """Run ``fn``; return its result, the peak extra RSS during it and the RSS it left behind."""
    gc.collect()
    _release_free_memory()
    _reset_peak()
    before = _proc_status_kb("VmRSS")
    result = fn()
    peak = _proc_status_kb("VmHWM")
    after = _proc_status_kb("VmRSS")
    return result, peak - before, after - before


def memory_child(specs: list[dict]) -> list[dict]:
    """Runs in a fresh interpreter: :func:`memory_of` for each spec, in order."""
    source = _source_revision()
    return [{**memory_of(spec), "keras_pickle_source": source} for spec in specs]


def memory_of(spec: dict) -> dict:
    """Peak extra memory of dumps and loads of one model (``spec["model"]``) with one impl."""
    impl = spec["impl"]
    activate(impl)
    warm = build(tiny_spec(spec["model"]))
    loads(dumps(warm))
    del warm
    model = build(spec["model"])
    out = {"impl": impl, "model": spec["model"], **describe(model)}
    gc.collect()
    gc.freeze()  # keeps the collections in _measure cheap
    payload, out["dumps_peak_extra"], out["dumps_retained"] = _measure(functools.partial(dumps, model))
    check_payload(impl, payload)
    out["payload_inband_bytes"] = len(payload[0])
    out["payload_outofband_bytes"] = sum(memoryview(b).nbytes for b in payload[1])
    result, out["loads_peak_extra"], out["loads_retained"] = _measure(functools.partial(loads, payload))
    problem = mismatch(model, result)
    if problem and impl == KP:
        raise AssertionError(f"keras_pickle returned a wrong result: {problem}")
    out["loads_result_ok"] = problem is None
    for op in ("dumps", "loads"):
        out[f"{op}_peak_extra_x"] = out[f"{op}_peak_extra"] / out["state_bytes"]
    del model, payload, result
    gc.unfreeze()
    keras.backend.clear_session()
    return out


def memory_jobs(names: list[str], quick: bool, *, sweep: bool) -> list[dict]:
    """What to measure: dense100mb, and the parameter sweep's models, with both impls."""
    jobs = []
    if "dense100mb" in names:
        jobs += [{"model": {"kind": "dense100mb", "quick": quick}, "impl": i, "label": "dense100mb"} for i in IMPLS]
    if sweep:
        for p in QUICK_SWEEP_PARAMS if quick else SWEEP_PARAMS:
            jobs += [{"model": {"kind": "wide", "params": p}, "impl": i, "label": f"wide {p}"} for i in IMPLS]
    return jobs


def run_memory_children(jobs: list[dict], say, *, shared: bool, parallel: int = 2) -> tuple[list[dict], list[dict]]:
    """Measure ``jobs`` (a model spec and an impl each) in child processes, ``parallel`` at a time.

    One child per job, unless ``shared`` (``--quick``): then a single child
    runs every job in turn, which saves interpreter start-ups but lets earlier
    jobs' freed memory lower later peaks (tiny models are noise anyway).
    """
    groups = [jobs] if shared else [[j] for j in jobs]

    def run_group(group: list[dict]) -> list[dict]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", json.dumps(group)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
        if proc.returncode != 0 or not lines:
            failure = {"error": f"child exited {proc.returncode}", "traceback": proc.stderr[-4000:]}
            return [{**failure, "job": job} for job in group]
        return json.loads(lines[-1])

    results, errors = [], []
    with ThreadPoolExecutor(parallel) as pool:
        for group, outcome in zip(groups, pool.map(run_group, groups)):
            for job, res in zip(group, outcome):
                if "error" in res:
                    errors.append({"workload": f"memory {job['label']} {job['impl']}", "op": "memory", **res})
                    say(f"[memory] {job['label']} {job['impl']} FAILED:\n{res['traceback']}")
                else:
                    say(
                        f"[memory] {job['label']} {job['impl']}: dumps {res['dumps_peak_extra_x']:.2f}x, "
                        f"loads {res['loads_peak_extra_x']:.2f}x of {mb(res['state_bytes'])}"
                    )
                    results.append({**res, "label": job["label"]})
    return results, errors


# --------------------------------------------------------------------------
# Profiling
# --------------------------------------------------------------------------


def profile_loads(names: list[str], quick: bool, top: int = 10) -> dict[str, list[dict]]:
    """cProfile of one keras_pickle loads per workload; the top functions by cumulative time."""
    import cProfile
    import pstats

    out = {}
    for name in names:
        activate(KP)
        model = WORKLOADS[name][0](quick)
        payload = dumps(model)
        loads(payload)  # warm up
        gc.collect()
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        result = loads(payload)
        profiler.disable()
        wall = time.perf_counter() - start
        assert mismatch(model, result) is None
        stats = pstats.Stats(profiler)
        entries = sorted(stats.stats.items(), key=lambda kv: kv[1][3], reverse=True)
        out[name] = [
            {"function": _short(func), "ncalls": nc, "tottime": tt, "cumtime": ct}
            for func, (_cc, nc, tt, ct, _callers) in entries[:top]
        ]
        print(
            f"\ncProfile of keras_pickle loads of {name} (wall {wall:.3f} s under the profiler), "
            f"top {top} by cumulative time:"
        )
        print(f"{'cumtime s':>10} {'tottime s':>10} {'ncalls':>8}  function")
        for e in out[name]:
            print(f"{e['cumtime']:>10.3f} {e['tottime']:>10.3f} {e['ncalls']:>8}  {e['function']}")
        del model, result, payload
        keras.backend.clear_session()
        gc.collect()
    return out


def _short(func: tuple) -> str:
    filename, line, name = func
    for marker in ("site-packages/", "/work/main/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
    return f"{filename}:{line}({name})" if line else name


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
        print(f"\n{title}")
        print(" | ".join(c.ljust(w) for c, w in zip(columns, widths)))
        print("-+-".join("-" * w for w in widths))
        for r in rows:
            print(" | ".join(v.ljust(w) for v, w in zip(r, widths)))
        return
    table = Table(title=title)
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i < 2 else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=max(100, Console().width)).print(table)


def fmt_s(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def timing_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else ("FAILED" if "error" in r else "—")
        out.append([r["workload"], r["op"], fmt_s(r.get("keras_s")), fmt_s(r.get("keras_pickle_s")), ratio])
    return out


def evaluate_goals(rows: list[dict], memory: list[dict], quick: bool) -> list[dict]:
    """Pass/fail of each goal; with ``quick`` (tiny models) the values are shown but not judged."""
    goals = _goals(rows, memory)
    if quick:
        for g in goals:
            g["pass"] = None
    return goals


def _goals(rows: list[dict], memory: list[dict]) -> list[dict]:
    goals = []
    for label, workload, op, minimum in SPEED_GOALS:
        r = next((r for r in rows if r["workload"] == workload and r["op"] == op), None)
        value = r.get("ratio") if r else None
        goals.append(
            {"goal": label, "value": value, "unit": "x faster", "pass": None if value is None else value >= minimum}
        )
    kp = next((m for m in memory if m.get("label") == "dense100mb" and m["impl"] == KP), None)
    for label, op, maximum in MEMORY_GOALS:
        value = kp[f"{op}_peak_extra_x"] if kp else None
        goals.append(
            {
                "goal": label,
                "value": value,
                "unit": "x state bytes",
                "pass": None if value is None else value <= maximum,
            }
        )
    return goals


def draw_chart(sweep: dict, memory: list[dict], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib); no chart drawn.")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    colors = {KERAS: "tab:red", KP: "tab:blue"}
    styles = {"dumps": "-o", "loads": "--s"}
    for ax, axis, xlabel in ((axes[0, 0], "params", "parameters"), (axes[0, 1], "depth", "Dense(32) layers")):
        points = sweep.get(axis, [])
        for op in ("dumps", "loads"):
            for impl, key in ((KERAS, "keras_s"), (KP, "keras_pickle_s")):
                xy = [(p[axis], p[op][key]) for p in points if op in p]
                if xy:
                    ax.plot(*zip(*xy), styles[op], color=colors[impl], label=f"{impl} {op}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("best time (s)")
        ax.set_title(f"time vs {xlabel}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    for ax, op, goal in ((axes[1, 0], "dumps", 0.25), (axes[1, 1], "loads", 1.5)):
        for impl in IMPLS:
            xy = sorted(
                (m["params"], m[f"{op}_peak_extra_x"])
                for m in memory
                if m["impl"] == impl and m["model"].get("kind") == "wide"
            )
            if xy:
                ax.plot(*zip(*xy), "-o", color=colors[impl], label=impl)
        ax.axhline(goal, color="gray", linestyle=":", label=f"goal <= {goal}x")
        ax.set_xscale("log")
        ax.set_xlabel("parameters")
        ax.set_ylabel("peak extra RSS / state bytes")
        ax.set_title(f"peak extra memory of {op} (protocol 5, out-of-band)")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(
        f"Keras {keras.__version__} pickling vs keras_pickle {keras_pickle.__version__} "
        f"({keras.backend.backend()} backend)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"chart written to {path}")


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="keras-pickle bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models (for tests); finishes in about a minute")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(WORKLOADS),
        metavar="WORKLOAD",
        help=f"run only these workloads ({', '.join(WORKLOADS)})",
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the parameter-count and depth sweeps")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurements (child processes)")
    parser.add_argument("--profile", action="store_true", help="cProfile keras_pickle's loads of each workload")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})")
    parser.add_argument("--png", type=Path, default=DEFAULT_PNG, help=f"chart file (default {DEFAULT_PNG})")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(json.loads(args.memory_child))), flush=True)
        return 0
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")

    started = time.perf_counter()
    source = _source_revision()  # what was imported, before anyone edits it

    def say(message: str) -> None:
        print(f"{time.perf_counter() - started:7.1f}s  {message}", flush=True)

    names = args.only or list(WORKLOADS)
    say(f"keras_pickle {keras_pickle.__version__} from {Path(keras_pickle.__file__).parent} ({source or 'no git'})")
    errors: list[dict] = []
    jobs = [] if args.no_memory else memory_jobs(names, args.quick, sweep=not args.no_sweep)
    rows, info = run_workloads(names, args.quick, args.repeat, errors, say)
    sweep = {} if args.no_sweep else run_sweep(args.quick, args.repeat, errors, say)

    memory: list[dict] = []
    if jobs:
        # --quick is a smoke test: one child measures every tiny model.
        say(f"[memory] {len(jobs)} measurements in {'one child process' if args.quick else 'child processes'}")
        memory, memory_errors = run_memory_children(jobs, say, shared=args.quick)
        errors += memory_errors
        moved = {m["keras_pickle_source"] for m in memory} - {source}
        if moved:
            say(f"WARNING: keras_pickle changed during the run; memory children measured {', '.join(moved)}")

    profile = profile_loads(names, args.quick) if args.profile else {}

    activate(KP)
    print_table(
        f"Keras {keras.__version__} own pickling vs keras_pickle {keras_pickle.__version__}: "
        f"best of {args.repeat}, ratio = keras s / keras_pickle s",
        ["workload", "op", "keras s", "keras_pickle s", "ratio"],
        timing_rows(rows),
    )
    print(
        "model sizes: "
        + "; ".join(
            f"{n}: {i['params']:,} params, weights {mb(i['weight_bytes'])}, state {mb(i['state_bytes'])}"
            for n, i in info.items()
        )
    )
    for r in rows:
        for note in r.get("notes", []):
            print(f"note [{r['workload']} {r['op']}]: {note}")
    if sweep:
        sweep_rows = []
        for axis in ("params", "depth"):
            for p in sweep[axis]:
                for op in ("dumps", "loads"):
                    if op in p:
                        sweep_rows.append(
                            [
                                f"{axis}={p[axis]:,} ({p['params']:,} params)",
                                op,
                                fmt_s(p[op]["keras_s"]),
                                fmt_s(p[op]["keras_pickle_s"]),
                                f"{p[op]['ratio']:.2f}x",
                            ]
                        )
        print_table("Sweep", ["point", "op", "keras s", "keras_pickle s", "ratio"], sweep_rows)
    if memory:
        print_table(
            "Peak extra resident memory (protocol 5, out-of-band buffers; x = / state bytes)",
            ["model", "impl", "state", "dumps peak", "dumps x", "loads peak", "loads x"],
            [
                [
                    m["label"],
                    m["impl"],
                    mb(m["state_bytes"]),
                    mb(m["dumps_peak_extra"]),
                    f"{m['dumps_peak_extra_x']:.2f}x",
                    mb(m["loads_peak_extra"]),
                    f"{m['loads_peak_extra_x']:.2f}x",
                ]
                for m in memory
            ],
        )
    goals = evaluate_goals(rows, memory, args.quick)
    unjudged = "not judged (--quick)" if args.quick else "not measured"
    print_table(
        "Goals",
        ["goal", "measured", "status"],
        [
            [
                g["goal"],
                "—" if g["value"] is None else f"{g['value']:.2f} {g['unit']}",
                unjudged if g["pass"] is None else ("PASS" if g["pass"] else "FAIL"),
            ]
            for g in goals
        ],
    )
    for e in errors:
        print(f"\nERROR in {e['workload']} {e['op']}: {e['error']}\n{e.get('traceback', '')}")

    results = {
        "meta": {
            "keras": keras.__version__,
            "keras_pickle": keras_pickle.__version__,
            "keras_pickle_source": source,
            "backend": keras.backend.backend(),
            "backend_version": _backend_version(),
            "numpy": np.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "quick": args.quick,
            "repeat": args.repeat,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "wall_s": time.perf_counter() - started,
        },
        "models": info,
        "timings": rows,
        "sweep": sweep,
        "memory": memory,
        "goals": goals,
        "profile": profile,
        "errors": errors,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"results written to {args.json}")
    if sweep:  # the chart plots the sweeps (and the memory of the sweep's models)
        draw_chart(sweep, memory, args.png)
    return 1 if errors else 0


def _source_revision() -> str:
    """Which keras_pickle source is measured: its git commit ("+dirty" for local
    changes) and a digest of its .py files, so that edits during a run show."""
    import hashlib

    package = Path(keras_pickle.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=package, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=package, capture_output=True, text=True)
        git = commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if commit.returncode == 0 else "no git"
    except OSError:
        git = "no git"
    return f"{git} sha256:{digest.hexdigest()[:12]}"


def _backend_version() -> str | None:
    try:
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            return tf.__version__
    except Exception:
        pass
    return None


if __name__ == "__main__":
    sys.exit(main())
