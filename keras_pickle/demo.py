"""``keras-pickle demo``: Keras's built-in pickling and keras_pickle, side by side.

A small model with a custom layer defined here (unregistered, as in most user
code) is trained, pickled, sent to a two-process spawn pool where each worker
trains its copy one more epoch and sends it back, and compared with the same
training done locally. The same journey runs once with Keras's own
``__reduce__`` and once with keras_pickle; the table says what worked, how
long it took and how large the payload was. No downloads; one option, ``--verbose``.

TensorFlow's C++ logging is kept quiet, in this process and in the workers (whose
initializer imports Keras with :func:`keras_pickle._quiet.import_keras_quietly`), unless
``verbose``: the table is what the demo shows.
"""

from __future__ import annotations

import concurrent.futures
import copy
import multiprocessing
import os
import pickle
import time
from dataclasses import dataclass, field

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_pickle  # noqa: E402
from keras_pickle import _quiet  # noqa: E402
from keras_pickle._wire.reprs import first_sentence  # noqa: E402

WORKERS = 2


class Gate(keras.layers.Layer):
    """A custom layer, unregistered: what Keras's built-in pickling cannot load."""

    def __init__(self, sharpness: float = 2.0, **kwargs):
        super().__init__(**kwargs)
        self.sharpness = sharpness

    def build(self, input_shape):
        self.gate = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="gate")

    def call(self, x):
        return x * keras.ops.sigmoid(self.gate * self.sharpness)

    def get_config(self):
        return {**super().get_config(), "sharpness": self.sharpness}


def build_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dropout(0.1, seed=1),
            Gate(3.0),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, 8)).astype("float32")
    return x, (x.sum(axis=1, keepdims=True) > 0).astype("float32")


def train_one_epoch(model: keras.Model, seed: int) -> keras.Model:
    x, y = data(seed)
    model.fit(x, y, epochs=1, batch_size=32, shuffle=False, verbose=0)
    return model


def worker_train(payload: bytes, seed: int, use_keras_pickle: bool) -> tuple[str, bytes | str]:
    """In a worker process: load the model, train it, pickle it back the same way."""
    (keras_pickle.install if use_keras_pickle else keras_pickle.uninstall)()
    try:
        model = pickle.loads(payload)
    except Exception as e:
        return "load failed", _summary(e)
    train_one_epoch(model, seed)
    try:
        return "ok", pickle.dumps(model, protocol=5)
    except Exception as e:
        return "send back failed", _summary(e)


def _summary(error: BaseException) -> str:
    """The innermost error of a chain, its first sentence on one line, cut at a word (Keras wraps errors several
    times)."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__
    # Keras puts the config it failed on first and the cause last ("Exception encountered: ...").
    cause = str(error).rpartition("Exception encountered: ")[2]
    return f"{type(error).__name__}: {first_sentence(cause, 160)}"


@dataclass
class Outcome:
    name: str
    dumps_seconds: float = float("nan")
    payload_bytes: int = 0
    round_trip_seconds: float = float("nan")
    returned: int = 0
    identical: int = 0
    problems: list[str] = field(default_factory=list)


def journey(name: str, model: keras.Model, expected: dict, pool, use_keras_pickle: bool, progress) -> Outcome:
    """Pickle ``model``, train copies in ``pool``, compare with ``expected`` predictions."""
    (keras_pickle.install if use_keras_pickle else keras_pickle.uninstall)()
    outcome = Outcome(name)
    start = time.perf_counter()
    try:
        payload = pickle.dumps(model, protocol=5)
    except Exception as e:
        outcome.problems.append(f"pickling failed: {type(e).__name__}: {e}")
        return outcome
    outcome.dumps_seconds = time.perf_counter() - start
    outcome.payload_bytes = len(payload)
    progress(f"{name}: pickled {outcome.payload_bytes / 1e3:.0f} kB, training {WORKERS} copies in workers")

    start = time.perf_counter()
    futures = [pool.submit(worker_train, payload, seed, use_keras_pickle) for seed in range(WORKERS)]
    for seed, future in enumerate(futures):
        status, result = future.result(timeout=300)
        if status != "ok":
            outcome.problems.append(f"worker {seed}: {status}: {result}")
            continue
        trained = pickle.loads(result)
        outcome.returned += 1
        if np.array_equal(trained.predict(data(seed)[0], verbose=0), expected[seed]):
            outcome.identical += 1
        progress(f"{name}: copy {seed} came back")
    outcome.round_trip_seconds = time.perf_counter() - start
    return outcome


def table_rows(outcomes: list[Outcome]) -> list[list[str]]:
    """The side-by-side comparison, header row first."""
    return [
        ["", *(o.name for o in outcomes)],
        ["pickled the model", *("yes" if o.payload_bytes else "no" for o in outcomes)],
        ["payload size", *(f"{o.payload_bytes / 1e3:.1f} kB" if o.payload_bytes else "-" for o in outcomes)],
        ["dumps time", *(f"{o.dumps_seconds * 1e3:.1f} ms" if o.payload_bytes else "-" for o in outcomes)],
        ["copies trained and returned", *(f"{o.returned} / {WORKERS}" for o in outcomes)],
        ["identical to local training", *(f"{o.identical} / {WORKERS}" for o in outcomes)],
        ["pool round trip", *(f"{o.round_trip_seconds:.1f} s" if o.returned else "-" for o in outcomes)],
    ]


def print_table(rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
        return
    table = Table(title="A Keras model with a custom layer, through a 2-process spawn pool and back")
    for header in rows[0]:
        table.add_column(header)
    for row in rows[1:]:
        table.add_row(*row)
    Console().print(table)


def run(progress=print, *, verbose: bool = False) -> list[Outcome]:
    """Build, train, and send the model through a pool both ways; return the outcomes.

    The workers import Keras quietly first unless ``verbose``.
    """
    progress("building and training a small model with an unregistered custom layer (Gate)")
    keras_pickle.install()
    model = train_one_epoch(build_model(), seed=99)
    expected = {
        seed: train_one_epoch(copy.deepcopy(model), seed).predict(data(seed)[0], verbose=0) for seed in range(WORKERS)
    }
    context = multiprocessing.get_context("spawn")
    progress(f"starting {WORKERS} spawn workers")
    try:
        initializer = None if verbose else _quiet.import_keras_quietly
        with concurrent.futures.ProcessPoolExecutor(WORKERS, mp_context=context, initializer=initializer) as pool:
            return [
                journey("Keras built-in pickle", model, expected, pool, use_keras_pickle=False, progress=progress),
                journey("keras_pickle", model, expected, pool, use_keras_pickle=True, progress=progress),
            ]
    finally:
        keras_pickle.install()


def main(*, verbose: bool = False) -> int:
    try:
        from rich.console import Console

        console = Console()
        with console.status("running") as status:
            outcomes = run(progress=lambda message: (status.update(message), console.log(message)), verbose=verbose)
    except ImportError:
        outcomes = run(verbose=verbose)
    print_table(table_rows(outcomes))
    for outcome in outcomes:
        for problem in outcome.problems:
            print(f"{outcome.name}: {problem}")
    ours = outcomes[-1]
    return 0 if ours.returned == ours.identical == WORKERS else 1
