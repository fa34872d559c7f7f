"""Per backend, on the CPU or an accelerator: Keras's own pickling vs keras_pickle, and the in-band floor.

Each backend in a child process of its own (``KERAS_BACKEND`` set), on ``--depth`` x Dense(``--width``)
+ Adam after one step (default: bench's dense100mb, 288 MiB of state), every variable where Keras puts
it, with bench's measurements (``bench.vs_keras``, ``bench.floor_dumps``; each result checked for its
values and its device): dumps in band and out of band, loads of each one's own out-of-band payload and
``copy.deepcopy``; ``pickle.dumps`` and ``keras_pickle.dumps`` in band against the floor (goal <= 1.3x);
and how many out-of-band buffers are copies rather than the live variables' own memory::

    nice -n 19 python -m benchmarks backends [--backend NAME ...] [--repeat N] [--quick] [--json P]
    python -m benchmarks backends --backend jax torch --width 8192 --depth 4 --repeat 2   # on a GPU
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks import common

BACKENDS = ("tensorflow", "jax", "torch")
OPS = ("dumps in band", "dumps", "loads", "deepcopy")


def child(args: argparse.Namespace) -> dict:
    import keras

    from benchmarks import bench, models

    for impl in common.IMPLS:  # warm both code paths up on a tiny model
        common.use(impl)
        common.loads(common.dumps(models.dense_net(8, (8, 8))))
    common.use(common.KP)
    width = 64 if args.quick else args.width
    subject = bench.Subject(keras.backend.backend(), models.dense_net(width, (width,) * args.depth))
    value = subject.model.variables[0].value
    return {
        "backend": subject.name,
        "meta": common.meta(width=width, depth=args.depth, device=str(getattr(value, "device", "?"))),
        "state_bytes": common.nbytes(common.state_variables(subject.model)),
        "timings": [bench.vs_keras(subject, op, args.repeat) for op in OPS],
        "floor": bench.floor_dumps(subject, args.repeat),
        "copies": copies(subject.model),
    }


def copies(model) -> dict:
    """How many of keras_pickle's out-of-band buffers share memory with the live variables (each read as
    ``common.raw_bytes`` does, without a copy where the backend allows it) and how many are copies."""
    common.use(common.KP)
    buffers = [np.frombuffer(b.raw(), np.uint8) for b in common.dumps(model)[1]]
    variables = common.state_variables(model) + [v for metric in model.metrics for v in metric.variables]
    values = [common.raw_bytes(v) for v in variables]
    copied = [b for b in buffers if not any(np.may_share_memory(b, v) for v in values)]
    return {"buffers": len(buffers), "copies": len(copied), "copied_bytes": sum(b.nbytes for b in copied)}


def report(results: list[dict], repeat: int) -> None:
    rows = []
    for r in results:
        for t in r["timings"]:
            op = "dumps out of band" if t["op"] == "dumps" else t["op"]
            rows.append([r["backend"], op, f"{t['keras_s']:.4f}", f"{t['keras_pickle_s']:.4f}", f"{t['ratio']:.1f}×"])
    title = f"Keras's own pickling vs keras_pickle, best of {repeat}, ratio = Keras s / keras_pickle s"
    common.table(title, ["backend", "op", "Keras s", "keras_pickle s", "ratio"], rows)
    print("\nIn-band dumps vs the floor (config JSON + one copy of the state bytes), goal <= 1.3×; copies:")
    print("out-of-band buffers that are copies (the others share memory with the live variables)")
    for r in results:
        f, c = r["floor"], r["copies"]
        writers = f"pickle.dumps {f['inband_ratio']:.2f}×, keras_pickle.dumps {f['dumps_inband_ratio']:.2f}×"
        print(f"{r['backend']} on {r['meta']['device']}: floor {f['floor_inband_s']:.4f} s; {writers}")
        print(f"  copies: {c['copies']} of {c['buffers']} ({common.mb(c['copied_bytes'])})")
        for note in f["notes"] + [n for t in r["timings"] for n in t["notes"]]:
            print(f"  note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--backend", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--json", type=Path, default=common.RESULTS / "backends.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        common.emit(child(args))
        return 0
    results, failed = [], False
    for backend in dict.fromkeys(args.backend):
        print(f"[{backend}] measuring in a child process", flush=True)
        argv = ["--child", f"--repeat={args.repeat}", f"--width={args.width}", f"--depth={args.depth}"]
        found, error = common.child("backends", *argv, *["--quick"] * args.quick, extra={"KERAS_BACKEND": backend})
        results += found
        if error or not found:
            failed = True
            print(f"{backend}: FAILED ({error or 'no result'})")
    report(results, args.repeat)
    common.write_json(args.json, {"repeat": args.repeat, "results": results})
    return 1 if failed else 0
