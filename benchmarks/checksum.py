"""What a checksum costs: dumps and loads with and without one, on the backend ``KERAS_BACKEND`` names.

bench's ``dense100mb`` (288 MiB of state with Adam's slots) and ``resnet50`` (98 MiB), protocol 5, each path
(:data:`PATHS`) with ``checksum=False`` and ``True``: ``keras_pickle.dump`` to a file then ``os.fsync`` (else
the previous file's writeback slows the next run), loaded from the page cache; ``keras_pickle.dumps`` and
``pickle.dumps`` inside ``keras_pickle.checksums(...)`` (what cloudpickle, Dask and Ray use), in band and out of
band; and Keras's built-in pickling, for scale. Interleaved (``common.race``), best of ``--repeat``; every payload
checked to carry a checksum exactly when asked, each first load to hold every variable; each payload dropped
after its load, so every dumps allocates afresh. Once per backend::

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

MODELS, OPS = ("dense100mb", "resnet50"), ("dumps", "loads")
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
        if has != checksum or not ours:
            return f"{path}, checksum={checksum}: the payload {'has' if has else 'lacks'} one"
        return None

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
    contenders = [c for path in PATHS for on in (False, True) for c in round_trip(path, on, model, directory)]
    if with_keras:
        contenders += [
            Contender(f"{KERAS_BUILT_IN}|False|dumps", KERAS, lambda: written.update(payload=common.dumps(model))),
            Contender(f"{KERAS_BUILT_IN}|False|loads", KERAS, lambda: common.loads(written.pop("payload"))),
        ]
    best = {key: min(times) for key, times in common.race(contenders, repeat).items()}
    rows = [[path, op, best[f"{path}|False|{op}"], best[f"{path}|True|{op}"]] for path in PATHS for op in OPS]
    rows = [[path, op, f"{off:.4f}", f"{on:.4f}", f"{on / off:.2f}x"] for path, op, off, on in rows]
    rows += [[KERAS_BUILT_IN, op, f"{best[f'{KERAS_BUILT_IN}|False|{op}']:.4f}", "—", "—"] for op in OPS if with_keras]
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
