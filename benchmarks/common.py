"""The benchmarks' helpers: which pickling runs, timing, checks, child processes, reports, options.

Keras's own path (:data:`KERAS`: ``keras_pickle.uninstall()``) and keras_pickle's (:data:`KP`) run side by side,
through keras_pickle's public API; nothing asserts a time. Keras is imported only by the functions that need it
(``keras-pickle bench --help`` answers before it is).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import pickle
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import keras_pickle  # imports neither Keras nor a backend

KERAS, KP = "keras", "keras_pickle"
IMPLS = (KERAS, KP)
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"  # git-ignored
BENCH_MODELS = ("mlp3", "mobilenetv3small", "efficientnetb0", "resnet50", "deep150", "dense100mb")
"""bench's models (the keys of ``benchmarks.models.BENCH``), known here without importing Keras."""


def use(impl: str) -> None:
    """Plain ``pickle`` and ``copy`` through ``impl``: :data:`KERAS` or :data:`KP`."""
    keras_pickle.install() if impl == KP else keras_pickle.uninstall()
    assert keras_pickle.is_installed() == (impl == KP)


def dumps(obj: Any, *, in_band: bool = False) -> tuple[bytes, list]:
    """Protocol 5, buffers out of band (or everything in the one bytes object)."""
    buffers: list = []
    return pickle.dumps(obj, protocol=5, buffer_callback=None if in_band else buffers.append), buffers


def loads(payload: tuple[bytes, list]) -> Any:
    return pickle.loads(payload[0], buffers=payload[1])


def is_ours(data: bytes) -> bool:
    """Whether keras_pickle wrote ``data`` (its reconstructor's name is part of the wire format)."""
    return b"keras_pickle._format" in data


# Timing: contenders interleaved, best of N


@dataclasses.dataclass
class Contender:
    name: str
    impl: str  # KERAS or KP: keras_pickle uninstalled or installed while it runs
    run: Callable[[], Any]
    check: Callable[[Any, bool], str | None] | None = None  # (result, first run) -> what is wrong, or None


def race(contenders: list[Contender], repeat: int, notes: list[str] | None = None, slow_s: float = 15.0) -> dict:
    """Each contender's seconds per run over ``repeat`` rounds of a, b, c, a, b, c... (drift hits all alike);
    one whose first run took over ``slow_s`` runs once. Each run: ``perf_counter`` after a ``gc.collect()`` (what
    existed before frozen), CUDA's queue waited for. Checks run untimed: a wrong keras_pickle result raises,
    a problem with Keras's or a floor's goes to ``notes``."""
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    torch = sys.modules.get("torch")
    sync = torch.cuda.synchronize if torch is not None and torch.cuda.is_available() else lambda: None
    gc.collect()
    gc.freeze()
    try:
        for _ in range(repeat):
            for c in contenders:
                if times[c.name] and times[c.name][0] > slow_s:
                    continue
                use(c.impl)
                gc.collect()
                start = time.perf_counter()
                try:
                    result = c.run()
                except Exception as e:  # Keras's own pickling fails where keras_pickle does not: noted, timed as nan
                    if c.impl == KP or notes is None:
                        raise
                    notes.append(f"{c.name} failed: {type(e).__name__}: {str(e)[:120]}")
                    times[c.name].append(float("nan"))
                    continue
                sync()
                elapsed = time.perf_counter() - start
                problem = c.check(result, not times[c.name]) if c.check is not None else None
                if problem and c.impl == KP:
                    raise AssertionError(f"keras_pickle returned a wrong result ({c.name}): {problem}")
                if problem and notes is not None and problem not in notes:
                    notes.append(problem)
                times[c.name].append(elapsed)
                del result
    finally:
        gc.unfreeze()
        use(KP)
    return times


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def loglog_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(y) against log(x): 1 is linear growth, 2 quadratic."""
    points = [(x, y) for x, y in points if x > 0 and y > 0]
    if len(points) < 2:
        return None
    return float(np.polyfit(np.log([p[0] for p in points]), np.log([p[1] for p in points]), 1)[0])


# Checks, sizes and the floors: what Keras itself needs to describe a model


def state_variables(model) -> list:
    """Every variable keras_pickle pickles for a model: the model's and its built optimizer's."""
    optimizer = getattr(model, "optimizer", None)
    built = optimizer is not None and getattr(optimizer, "built", True)  # tf-keras optimizers have no `built`
    return list(model.variables) + (list(optimizer.variables) if built else [])


def nbytes(variables) -> int:
    dtype = lambda v: np.dtype(getattr(v.dtype, "as_numpy_dtype", v.dtype))  # noqa: E731 (tf-keras: a tf.DType)
    return int(sum(dtype(v).itemsize * int(np.prod(v.shape)) for v in variables))


def describe(m) -> dict:
    return {"params": m.count_params(), "state_bytes": nbytes(state_variables(m)), "n_layers": len(m.layers)}


def mismatch(original, other, *, weights_only: bool = False) -> str | None:
    """What differs, or None if ``other`` holds copies of ``original``'s variables, equal, on the same device.
    ``weights_only``: ``model.weights``, what ``set_weights`` assigns (the floors)."""
    pick = (lambda m: list(m.weights)) if weights_only else state_variables
    a, b = pick(original), pick(other)
    if len(a) != len(b):
        return f"{len(b)} variables instead of {len(a)}"
    for x, y in zip(a, b):
        name = getattr(x, "path", None) or x.name
        if x is y:
            return f"variable {name} is shared, not copied"
        xa, ya = np.asarray(x), np.asarray(y)
        if xa.shape != ya.shape or xa.dtype != ya.dtype or not np.array_equal(xa, ya):
            return f"variable {name} differs"
        if str(getattr(x.value, "device", "")) != str(getattr(y.value, "device", "")):
            return f"variable {name} is not on the original's device"
    return None


def raw_bytes(variable) -> np.ndarray:
    """A variable's value as flat bytes, read without a copy where the backend allows it."""
    import keras

    value = variable.value
    if keras.backend.backend() == "tensorflow":
        value = value.value()  # one read of the resource variable: the tensor shares its buffer
    elif keras.backend.backend() == "torch":
        value = value.detach().cpu()
    return np.asarray(value).reshape(-1).view(np.uint8)


def config_json(model) -> str:
    """Keras's own description of a model: the out-of-band floor."""
    import keras

    return json.dumps(keras.saving.serialize_keras_object(model))


def in_band_floor(model) -> tuple[str, bytes]:
    """The in-band floor: the config JSON and exactly one copy of the state bytes (the join: reads copy nothing)."""
    return config_json(model), b"".join([raw_bytes(v) for v in state_variables(model)])


# Memory (Linux): peak extra resident bytes of one call, in a child process

NO_ONEDNN = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def peak_memory(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()``'s result and the peak extra RSS during it, after a collection, ``malloc_trim(0)`` (resident freed
    pages would hide new allocations) and a peak reset. Run TensorFlow with :data:`NO_ONEDNN`: oneDNN's
    allocator reuses resident freed memory, hiding allocations from ``VmHWM``."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status("VmRSS")
    result = fn()
    return result, _status("VmHWM") - before


def memory_of(spec: dict) -> dict:
    """In a child: peak extra memory (and / the state bytes) of one dumps and one loads of ``spec["model"]`` with
    ``spec["impl"]``, out of band unless ``spec["in_band"]``, after a round trip of a tiny one of its kind."""
    from benchmarks import models

    impl, in_band = spec["impl"], spec.get("in_band", False)
    use(impl)
    loads(dumps(models.build(models.tiny_spec(spec["model"])), in_band=in_band))
    model = models.build(spec["model"])
    out = {**spec, **describe(model)}
    payload, out["dumps_peak_extra"] = peak_memory(lambda: dumps(model, in_band=in_band))
    if is_ours(payload[0]) != (impl == KP):
        raise AssertionError(f"{impl} produced the wrong kind of payload: the wrong path was measured")
    result, out["loads_peak_extra"] = peak_memory(lambda: loads(payload))
    problem = mismatch(model, result)
    if problem and impl == KP:
        raise AssertionError(f"keras_pickle returned a wrong result: {problem}")
    out["loads_result_ok"] = problem is None
    return {**out, **{f"{op}_peak_extra_x": out[f"{op}_peak_extra"] / out["state_bytes"] for op in ("dumps", "loads")}}


# Child processes: python -m benchmarks NAME ARGS, results as marked JSON lines

MARK = "BENCH-RESULT "


def emit(result: Any) -> None:
    """One result of a child, on a line of its own that the parent picks out of whatever else is printed."""
    print(MARK + json.dumps(result, default=str), flush=True)


def env(extra: dict | None = None, *, tests: bool = False) -> dict:
    """A child's environment: TensorFlow quiet, this checkout first on its path (and tests/ with ``tests``)."""
    paths = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "tests") * tests, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(extra or {}), "PYTHONPATH": paths}


def child(*args: str, extra: dict | None = None, tests: bool = False) -> tuple[list, str | None]:
    """Run ``python -m benchmarks ARGS`` in a fresh interpreter: what it emitted and, if it failed, why."""
    argv = [sys.executable, "-m", "benchmarks", *args]
    proc = subprocess.run(argv, env=env(extra, tests=tests), capture_output=True, text=True)
    results = [json.loads(line[len(MARK) :]) for line in proc.stdout.splitlines() if line.startswith(MARK)]
    return results, None if proc.returncode == 0 else f"child exited {proc.returncode}: {proc.stderr[-4000:]}"


def memory(specs: list[dict]) -> list[dict | str]:
    """:func:`memory_of` each spec, in one child process: its result, or why there is none."""
    results, error = child("bench", "--memory-child", json.dumps(specs), extra=NO_ONEDNN)
    return results + [error or "no result"] * (len(specs) - len(results))


# Options and reports


def at_least_one(text: str) -> int:
    if int(text) < 1:
        raise argparse.ArgumentTypeError("--repeat must be at least 1")
    return int(text)


def parser(
    doc: str, repeat: int = 3, quick: bool = True, prog: str | None = None, summary: str = "best"
) -> argparse.ArgumentParser:
    """A benchmark's options: ``--repeat`` (``summary`` of N: ``best`` or ``median``) and ``--quick`` (tiny
    models) unless told otherwise."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    help_text = f"{summary} of N runs (default {repeat})"
    parser.add_argument("--repeat", type=at_least_one, default=repeat, help=help_text)
    if quick:
        parser.add_argument("--quick", action="store_true", help="tiny models (a smoke test, not a measurement)")
    return parser


def bench_args(argv: list[str] | None) -> argparse.Namespace:
    """bench's options, parsed without importing Keras (``keras-pickle bench --help`` answers at once)."""
    p = parser("Benchmark keras_pickle against Keras 3's own pickling and the floors.", prog="keras-pickle bench")
    p.add_argument("--only", nargs="+", choices=BENCH_MODELS, metavar="MODEL", help=", ".join(BENCH_MODELS))
    p.add_argument("--no-sweep", action="store_true", help="skip the state-size and depth sweeps")
    p.add_argument("--no-memory", action="store_true", help="skip the memory measurements (child processes)")
    p.add_argument("--json", type=Path, help="results (default: docs/bench-results.json, or benchmarks/results/)")
    p.add_argument("--png", type=Path, help="chart (default: docs/bench.png, or benchmarks/results/)")
    p.add_argument("--verbose", action="store_true", help="let TensorFlow log as it does by default")
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    full = not (args.quick or args.only or args.no_sweep or args.no_memory)  # only a full run goes to docs/
    args.json = args.json or (ROOT / "docs" / "bench-results.json" if full else RESULTS / "bench.json")
    args.png = args.png or (ROOT / "docs" / "bench.png" if full else RESULTS / "bench.png")
    return args


def mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def markdown(header: list[str], rows: list[list]) -> str:
    return "\n".join("| " + " | ".join(map(str, row)) + " |" for row in [header, ["---"] * len(header), *rows])


def table(title: str, header: list[str], rows: list[list], notes: tuple[str, ...] = ()) -> None:
    """A markdown table (it pastes into the docs as it is), then ``notes``, one per line."""
    print(f"\n{title}\n\n{markdown(header, rows)}" + "".join(f"\n  {note}" for note in notes))


def meta(**extra) -> dict:
    """What was measured, with what, where and when (the head of every JSON result)."""
    import keras

    backend, git = keras.backend.backend(), ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "keras_pickle"], capture_output=True, text=True).stdout
    found = {name: sys.modules[name].__version__ for name in ("keras", "keras_pickle", backend, "numpy")}
    found.update(backend=backend, keras_pickle_source=(head or "no git") + "+dirty" * bool(dirty.strip()))
    found.update(python=platform.python_version(), platform=platform.platform(), cpus=os.cpu_count())
    return {**found, "load_average": os.getloadavg(), "command": " ".join(sys.argv), "date": time.ctime(), **extra}


def write_json(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results written to {path}")
