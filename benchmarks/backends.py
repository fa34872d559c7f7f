"""Per backend, on the CPU or an accelerator: Keras's own pickling vs keras_pickle, and the floors.

Keras picks its backend once per process: each backend is measured in a child process of its own
(``KERAS_BACKEND`` set). The child builds ``--depth`` x Dense(``--width``) + Adam, trained one step
so that its slots exist (default 6 x 2048, bench's dense100mb: 96 MiB of weights, 288 MiB of state),
every variable where Keras puts it (a GPU where there is one), and races, interleaved, best of
``--repeat`` (``common.race``):

* Keras's own path and keras_pickle's: dumps in band (``pickle.dumps(model, protocol=5)``), dumps out
  of band (with a ``buffer_callback``), loads of each one's own out-of-band payload, and
  ``copy.deepcopy``; every result (and one load of each in-band payload) checked to hold every
  variable, equal, on the original's device: a wrong keras_pickle result is fatal, a Keras one noted;
* in-band writers against bench's floor (Keras's config JSON plus one copy of the state bytes):
  ``pickle.dumps(model, protocol=5)`` and ``keras_pickle.dumps(model, protocol=5)``, goal <= 1.3x;
* on JAX and PyTorch, the transfer floors on the same bytes: device -> host (PyTorch: into pinned
  memory where CUDA is), host -> device, device -> device; keras_pickle's dumps, loads and deepcopy
  are then also given as a multiple of the floor of their direction.

It also counts how many of the buffers keras_pickle's out-of-band dumps hands out share memory with
the live variables (zero-copy) and how many are copies, by address range (JAX:
``unsafe_buffer_pointer``, PyTorch: ``data_ptr``, TensorFlow: two reads held at once that alias
are its buffer; "n/a" where no address can be had)::

    nice -n 19 python -m benchmarks backends [--backend NAME ...] [--repeat N] [--quick] [--json P]
    python -m benchmarks backends --backend jax torch --width 8192 --depth 4 --repeat 2   # a GPU's share
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import time
from pathlib import Path

import keras_pickle
from benchmarks import common
from benchmarks.common import IMPLS, KERAS, KP, Contender

BACKENDS = ("tensorflow", "jax", "torch")
OPS = ("dumps in band", "dumps out of band", "loads", "deepcopy")
GOALS = {"dumps out of band": 50.0, "dumps in band": 5.0, "loads": 5.0}  # minimum ratio, on each backend
FLOOR_GOAL = 1.3
FLOOR_OF = {"dumps out of band": "device -> host", "loads": "host -> device", "deepcopy": "device -> device"}


def device_of(variable) -> str:
    value = variable.value
    device = getattr(value, "device", None)
    device = device() if callable(device) else device  # a JAX array's device() in older JAX
    return str(next(iter(value.devices())) if device is None and hasattr(value, "devices") else device)


def faithful(original, other) -> str | None:
    """None if ``other`` holds every variable of ``original``, equal and on the same device; else what differs."""
    pairs = zip(common.state_variables(original), common.state_variables(other))
    moved = next((w.path for v, w in pairs if device_of(v) != device_of(w)), None)
    return common.mismatch(original, other) or (moved and f"{moved} is not on the original's device")


def synchronized(run):
    """``run`` made to wait for the asynchronous device work behind its result (CUDA streams, JAX arrays)."""
    backend = os.environ.get("KERAS_BACKEND")

    def synced():
        result = run()
        if backend == "torch":
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
        elif backend == "jax" and isinstance(result, (list, tuple)):
            import jax

            jax.block_until_ready(result)
        return result

    return synced


def transfer_floors(values: list, backend: str) -> dict:
    """device -> host, host -> device and device -> device of every value (JAX and PyTorch)."""
    if backend == "torch":
        import torch

        pinned = torch.cuda.is_available()
        hosts = [torch.empty(t.shape, dtype=t.dtype, pin_memory=pinned) for t in values]
        return {
            "device -> host": lambda: [h.copy_(t, non_blocking=pinned) for h, t in zip(hosts, values)],
            "host -> device": lambda: [h.to(t.device, non_blocking=pinned) for h, t in zip(hosts, values)],
            "device -> device": lambda: [t.clone() for t in values],
        }
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        hosts, devices = jax.device_get(values), [next(iter(t.devices())) for t in values]
        return {
            "device -> host": lambda: jax.device_get(values),
            "host -> device": lambda: [jax.device_put(h, d) for h, d in zip(hosts, devices)],
            "device -> device": lambda: [jnp.copy(t) for t in values],
        }
    return {}


def child(args: argparse.Namespace) -> dict:
    import keras

    from benchmarks import models

    backend = keras.backend.backend()
    for impl in IMPLS:  # warm both code paths up on a tiny model
        common.use(impl)
        common.loads(common.dumps(models.dense_stack(8, 2)))
    common.use(KP)
    model = models.dense_stack(64 if args.quick else args.width, args.depth)
    payloads = {}
    for impl in IMPLS:
        common.use(impl)
        payloads[impl] = common.dumps(model)

    def loaded_check(impl: str):
        def check(result, first: bool) -> str | None:
            if common.is_ours(result[0]) != (impl == KP):
                raise AssertionError(f"{impl} wrote the wrong kind of payload: the wrong path was timed")
            return faithful(model, common.loads(result)) if first else None

        return check

    def same(result, first: bool) -> str | None:
        return faithful(model, result)

    contenders = []
    for impl in IMPLS:
        contenders += [
            Contender(f"{impl} dumps in band", impl, lambda: common.dumps(model, in_band=True), loaded_check(impl)),
            Contender(f"{impl} dumps out of band", impl, lambda: common.dumps(model), loaded_check(impl)),
            Contender(f"{impl} loads", impl, synchronized(lambda impl=impl: common.loads(payloads[impl])), same),
            Contender(f"{impl} deepcopy", impl, synchronized(lambda: copy.deepcopy(model)), same),
        ]
    contenders += [
        Contender("floor", KERAS, lambda: common.in_band_floor(model)),
        Contender("pickle.dumps", KP, lambda: pickle.dumps(model, protocol=5)),
        Contender("keras_pickle.dumps", KP, lambda: keras_pickle.dumps(model, protocol=5)),
    ]
    transfers = transfer_floors([v.value for v in common.state_variables(model)], backend)
    contenders += [Contender(name, KP, synchronized(run)) for name, run in transfers.items()]
    notes: list[str] = []
    best = {name: min(times) for name, times in common.race(contenders, args.repeat, notes).items()}
    timings = {}
    for op in OPS:
        timings[op] = {"keras_s": best[f"keras {op}"], "keras_pickle_s": best[f"keras_pickle {op}"]}
        timings[op]["ratio"] = best[f"keras {op}"] / best[f"keras_pickle {op}"]
        if transfers and op in FLOOR_OF:
            timings[op]["x_transfer_floor"] = best[f"keras_pickle {op}"] / best[FLOOR_OF[op]]
    writers = {
        name: {"s": best[name], "ratio": best[name] / best["floor"]} for name in ("pickle.dumps", "keras_pickle.dumps")
    }
    return {
        "backend": backend,
        "meta": common.meta(),
        "model": {
            "width": args.width,
            "depth": args.depth,
            "quick": args.quick,
            "device": device_of(model.variables[0]),
        },
        "state_bytes": common.nbytes(common.state_variables(model)),
        "timings": timings,
        "floor": {"floor_s": best["floor"], "writers": writers},
        "transfer_floors_s": {name: best[name] for name in transfers},
        "copies": copies(model, backend),
        "notes": notes,
    }


def copies(model, backend: str) -> dict:
    """How many of keras_pickle's out-of-band buffers share memory with the live variables."""
    import numpy as np

    variables = {id(v): v for v in common.state_variables(model)}
    variables.update((id(v), v) for metric in model.metrics for v in metric.variables)
    keep: list = []  # what the ranges point into stays alive while they are compared

    def address(array) -> int:
        return array.__array_interface__["data"][0]

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
            return (address(a), a.nbytes) if address(a) == address(b) else None
        return None

    common.use(KP)
    buffers = [np.frombuffer(b.raw(), np.uint8) for b in common.dumps(model)[1]]
    out: dict = {"buffers": len(buffers), "buffer_bytes": int(sum(b.nbytes for b in buffers))}
    ranges = []
    for v in variables.values():
        try:
            found = storage(v)
        except Exception as e:  # an API this backend lacks: no address, no guess
            found, out["error"] = None, f"{v.path}: {e!r}"
        if found is None:
            return {**out, "zero_copy": None, "copies": None, "reason": f"no address for {v.path} on {backend}"}
        ranges.append((found[0], found[0] + found[1]))
    shared = [b for b in buffers if any(address(b) < end and start < address(b) + b.nbytes for start, end in ranges)]
    out.update(zero_copy=len(shared), copies=len(buffers) - len(shared))
    out["zero_copy_bytes"] = int(sum(b.nbytes for b in shared))
    return {**out, "copied_bytes": out["buffer_bytes"] - out["zero_copy_bytes"]}


def report(results: list[dict], repeat: int) -> None:
    rows = [
        [r["backend"], op, f"{t['keras_s']:.4f}", f"{t['keras_pickle_s']:.4f}", f"{t['ratio']:.1f}×"]
        for r in results
        for op, t in r["timings"].items()
    ]
    title = f"Keras's own pickling vs keras_pickle, best of {repeat}, ratio = Keras s / keras_pickle s"
    common.table(title, ["backend", "op", "Keras s", "keras_pickle s", "ratio"], rows)
    print(f"\nIn-band dumps vs the floor (config JSON + one copy of the state bytes), goal <= {FLOOR_GOAL:g}×")
    for r in results:
        cells = [f"{name} {w['s']:.4f} s = {w['ratio']:.2f}×" for name, w in r["floor"]["writers"].items()]
        print(f"{r['backend']}: floor {r['floor']['floor_s']:.4f} s; " + "; ".join(cells))
    print()
    for r in results:
        backend, c = r["backend"], r["copies"]
        if r["transfer_floors_s"]:
            floors = ", ".join(f"{name} {s:.4f} s" for name, s in r["transfer_floors_s"].items())
            multiples = ", ".join(
                f"{op} {t['x_transfer_floor']:.1f}×" for op, t in r["timings"].items() if "x_transfer_floor" in t
            )
            print(f"transfers {backend} on {r['model']['device']}: {floors}; keras_pickle {multiples} its direction's")
        if c["zero_copy"] is None:
            print(f"copies {backend}: n/a of {c['buffers']} buffers ({c['reason']})")
        else:
            print(
                f"copies {backend}: {c['copies']} of {c['buffers']} out-of-band buffers are copies "
                f"({c['copied_bytes'] / 2**20:.1f} MiB), {c['zero_copy']} share memory with the live variables "
                f"({c['zero_copy_bytes'] / 2**20:.1f} MiB)"
            )
        goals = [
            f"{op} >= {need:g}×: {'holds' if r['timings'][op]['ratio'] >= need else 'MISSED'}"
            for op, need in GOALS.items()
        ]
        quick = " (--quick: a smoke test, not a measurement)" if r["model"]["quick"] else ""
        print(f"goals  {backend}{quick}: " + "; ".join(goals))
        for note in r["notes"]:
            print(f"note   {backend}: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="6 x Dense(64) (a smoke test, not a measurement)")
    parser.add_argument("--json", type=Path, default=common.RESULTS / "backends.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        common.emit(child(args))
        return 0
    started, results, failed = time.perf_counter(), [], False
    for backend in dict.fromkeys(args.backend):
        print(f"{time.perf_counter() - started:7.1f}s  [{backend}] measuring in a child process", flush=True)
        argv = ["--child", f"--repeat={args.repeat}", f"--width={args.width}", f"--depth={args.depth}"]
        found, error = common.child("backends", *argv, *["--quick"] * args.quick, env={"KERAS_BACKEND": backend})
        results += found
        if error or not found:
            failed = True
            print(f"{backend}: FAILED ({error or 'no result'})")
    report(results, args.repeat)
    common.write_json(args.json, {"command": common.command(), "repeat": args.repeat, "results": results})
    return 1 if failed else 0
