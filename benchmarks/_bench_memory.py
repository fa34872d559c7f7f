"""Peak extra resident memory of dumps and loads, each (model, implementation) in a child process.

The child (``bench.py --memory-child SPECS``) builds the model, warms the code
path up on a tiny model of the same kind, then for dumps and for loads
(protocol 5, out-of-band buffers): ``gc.collect()``, ``malloc_trim(0)`` (so
freed but still-resident heap pages cannot hide new allocations), resets the
peak (``echo 5 > /proc/self/clear_refs``), reads ``VmRSS``, runs the
operation and reads ``VmHWM``. The difference is the peak extra memory,
reported in bytes and as a multiple of the model's state bytes (every
variable pickled: weights and optimizer slots).

The children run TensorFlow with ``TF_ENABLE_ONEDNN_OPTS=0``. With oneDNN on,
TensorFlow's CPU allocator keeps freed memory resident and hands it out again
(building a model with 128 MiB of weights left 136 MiB of it, which a later
64 MiB tensor reused without RSS growing), so allocations made after the
model's build would not show in ``VmHWM``: keras_pickle's loads measured 0.75x
of the state bytes that way, less than the loaded model itself holds.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import keras
from _bench_core import dumps, is_ours, loads, set_installed, variables_mismatch
from _bench_models import build, describe, tiny_spec

KERAS, KP = "keras", "keras_pickle"
IMPLS = (KERAS, KP)


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _release_free_memory() -> None:
    """Hand freed heap memory back to the OS (glibc)."""
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
    before = _proc_status_bytes("VmRSS")
    result = fn()
    peak = _proc_status_bytes("VmHWM")
    after = _proc_status_bytes("VmRSS")
    return result, peak - before, after - before


def memory_child(specs: list[dict], source: str) -> list[dict]:
    """Runs in a fresh interpreter: :func:`memory_of` for each spec, in order."""
    return [{**memory_of(spec), "keras_pickle_source": source} for spec in specs]


def memory_of(spec: dict) -> dict:
    """Peak extra memory of dumps and loads of one model (``spec["model"]``) with one impl."""
    impl = spec["impl"]
    set_installed(impl == KP)
    warm = build(tiny_spec(spec["model"]))
    loads(dumps(warm))
    del warm
    model = build(spec["model"])
    out = {"impl": impl, "model": spec["model"], **describe(model)}
    gc.collect()
    gc.freeze()  # keeps the collections in _measure cheap
    payload, out["dumps_peak_extra"], out["dumps_retained"] = _measure(functools.partial(dumps, model))
    if is_ours(payload) != (impl == KP):
        raise AssertionError(f"{impl} produced the wrong kind of payload: wrong path measured")
    out["payload_inband_bytes"] = len(payload[0])
    out["payload_outofband_bytes"] = sum(memoryview(b).nbytes for b in payload[1])
    result, out["loads_peak_extra"], out["loads_retained"] = _measure(functools.partial(loads, payload))
    problem = variables_mismatch(model, result)
    if problem and impl == KP:
        raise AssertionError(f"keras_pickle returned a wrong result: {problem}")
    out["loads_result_ok"] = problem is None
    for op in ("dumps", "loads"):
        out[f"{op}_peak_extra_x"] = out[f"{op}_peak_extra"] / out["state_bytes"]
    del model, payload, result
    gc.unfreeze()
    keras.backend.clear_session()
    return out


def memory_jobs(names: list[str], quick: bool, sweep_specs: list[tuple[str, dict]]) -> list[dict]:
    """dense100mb and every sweep point, with both implementations; the slowest first
    (Keras's own reload of a deep Sequential is quadratic), so that two children stay busy."""
    jobs = []
    if "dense100mb" in names:
        jobs += [{"model": {"kind": "dense100mb", "quick": quick}, "impl": i, "label": "dense100mb"} for i in IMPLS]
    for axis, spec in sweep_specs:
        jobs += [{"model": spec, "impl": i, "label": f"{axis} {spec[axis]}", "axis": axis} for i in IMPLS]

    def cost(job: dict) -> float:
        model = job["model"]
        size = model.get("depth", 0) ** 2 / 1000 + model.get("params", 0) / 1e7 + (model["kind"] == "dense100mb") * 10
        return size * (5 if job["impl"] == KERAS else 1)

    return sorted(jobs, key=cost, reverse=True)


def run_memory_children(
    script: str, jobs: list[dict], say, *, shared: bool, parallel: int = 2
) -> tuple[list[dict], list[dict]]:
    """Measure ``jobs`` (a model spec and an impl each) in child processes, ``parallel`` at a time.

    One child per job, unless ``shared`` (``--quick``): then a single child
    runs every job in turn, which saves interpreter start-ups but lets earlier
    jobs' freed memory lower later peaks (tiny models are noise anyway).
    """
    groups = [jobs] if shared else [[j] for j in jobs]

    def run_group(group: list[dict]) -> list[dict]:
        cmd = [sys.executable, script, "--memory-child", json.dumps(group)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}  # see the module docstring
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
                    continue
                res = {**res, "label": job["label"], "axis": job.get("axis")}
                say(
                    f"[memory] {job['label']} {job['impl']}: dumps {res['dumps_peak_extra'] / 2**20:.1f} MiB "
                    f"({res['dumps_peak_extra_x']:.2f}x), loads {res['loads_peak_extra'] / 2**20:.1f} MiB "
                    f"({res['loads_peak_extra_x']:.2f}x) of {res['state_bytes'] / 2**20:.1f} MiB state"
                )
                results.append(res)
    return results, errors
