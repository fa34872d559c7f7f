"""What ``checksum=True`` costs: dumps and loads of one model with and without it, and Keras's own path.

The model is ``bench.dense100mb`` (6 x Dense(2048) + Adam slots: 96 MiB of
weights, 288 MiB of state). Every call is protocol 5 with a
``buffer_callback`` (weights out of band), as Dask, Ray and multiprocessing
shared memory use it. ``keras_pickle.dumps`` / ``loads`` run with
``checksum=False`` and ``checksum=True``; Keras's built-in pickling (after
``keras_pickle.uninstall()``) is timed on the same model for scale. Runs are
interleaved and each figure is the best of ``--repeat``.

Usage::

    python benchmarks/checksum.py [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402  (sets TF_CPP_MIN_LOG_LEVEL before Keras is imported)
import numpy as np  # noqa: E402

import keras_pickle  # noqa: E402

OPS = ("dumps", "loads")
VARIANTS = ("keras built-in", "keras_pickle", "keras_pickle checksum=True")


def pickle_round(variant: str, model) -> tuple[Callable[[], object], Callable[[], object], dict]:
    """``(dump, load, written)`` for one variant; ``load`` reads what ``dump`` wrote last, kept in ``written``."""
    written: dict[str, object] = {}

    def dump():
        buffers: list[pickle.PickleBuffer] = []
        if variant == "keras built-in":
            data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
        else:
            checksum = variant.endswith("checksum=True")
            data = keras_pickle.dumps(model, protocol=5, checksum=checksum, buffer_callback=buffers.append)
        written.update(data=data, buffers=buffers)

    def load():
        if variant == "keras built-in":
            return pickle.loads(written["data"], buffers=written["buffers"])
        return keras_pickle.loads(written["data"], buffers=written["buffers"])

    return dump, load, written


def check_results(model, rounds) -> None:
    """Outside the timings: each keras_pickle variant wrote what it claims and loads the same weights."""
    for variant, (dump, load, written) in rounds.items():
        if variant == "keras built-in":
            continue
        dump()
        restored = load()
        checksum = keras_pickle.inspect(written["data"]).checksum
        if (checksum is not None) != variant.endswith("checksum=True"):
            raise AssertionError(f"{variant}: the payload's checksum is {checksum!r}")
        for original, copy in zip(bench.state_variables(model), bench.state_variables(restored), strict=True):
            if not np.array_equal(np.asarray(original), np.asarray(copy)):
                raise AssertionError(f"{variant}: {original.path} differs after loading")


def use(variant: str) -> None:
    """Keras's own ``__reduce__`` for the built-in variant, keras_pickle's otherwise."""
    if variant == "keras built-in":
        keras_pickle.uninstall()
    else:
        keras_pickle.install()


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tiny model (smoke test)")
    args = parser.parse_args(argv)

    model = bench.dense100mb(args.quick)
    state_mib = bench.nbytes(bench.state_variables(model)) / 2**20
    rounds = {variant: pickle_round(variant, model) for variant in VARIANTS}
    best = {(variant, op): float("inf") for variant in VARIANTS for op in OPS}
    for _ in range(args.repeat):
        for variant, (dump, load, _written) in rounds.items():
            use(variant)
            best[variant, "dumps"] = min(best[variant, "dumps"], timed(dump))
            best[variant, "loads"] = min(best[variant, "loads"], timed(load))
    keras_pickle.install()
    check_results(model, rounds)

    print(f"dense100mb: {state_mib:.0f} MiB of state, protocol 5 out of band, best of {args.repeat}")
    columns = ("keras built-in", "keras_pickle", "checksum=True", "checksum cost", "vs keras")
    print(f"{'op':6} " + " ".join(f"{name:>{width}}" for name, width in zip(columns, (15, 13, 14, 14, 9))))
    for op in OPS:
        keras_s, plain_s, checked_s = (best[variant, op] for variant in VARIANTS)
        print(
            f"{op:6} {keras_s:14.3f}s {plain_s:12.3f}s {checked_s:13.3f}s "
            f"{checked_s / plain_s:13.1f}x {keras_s / checked_s:8.1f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
