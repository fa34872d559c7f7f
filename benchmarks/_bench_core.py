"""Timing and checking for benchmarks/bench.py: contenders raced in one process, best of N.

A :class:`Contender` is one way of doing something (Keras's own pickling,
keras_pickle's, a floor) with keras_pickle installed or not. :func:`race`
runs the contenders in turn, ``repeat`` rounds (keras, keras_pickle, keras,
...), so that drift hits all alike, installing or uninstalling keras_pickle
before every single run. Each run is timed with ``time.perf_counter`` after
a ``gc.collect()`` outside the timed region; what existed before the race is
``gc.freeze()``-ed so that those collections stay cheap. Checks of a result
run after its timed region, never inside it.
"""

from __future__ import annotations

import dataclasses
import gc
import pickle
import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from _bench_models import outputs, sample_batch, state_variables

import keras_pickle

# A contender whose run took longer than this runs once, not best of N (Keras's
# own reload of a 500-layer Sequential takes minutes: it is quadratic in depth).
SLOW_S = 15.0


def set_installed(installed: bool) -> None:
    """Install keras_pickle (or uninstall it: Keras exactly as it ships) and check that it took."""
    if installed:
        keras_pickle.install()
    else:
        keras_pickle.uninstall()
    assert keras_pickle.is_installed() == installed


def dumps(model: Any) -> tuple[bytes, list]:
    """Protocol 5, buffers out of band."""
    buffers: list = []
    data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    return data, buffers


def dumps_in_band(model: Any) -> tuple[bytes, list]:
    """Protocol 5, everything in the one bytes object."""
    return pickle.dumps(model, protocol=5), []


def loads(payload: tuple[bytes, list]) -> Any:
    data, buffers = payload
    return pickle.loads(data, buffers=buffers)


def is_ours(payload: tuple[bytes, list]) -> bool:
    return b"keras_pickle._format" in payload[0]


@dataclasses.dataclass
class Contender:
    name: str
    installed: bool  # keras_pickle installed while it runs
    run: Callable[[], Any]
    check: Callable[[Any], None] | None = None  # after every run
    check_first: Callable[[Any], None] | None = None  # after the first run only (the costlier checks)


def race(contenders: list[Contender], repeat: int) -> dict[str, list[float]]:
    """Every contender's run times, interleaved; see the module docstring."""
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    gc.collect()
    gc.freeze()
    try:
        for _ in range(repeat):
            for c in contenders:
                if times[c.name] and times[c.name][0] > SLOW_S:
                    continue
                set_installed(c.installed)
                gc.collect()
                start = time.perf_counter()
                result = c.run()
                elapsed = time.perf_counter() - start
                if c.check is not None:
                    c.check(result)
                if c.check_first is not None and not times[c.name]:
                    c.check_first(result)
                times[c.name].append(elapsed)
                del result
    finally:
        gc.unfreeze()
        set_installed(True)
    return times


# --------------------------------------------------------------------------
# Checks (outside the timed region)
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Subject:
    """A model under measurement, with a fixed input batch and its outputs before anything ran."""

    name: str
    model: keras.Model
    batch: np.ndarray | None = None
    expected: np.ndarray | None = None

    @classmethod
    def of(cls, name: str, model: keras.Model, *, with_outputs: bool = True) -> Subject:
        if not with_outputs:
            return cls(name, model)
        batch = sample_batch(model)
        return cls(name, model, batch, outputs(model, batch))


def variables_mismatch(original: Any, other: Any, *, weights_only: bool = False) -> str | None:
    """None if ``other`` holds exactly ``original``'s variables (copies, not the same ones), else what differs.

    ``weights_only``: compare ``model.weights`` (what ``set_weights`` assigns: no seed-generator
    state, no optimizer), for the floors.
    """
    if weights_only:
        a, b = list(original.weights), list(other.weights)
    else:
        a, b = state_variables(original), state_variables(other)
    if len(a) != len(b):
        return f"{len(b)} variables instead of {len(a)}"
    for x, y in zip(a, b):
        if x is y:
            return f"variable {x.path} is shared, not copied"
        xa, ya = keras.ops.convert_to_numpy(x.value), keras.ops.convert_to_numpy(y.value)
        if xa.shape != ya.shape or xa.dtype != ya.dtype or not np.array_equal(xa, ya):
            return f"variable {x.path} differs"
    return None


def outputs_mismatch(subject: Subject, other: Any) -> str | None:
    if subject.batch is None:
        return None
    got = outputs(other, subject.batch)
    if got.dtype != subject.expected.dtype or not np.array_equal(got, subject.expected):
        return f"outputs on a batch of {len(subject.batch)} differ"
    return None


def checks(
    subject: Subject,
    notes: list[str],
    *,
    strict: bool,
    payload: bool = False,
    ours: bool | None = None,
    weights_only: bool = False,
) -> dict[str, Callable[[Any], None]]:
    """``check`` / ``check_first`` for a :class:`Contender` whose results are models (or payloads).

    Every result: variables bit-exact (a payload: it is ``ours`` or not, as
    expected). First result: outputs on the subject's batch bit-exact (a
    payload is loaded first, and its variables checked too; only keras_pickle's). ``strict``
    (keras_pickle's results): a difference raises, so that a wrong result is
    never reported as a time; otherwise (Keras's, the floors') it is noted.
    """

    def problem(text: str | None) -> None:
        if text is None:
            return
        text = f"{subject.name}: {text}"
        if strict:
            raise AssertionError(f"keras_pickle returned a wrong result: {text}")
        if text not in notes:
            notes.append(text)

    def check_model(result: Any) -> None:
        problem(variables_mismatch(subject.model, result, weights_only=weights_only))

    def check_outputs(result: Any) -> None:
        problem(outputs_mismatch(subject, result))

    if not payload:
        return {"check": check_model, "check_first": check_outputs}
    # A payload of Keras's own is only checked for its kind: loading it is Keras's loads, timed elsewhere.

    def check_payload(result: tuple[bytes, list]) -> None:
        if ours is not None and is_ours(result) != ours:
            raise AssertionError(f"{subject.name}: expected {'a' if ours else 'no'} keras_pickle payload")

    def check_loaded(result: tuple[bytes, list]) -> None:
        loaded = loads(result)
        check_model(loaded)
        check_outputs(loaded)

    return {"check": check_payload, "check_first": check_loaded} if strict else {"check": check_payload}


# --------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------


def best(times: list[float] | None) -> float | None:
    return min(times) if times else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def loglog_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(y) against log(x): 1 is linear growth, 2 quadratic."""
    points = [(x, y) for x, y in points if x > 0 and y > 0]
    if len(points) < 2:
        return None
    xs, ys = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(xs, ys, 1)[0])
