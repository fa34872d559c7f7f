"""Per backend, on the CPU or an accelerator: Keras's own pickling vs keras_pickle, and the in-band floor.

Keras picks its backend once per process: each backend is measured in a child process of its own
(``KERAS_BACKEND`` set). The child builds ``--depth`` x Dense(``--width``) + Adam, trained one step so
that its slots exist (default 6 x 2048, bench's dense100mb: 96 MiB of weights, 288 MiB of state), every
variable where Keras puts it (a GPU where there is one), and times, interleaved, best of ``--repeat``,
with bench's measurements (``bench.vs_keras``, ``bench.floor_dumps``):

* Keras's own path and keras_pickle's: dumps in band (``pickle.dumps(model, protocol=5)``), dumps out
  of band (with a ``buffer_callback``), loads of each one's own out-of-band payload, ``copy.deepcopy``;
  every result checked to hold every variable, equal, on the original's device;
* in-band writers against bench's floor (Keras's config JSON plus one copy of the state bytes):
  ``pickle.dumps(model, protocol=5)`` and ``keras_pickle.dumps(model, protocol=5)``, goal <= 1.3x.

It also counts how many of the buffers keras_pickle's out-of-band dumps hands out share memory with
the live variables (zero-copy) and how many are copies, by address range (JAX:
``unsafe_buffer_pointer``, PyTorch: ``data_ptr``, TensorFlow: two reads held at once that alias are its
buffer; "n/a" where no address can be had)::

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
        "copies": copies(subject.model, subject.name),
    }


def copies(model, backend: str) -> dict:
    """How many of keras_pickle's out-of-band buffers share memory with the live variables."""
    keep: list = []  # what the ranges point into stays alive while they are compared

    def address(array) -> int:
        return array.__array_interface__["data"][0]

    def storage(value) -> tuple[int, int] | None:
        if backend == "jax":
            return value.unsafe_buffer_pointer(), value.nbytes
        if backend == "torch":
            return value.data_ptr(), value.numel() * value.element_size()
        a, b = np.asarray(value.read_value()), np.asarray(value.read_value())
        keep.extend([a, b])
        return (address(a), a.nbytes) if address(a) == address(b) else None

    common.use(common.KP)
    buffers = [np.frombuffer(b.raw(), np.uint8) for b in common.dumps(model)[1]]
    out: dict = {"buffers": len(buffers), "buffer_bytes": int(sum(b.nbytes for b in buffers))}
    variables = {id(v): v for v in common.state_variables(model) + [v for m in model.metrics for v in m.variables]}
    ranges = []
    for v in variables.values():
        try:
            found = storage(v.value)
        except Exception as e:  # an API this backend lacks: no address, no guess
            found, out["error"] = None, f"{v.path}: {e!r}"
        if found is None:
            return {**out, "zero_copy": None, "reason": f"no address for {v.path} on {backend}"}
        ranges.append((found[0], found[0] + found[1]))
    shared = [b for b in buffers if any(address(b) < end and start < address(b) + b.nbytes for start, end in ranges)]
    return {**out, "zero_copy": len(shared), "zero_copy_bytes": int(sum(b.nbytes for b in shared))}


def report(results: list[dict], repeat: int) -> None:
    label = {"dumps": "dumps out of band"}
    rows = [
        [
            r["backend"],
            label.get(t["op"], t["op"]),
            f"{t['keras_s']:.4f}",
            f"{t['keras_pickle_s']:.4f}",
            f"{t['ratio']:.1f}×",
        ]
        for r in results
        for t in r["timings"]
    ]
    title = f"Keras's own pickling vs keras_pickle, best of {repeat}, ratio = Keras s / keras_pickle s"
    common.table(title, ["backend", "op", "Keras s", "keras_pickle s", "ratio"], rows)
    print("\nIn-band dumps vs the floor (config JSON + one copy of the state bytes), goal <= 1.3×")
    for r in results:
        f, c = r["floor"], r["copies"]
        writers = f"pickle.dumps {f['inband_ratio']:.2f}×, keras_pickle.dumps {f['dumps_inband_ratio']:.2f}×"
        print(f"{r['backend']} on {r['meta']['device']}: floor {f['floor_inband_s']:.4f} s; {writers}")
        if c["zero_copy"] is None:
            print(f"  copies: n/a of {c['buffers']} buffers ({c['reason']})")
        else:
            copied = c["buffer_bytes"] - c["zero_copy_bytes"]
            print(
                f"  copies: {c['buffers'] - c['zero_copy']} of {c['buffers']} out-of-band buffers are copies "
                f"({common.mb(copied)}), {c['zero_copy']} share memory with the live variables"
            )
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
