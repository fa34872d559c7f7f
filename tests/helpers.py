"""Assertions and process helpers shared by the tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np

TESTS_DIR = Path(__file__).resolve().parent
REPO_DIR = TESTS_DIR.parent


def variable_values(obj) -> list[tuple[str, str, tuple, bytes]]:
    """(path, dtype, shape, raw bytes) of every variable, optimizer state included."""
    variables = list(obj.variables)
    optimizer = getattr(obj, "optimizer", None)
    if optimizer is not None:
        variables += list(optimizer.variables)
    values = []
    for v in variables:
        array = np.asarray(keras.ops.convert_to_numpy(v.value))
        values.append((v.path, str(array.dtype), array.shape, array.tobytes()))
    return values


def assert_same_state(original, restored) -> None:
    """Every variable (weights, seeds, optimizer) equal bit for bit, none shared."""
    a, b = variable_values(original), variable_values(restored)
    assert len(a) == len(b), f"{len(a)} variables vs {len(b)}"
    assert len(a) > 0
    for (path_a, dtype_a, shape_a, bytes_a), (_path_b, dtype_b, shape_b, bytes_b) in zip(a, b):
        assert (dtype_a, shape_a) == (dtype_b, shape_b), path_a
        assert bytes_a == bytes_b, f"variable {path_a} differs"
    shared = {id(v) for v in original.variables} & {id(v) for v in restored.variables}
    assert not shared, "restored object shares variables with the original"
    storage = {id(v.value) for v in original.variables} & {id(v.value) for v in restored.variables}
    assert not storage, "restored variables share backend storage with the original"


def assert_same_predictions(original, restored, x) -> None:
    expected = original.predict(x, verbose=0)
    actual = restored.predict(x, verbose=0)
    assert expected.dtype == actual.dtype
    assert np.array_equal(expected, actual), "predictions differ"


def assert_trains_identically(original, restored, x, y) -> None:
    """One more epoch on each gives bit-identical variables (seeds and slots included)."""
    original.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    restored.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    assert_same_state(original, restored)


def constructed_before_install(factory):
    """``factory()`` while keras_pickle is not installed: nothing records constructor or compile() arguments."""
    import keras_pickle

    keras_pickle.uninstall()
    try:
        return factory()
    finally:
        keras_pickle.install()


def run_python(code: str, *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None) -> str:
    """Run ``code`` in a fresh interpreter; return stdout, fail with stderr."""
    return _run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd, timeout=timeout, env=env)


def run_script(path: Path, *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None) -> str:
    """Run a script file as ``__main__`` in a fresh interpreter; return stdout."""
    return _run([sys.executable, str(path), *args], cwd=cwd, timeout=timeout, env=env)


def _run(argv: list[str], *, cwd, timeout, env) -> str:
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO_DIR)}
    full_env.update(env or {})
    result = subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stdout}\n{result.stderr[-6000:]}")
    return result.stdout


# A module that leaves a mark when imported (format with marker=<path>): tests of
# code that must not import what a payload names.
PROBE_MODULE = """
import pathlib

import keras

# Importing this module leaves a mark.
pathlib.Path({marker!r}).write_text("imported")


def probe_activation(x):
    return keras.ops.relu(x) * 2.0


class ProbeLayer(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

    def call(self, x):
        return x * self.w
"""


def engine(module: str):
    """``import module`` for an engine's test file; skipped where it is missing, except under
    tests/run_all.py (``KERAS_PICKLE_REQUIRE_ENGINES=1``), where a missing engine fails the run."""
    import pytest

    if os.environ.get("KERAS_PICKLE_REQUIRE_ENGINES") == "1":
        import importlib

        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[test]' installs it)")


class Hang(BaseException):
    """Raised in the middle of an input that runs too long (not an Exception:
    keras_pickle's own ``except Exception`` must not wrap it)."""


@contextlib.contextmanager
def cpu_time_limit(seconds: float = 20.0):
    """Fail an input that spins: SIGVTALRM after ``seconds`` of CPU time.

    (pytest-timeout owns SIGALRM and bounds each whole test.)
    """

    def expire(signum, frame):
        raise Hang(f"one input took more than {seconds} s of CPU time")

    previous = signal.signal(signal.SIGVTALRM, expire)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def ulps_apart(a, b, *, at=None) -> np.ndarray:
    """How many units in the last place of their dtype ``a`` and ``b`` lie apart, element by element: ``|a - b|``
    in steps of the spacing at the larger magnitude of each pair (``np.spacing``), or at the magnitude ``at`` for
    every pair (``at=np.abs(a).max()``: ulps of the largest value, where outputs near zero, a softmax's smallest,
    carry their inputs' rounding relatively magnified). Equal values are 0 apart."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    wide = np.float64 if a.dtype.itemsize < 8 else np.longdouble
    magnitude = np.maximum(np.abs(a), np.abs(b)) if at is None else np.full(a.shape, at, a.dtype)
    spacing = np.spacing(magnitude.astype(a.dtype)).astype(wide)
    return np.abs(a.astype(wide) - b.astype(wide)) / spacing
