"""Assertions and process helpers shared by the tests."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import forkserver
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


def run_python(
    code: str,
    *args: str,
    cwd: Path | None = None,
    timeout: float = 300,
    env: dict | None = None,
    keras_imported: bool = False,
) -> str:
    """Run ``code`` in a fresh interpreter; return stdout, fail with stderr.

    ``keras_imported=True``: the code may start with Keras already imported, as it is once its first line,
    ``import keras``, has run. The interpreter is then forked from a server that imported Keras on the
    backend asked for and nothing else (:mod:`forkserver`), which saves Python's and Keras's start, where the
    environment asked for imports Keras as the server did; elsewhere it is a fresh interpreter all the same.
    Leave it out where the code checks what is imported, or sets something that Keras reads when imported."""
    return _run(["-c", textwrap.dedent(code), *args], cwd=cwd, timeout=timeout, env=env, keras_imported=keras_imported)


def run_script(path: Path, *args: str, **options) -> str:
    """Run a script file as ``__main__`` in a fresh interpreter; return stdout (``options``: those of
    :func:`run_python`)."""
    return _run([str(path), *args], **{"cwd": None, "timeout": 300, "env": None, "keras_imported": False, **options})


FORK_SERVERS: dict[tuple, forkserver.Server] = {}
"""The fork servers this process started, by backend and the environment variables read at start and import: each
is started on first use and ends with the process. An engine may change this process's environment for good
(Dask's LocalCluster sets ``OMP_NUM_THREADS``, ``PYTHONHASHSEED``...): the next run forks from a new server
started with it, as a fresh interpreter would start with it."""


class Started:
    """A fresh interpreter running (:func:`start_python`): :meth:`result` waits for it."""

    def __init__(self, argv: list[str], *, cwd, env: dict | None, keras_imported: bool):
        full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO_DIR)}
        full_env.update(env or {})
        server = _fork_server(full_env) if keras_imported else None
        if server is not None:
            self.child = server.start(argv, cwd=cwd, env=full_env)
        else:
            self.child = subprocess.Popen(
                [sys.executable, *argv],
                cwd=cwd,
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )

    def kill(self) -> None:
        """End it now, if it has not ended."""
        if isinstance(self.child, subprocess.Popen):
            if self.child.poll() is None:
                self.child.kill()
                self.child.communicate()
        else:
            self.child.kill()

    def result(self, timeout: float = 300) -> str:
        """Its stdout once it has ended; fail with its stderr; killed after ``timeout`` seconds."""
        if isinstance(self.child, subprocess.Popen):
            try:
                stdout, stderr = self.child.communicate(timeout=timeout)
            finally:
                if self.child.poll() is None:
                    self.child.kill()
                    self.child.communicate()
            code = self.child.returncode
        else:
            done = self.child.wait(timeout)
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        if code != 0:
            raise AssertionError(f"subprocess failed ({code}):\n{stdout}\n{stderr[-6000:]}")
        return stdout


def start_python(
    code: str, *args: str, cwd: Path | None = None, env: dict | None = None, keras_imported: bool = False
) -> Started:
    """:func:`run_python`, without waiting: ``start_python(...).result(timeout)`` is its stdout."""
    return Started(["-c", textwrap.dedent(code), *args], cwd=cwd, env=env, keras_imported=keras_imported)


def _run(argv: list[str], *, cwd, timeout, env, keras_imported: bool) -> str:
    return Started(argv, cwd=cwd, env=env, keras_imported=keras_imported).result(timeout)


def _fork_server(env: dict[str, str]) -> forkserver.Server | None:
    """The server for ``env``, started now if need be; None where ``env`` asks for another start than this process
    gives its children (another backend, hash seed, ``HOME``...): such a run starts a real interpreter."""
    default = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    backend = env.get("KERAS_BACKEND", "tensorflow")
    if backend != keras.backend.backend() or forkserver.import_time_env(env) != forkserver.import_time_env(default):
        return None  # another backend's server would rarely be used twice; another start is the test's point
    key = (backend, tuple(sorted(forkserver.import_time_env(default).items())))
    with _STARTING:
        server = FORK_SERVERS.get(key)
        if server is None:
            server = FORK_SERVERS[key] = forkserver.Server(default)
            atexit.register(server.close)
    return server if server.serves(env) else None


_STARTING = threading.Lock()


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
