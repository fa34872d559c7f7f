"""What a checksum costs: dumps and loads with and without one, on the backend ``KERAS_BACKEND`` names.

Models: bench's ``dense100mb`` (288 MiB of state with Adam's slots) and ``resnet50`` (98 MiB). Each way
of writing, with ``checksum=False`` and ``True`` (plain ``pickle`` inside ``keras_pickle.checksums(...)``),
protocol 5: ``keras_pickle.dump`` to a file and ``os.fsync`` (a file is at rest once on disk; without it
the kernel's writeback of the previous file slows the next run), loaded with ``keras_pickle.load(path)``
from the page cache; ``keras_pickle.dumps`` and ``pickle.dumps`` (what cloudpickle, Dask and Ray use), in
band and out of band (a ``buffer_callback``), loaded with ``keras_pickle.loads`` / ``pickle.loads``; and
Keras's built-in pickling, for scale. Interleaved (``common.race``), best of ``--repeat``; every payload
checked to carry a checksum exactly when asked, the first load of each to hold every variable, and each
payload dropped after its load, so that every dumps allocates afresh as a writer does. Run it once per
backend::

    KERAS_BACKEND=jax python -m benchmarks checksum [--model dense100mb resnet50] [--repeat N] [--quick] [--no-keras]
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

import keras

import keras_pickle
from benchmarks import common, models
from benchmarks.common import KERAS, KP, Contender

MODELS = ("dense100mb", "resnet50")
TO_A_FILE, KERAS_BUILT_IN = "keras_pickle.dump to a file", "keras built-in"
PATHS = (TO_A_FILE, "keras_pickle.dumps in band", "pickle.dumps in band")
PATHS += ("keras_pickle.dumps out of band", "pickle.dumps out of band")


def round_trip(path: str, checksum: bool, model, directory: Path) -> list[Contender]:
    """The dumps and the loads of one path; the race runs each dumps just before its loads."""
    written: dict = {}

    def dump() -> dict:
        buffers: list = []
        callback = buffers.append if path.endswith("out of band") else None
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

    def has_checksum(result: dict, first: bool) -> str | None:
        has = keras_pickle.inspect(result["data"]).checksum is not None
        ours = common.is_ours(result["data"].read_bytes() if path == TO_A_FILE else result["data"])
        return (
            None
            if has == checksum and ours
            else f"{path}, checksum={checksum}: the payload {'has' if has else 'lacks'} one"
        )

    def load():
        if path == TO_A_FILE:
            return keras_pickle.load(written["data"])
        if path.startswith("keras_pickle."):
            return keras_pickle.loads(written["data"], buffers=written["buffers"])
        return pickle.loads(written["data"], buffers=written["buffers"])

    def same_and_drop(result, first: bool) -> str | None:
        written.clear()  # one payload alive at a time
        return first and common.mismatch(model, result) or None

    return [
        Contender(f"{path}|{checksum}|dumps", KP, dump, has_checksum),
        Contender(f"{path}|{checksum}|loads", KP, load, same_and_drop),
    ]


def measure(name: str, quick: bool, repeat: int, with_keras: bool, directory: Path) -> None:
    model, written = models.BENCH[name](quick), {}
    contenders = [
        c for path in PATHS for checksum in (False, True) for c in round_trip(path, checksum, model, directory)
    ]
    if with_keras:
        contenders += [
            Contender(f"{KERAS_BUILT_IN}|False|dumps", KERAS, lambda: written.update(payload=common.dumps(model))),
            Contender(f"{KERAS_BUILT_IN}|False|loads", KERAS, lambda: common.loads(written.pop("payload"))),
        ]
    best = {key: min(times) for key, times in common.race(contenders, repeat).items()}
    rows = []
    for path, op in [(path, op) for path in PATHS for op in ("dumps", "loads")]:
        off, on = best[f"{path}|False|{op}"], best[f"{path}|True|{op}"]
        rows.append([path, op, f"{off:.4f}", f"{on:.4f}", f"{on / off:.2f}x"])
    rows += [
        [KERAS_BUILT_IN, op, f"{best[f'{KERAS_BUILT_IN}|False|{op}']:.4f}", "—", "—"] for op in ("dumps", "loads")
    ] * with_keras
    mib = common.nbytes(common.state_variables(model)) / 2**20
    title = f"{name}{' (--quick)' if quick else ''}: {mib:.0f} MiB of state, seconds, best of {repeat}, protocol 5"
    common.table(title, ["path", "op", "no checksum", "checksum", "cost"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--model", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--no-keras", action="store_true", help="skip Keras's built-in pickling (slow on ResNet50)")
    args = parser.parse_args(argv)
    print(f"backend {keras.backend.backend()}, keras {keras.__version__}, keras_pickle {keras_pickle.__version__}")
    with tempfile.TemporaryDirectory(prefix="keras_pickle_checksum_") as directory:
        warm = models.BENCH["dense100mb"](True)  # the code paths, once, before anything is timed
        for path in PATHS:
            round_trip(path, True, warm, Path(directory))[0].run()
        for name in args.model:
            measure(name, args.quick, args.repeat, not args.no_keras, Path(directory))
    return 0
