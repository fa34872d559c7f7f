"""The benchmarks' one helper module: which pickling runs, timing, checks, child processes, reports.

Every benchmark runs Keras's own path (:data:`KERAS`: ``keras_pickle.uninstall()``, Keras as it ships)
and keras_pickle's (:data:`KP`) side by side in one process and prints ratios. Nothing here asserts
a time. Keras is imported only by the functions that need it.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.metadata
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


def use(impl: str) -> None:
    """Plain ``pickle`` and ``copy`` through ``impl``: :data:`KERAS` or :data:`KP`."""
    if impl == KP:
        keras_pickle.install()
    else:
        keras_pickle.uninstall()
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


# --------------------------------------------------------------------------
# Timing: contenders interleaved, best of N
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Contender:
    name: str
    impl: str  # KERAS or KP: keras_pickle uninstalled or installed while it runs
    run: Callable[[], Any]
    check: Callable[[Any, bool], str | None] | None = None  # (result, first run) -> what is wrong, or None


def race(contenders: list[Contender], repeat: int, notes: list[str] | None = None, slow_s: float = 15.0) -> dict:
    """Each contender's seconds per run, ``repeat`` rounds of a, b, c, a, b, c... so that drift hits all
    alike; a contender whose first run took over ``slow_s`` runs once. Each run is timed with
    ``perf_counter`` after a ``gc.collect()``; what existed before is ``gc.freeze()``-ed so those stay cheap.
    Checks run outside the timed region: a problem with keras_pickle's result raises (a wrong result is
    never reported as a time), one with Keras's or a floor's goes to ``notes``."""
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
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
                result = c.run()
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


def best(times: list[float] | None) -> float | None:
    return min(times) if times else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def loglog_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(y) against log(x): 1 is linear growth, 2 quadratic."""
    points = [(x, y) for x, y in points if x > 0 and y > 0]
    if len(points) < 2:
        return None
    return float(np.polyfit(np.log([p[0] for p in points]), np.log([p[1] for p in points]), 1)[0])


# --------------------------------------------------------------------------
# Checks and sizes
# --------------------------------------------------------------------------


def state_variables(model) -> list:
    """Every variable keras_pickle pickles for a model: the model's and its built optimizer's."""
    optimizer = getattr(model, "optimizer", None)
    return list(model.variables) + (list(optimizer.variables) if getattr(optimizer, "built", False) else [])


def nbytes(variables) -> int:
    return int(sum(np.dtype(v.dtype).itemsize * int(np.prod(v.shape)) for v in variables))


def describe(model) -> dict:
    return {
        "params": int(model.count_params()),
        "weight_bytes": nbytes(model.variables),
        "state_bytes": nbytes(state_variables(model)),
        "n_layers": len(model.layers),
    }


def mismatch(original, other, *, weights_only: bool = False) -> str | None:
    """None if ``other`` holds exactly ``original``'s variables (copies, not the same ones), else what differs.
    ``weights_only``: ``model.weights``, what ``set_weights`` assigns (the floors)."""
    import keras

    pick = (lambda m: list(m.weights)) if weights_only else state_variables
    a, b = pick(original), pick(other)
    if len(a) != len(b):
        return f"{len(b)} variables instead of {len(a)}"
    for x, y in zip(a, b):
        if x is y:
            return f"variable {x.path} is shared, not copied"
        xa, ya = keras.ops.convert_to_numpy(x.value), keras.ops.convert_to_numpy(y.value)
        if xa.shape != ya.shape or xa.dtype != ya.dtype or not np.array_equal(xa, ya):
            return f"variable {x.path} differs"
    return None


# --------------------------------------------------------------------------
# The floors: what Keras itself needs to describe a model (bench, backends)
# --------------------------------------------------------------------------


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
    """The in-band floor: the config JSON and exactly one copy of the state bytes (weights and optimizer
    slots, what keras_pickle pickles), each variable read without a copy so that the join is the only one."""
    return config_json(model), b"".join([raw_bytes(v) for v in state_variables(model)])


# --------------------------------------------------------------------------
# Memory (Linux): peak extra resident bytes of one call
# --------------------------------------------------------------------------


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


NO_ONEDNN = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def peak_memory(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """``fn()``'s result, the peak extra RSS during it and the RSS it left behind. Before: a collection,
    ``malloc_trim(0)`` (freed heap pages still resident would hide new allocations) and a reset of the
    peak (``clear_refs``). Run TensorFlow with :data:`NO_ONEDNN`: oneDNN's allocator keeps freed memory
    resident and hands it out again, hiding allocations from ``VmHWM``."""
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
    return result, _status("VmHWM") - before, _status("VmRSS") - before


# --------------------------------------------------------------------------
# Child processes: python -m benchmarks NAME ARGS, results as marked JSON lines
# --------------------------------------------------------------------------

MARK = "BENCH-RESULT "


def emit(result: Any) -> None:
    """One result of a child, on a line of its own that the parent picks out of whatever else is printed."""
    print(MARK + json.dumps(result, default=str), flush=True)


def child(*args: str, env: dict | None = None, tests: bool = False) -> tuple[list, str | None]:
    """Run ``python -m benchmarks ARGS`` in a fresh interpreter (TensorFlow quiet, this checkout first on
    its path, and tests/ with ``tests``): what it emitted and, if it failed, why."""
    paths = [str(ROOT), str(ROOT / "tests") if tests else "", os.environ.get("PYTHONPATH", "")]
    full = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    proc = subprocess.run([sys.executable, "-m", "benchmarks", *args], env=full, capture_output=True, text=True)
    results = [json.loads(line[len(MARK) :]) for line in proc.stdout.splitlines() if line.startswith(MARK)]
    return results, None if proc.returncode == 0 else f"child exited {proc.returncode}: {proc.stderr[-4000:]}"


# --------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------


def mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def fmt(x: float | None, spec: str = ".4f", suffix: str = "") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def table(title: str, header: list[str], rows: list[list], notes: tuple[str, ...] = ()) -> None:
    """A markdown table (it pastes into the docs as it is), then ``notes``, one per line."""
    print(f"\n{title}\n")
    for row in [header, ["---"] * len(header), *rows]:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    for note in notes:
        print(f"  {note}")


def meta(**extra) -> dict:
    """What was measured, with what, where and when (the head of every JSON result)."""
    import keras

    backend = keras.backend.backend()
    try:
        backend_version = importlib.metadata.version(backend)
    except importlib.metadata.PackageNotFoundError:
        backend_version = None
    return {
        "keras": keras.__version__,
        "keras_pickle": keras_pickle.__version__,
        "keras_pickle_source": source_revision(),
        "backend": backend,
        "backend_version": backend_version,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "command": command(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }


def command() -> str:
    return " ".join(sys.argv)


def write_json(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results written to {path}")


def source_revision() -> str:
    """Which keras_pickle source is measured: its git commit ("+dirty" for local changes) and a digest
    of its .py files, so that edits during a run show."""
    import hashlib

    package = Path(keras_pickle.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    try:
        git = ["git", "-C", str(package)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True).stdout
        head = commit.stdout.strip() + ("+dirty" if dirty.strip() else "") if commit.returncode == 0 else "no git"
    except OSError:
        head = "no git"
    return f"{head} sha256:{digest.hexdigest()[:12]}"
