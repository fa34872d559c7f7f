"""What a checksum costs: dumps and loads with and without one, in band and out of band, on one backend.

Models: bench.py's ``dense100mb`` (6 x Dense(2048) + Adam slots: 96 MiB of
weights, 288 MiB of state) and ``resnet50`` (``keras.applications.ResNet50(
weights=None)``, 98 MiB of state); ``--model`` picks. Four ways of writing,
each with ``checksum=False`` and with ``checksum=True`` (plain ``pickle``
inside ``keras_pickle.checksums(False)`` / ``checksums(True)``), protocol 5:

* ``keras_pickle.dump to a file``: ``keras_pickle.dump(model, file, protocol=5)``
  into a file in a temporary directory, then ``os.fsync`` (a file is at rest once
  it is on disk; without it, the kernel's writeback of the previous run's file
  slows whichever run comes next), loaded with ``keras_pickle.load(path)``
  (safe mode, from the page cache);
* ``keras_pickle.dumps in band``: ``keras_pickle.dumps(model, protocol=5)``,
  loaded with ``keras_pickle.loads(data)`` (safe mode);
* ``pickle.dumps in band``: ``pickle.dumps(model, protocol=5)`` with keras_pickle
  installed, loaded with ``pickle.loads`` (what ``pickle.dump`` / cloudpickle write);
* ``keras_pickle.dumps out of band``: with a ``buffer_callback``, loaded with
  ``keras_pickle.loads(data, buffers=...)``;
* ``pickle.dumps out of band``: ``pickle.dumps(model, protocol=5, buffer_callback=...)``
  and ``pickle.loads(data, buffers=...)``: what Dask and Ray do.

Keras's built-in pickling (``keras_pickle.uninstall()``, ``pickle.dumps(model,
protocol=5)``) is timed on the same model for scale. Runs are interleaved
(``_bench_core.race``), each figure is the best of ``--repeat``; every payload
is checked outside the timed region to carry a checksum exactly when asked,
and the first load of each to hold every variable of the original. Each
payload is dropped after its load (outside the timed region), so that every
dumps allocates its stream afresh, as a writer does.

Keras picks its backend once per process: run this once per backend
(``KERAS_BACKEND=jax`` / ``torch``); the ratios of one run are comparable.

Usage::

    python benchmarks/checksum.py [--model dense100mb resnet50] [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402  (sets TF_CPP_MIN_LOG_LEVEL before Keras is imported)
import keras  # noqa: E402
from _bench_core import Contender, best, race, variables_mismatch  # noqa: E402
from _bench_models import PLANS  # noqa: E402

import keras_pickle  # noqa: E402

MODELS = ("dense100mb", "resnet50")
TO_A_FILE = "keras_pickle.dump to a file"
PATHS = (
    TO_A_FILE,
    "keras_pickle.dumps in band",
    "pickle.dumps in band",
    "keras_pickle.dumps out of band",
    "pickle.dumps out of band",
)
KERAS_BUILT_IN = "keras built-in"
OPS = ("dumps", "loads")


def writer(path: str, checksum: bool, model, written: dict, directory: Path) -> Contender:
    """The dumps of one path, with or without a checksum; what it wrote goes into ``written``
    (``data`` and ``buffers``: the bytes, or the file's path, and the out-of-band buffers)."""
    out_of_band = path.endswith("out of band")

    def dump() -> dict:
        buffers: list[pickle.PickleBuffer] = []
        callback = buffers.append if out_of_band else None
        if path == TO_A_FILE:
            data = directory / f"model-checksum-{checksum}.pkl"
            with open(data, "wb") as file:
                keras_pickle.dump(model, file, protocol=5, checksum=checksum)
                file.flush()
                os.fsync(file.fileno())
        elif path.startswith("keras_pickle."):
            data = keras_pickle.dumps(model, protocol=5, checksum=checksum, buffer_callback=callback)
        else:
            with keras_pickle.checksums(checksum):
                data = pickle.dumps(model, protocol=5, buffer_callback=callback)
        written.update(data=data, buffers=buffers)
        return written

    def check(result: dict) -> None:
        has = keras_pickle.inspect(result["data"]).checksum is not None
        stream = result["data"].read_bytes() if path == TO_A_FILE else result["data"]
        if has != checksum or not bench.is_ours((stream, [])):
            raise AssertionError(f"{path}, checksum={checksum}: the payload {'has' if has else 'lacks'} a checksum")

    return Contender(name(path, checksum, "dumps"), True, dump, check_first=check)


def reader(path: str, checksum: bool, model, written: dict) -> Contender:
    """The loads of what :func:`writer` wrote last (the race runs each writer just before its reader)."""

    def load():
        if path == TO_A_FILE:
            return keras_pickle.load(written["data"])
        if path.startswith("keras_pickle."):
            return keras_pickle.loads(written["data"], buffers=written["buffers"])
        return pickle.loads(written["data"], buffers=written["buffers"])

    def check(result) -> None:
        problem = variables_mismatch(model, result)
        if problem is not None:
            raise AssertionError(f"{path}, checksum={checksum}: {problem}")

    def drop(_result) -> None:  # one payload alive at a time: every dumps allocates alike
        written.clear()

    return Contender(name(path, checksum, "loads"), True, load, check=drop, check_first=check)


def keras_built_in(model) -> list[Contender]:
    written: dict = {}

    def dump():
        written["payload"] = bench.dumps(model)
        return written["payload"]

    return [
        Contender(name(KERAS_BUILT_IN, False, "dumps"), False, dump),
        Contender(
            name(KERAS_BUILT_IN, False, "loads"),
            False,
            lambda: bench.loads(written["payload"]),
            check=lambda _result: written.clear(),
        ),
    ]


def name(path: str, checksum: bool, op: str) -> str:
    return f"{path}|{checksum}|{op}"


def measure(model_name: str, quick: bool, repeat: int, with_keras: bool, directory: Path) -> dict[str, float]:
    model = PLANS[model_name].build(quick)
    contenders: list[Contender] = []
    for path in PATHS:
        for checksum in (False, True):
            written: dict = {}
            contenders += [writer(path, checksum, model, written, directory), reader(path, checksum, model, written)]
    if with_keras:
        contenders += keras_built_in(model)
    times = race(contenders, repeat)
    mib = bench.nbytes(bench.state_variables(model)) / 2**20
    print(f"\n{model_name}{' (--quick)' if quick else ''}: {mib:.0f} MiB of state, best of {repeat}, protocol 5")
    print(f"{'path':32} {'op':6} {'no checksum':>12} {'checksum':>12} {'cost':>7}")
    for path in PATHS:
        for op in OPS:
            off, on = best(times[name(path, False, op)]), best(times[name(path, True, op)])
            print(f"{path:32} {op:6} {off:11.4f}s {on:11.4f}s {on / off:6.2f}x")
    if with_keras:
        for op in OPS:
            print(f"{KERAS_BUILT_IN:32} {op:6} {best(times[name(KERAS_BUILT_IN, False, op)]):11.4f}s")
    return {key: best(value) for key, value in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny models (a smoke test)")
    parser.add_argument("--no-keras", action="store_true", help="skip Keras's built-in pickling (slow on ResNet50)")
    args = parser.parse_args(argv)

    print(f"backend {keras.backend.backend()}, keras {keras.__version__}, keras_pickle {keras_pickle.__version__}")
    warm = PLANS["dense100mb"].build(True)  # the code paths, once, before anything is timed
    with tempfile.TemporaryDirectory(prefix="keras_pickle_checksum_") as directory:
        for path in PATHS:
            writer(path, True, warm, {}, Path(directory)).run()
        for model_name in args.model:
            measure(model_name, args.quick, args.repeat, not args.no_keras, Path(directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
