"""Run the suite on every Keras backend, one pytest process per backend, and the tf-keras tests.

The whole suite runs on TensorFlow; every test file marked ``backends``
(``pytestmark = pytest.mark.backends``: the files whose behaviour depends on
how a backend stores variables) runs again on JAX and on PyTorch. Keras picks
its backend once per process, hence one process each. The tests marked
``tf_keras`` (tf-keras, Keras 2) run in a fourth process of their own::

    python tests/run_all.py                      # all four
    python tests/run_all.py --backend jax        # one backend alone (its marked files)
    KERAS_BACKEND=torch python -m pytest -m backends   # the same, by hand
    python -m pytest -m tf_keras                 # the tf-keras tests alone

Extra arguments go to every pytest run. The exit status is pytest's worst; the last line
adds up what every run passed and failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
BACKENDS = ("tensorflow", "jax", "torch", "tf-keras")
"""The pytest runs: Keras 3 on each backend, then tf-keras (on TensorFlow)."""
OLD_KERAS = ("3.10.0", "3.8.0")
"""Older Keras 3 versions tests/models/test_version_skew.py writes and reads payloads with; 3.8.0 is the
oldest pyproject.toml admits. Each goes to its own directory (pure Python; its dependencies are
the current Keras's), never into the environment."""


def install_old_keras() -> None:
    """``pip install --no-deps --target .ci/keras/<version> keras==<version>``: each of :data:`OLD_KERAS` missing."""
    for version in OLD_KERAS:
        target = REPO_DIR / ".ci" / "keras" / version
        if not (target / "keras").is_dir():
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                 f"keras=={version}"],
                check=True,
            )  # fmt: skip


def pytest_args(backend: str, extra: list[str]) -> list[str]:
    marker = {"tensorflow": "not tf_keras", "tf-keras": "tf_keras"}.get(backend, "backends")
    # The slowest tests of each run are listed at its end: where the run's time goes.
    return [sys.executable, "-m", "pytest", "-m", marker, "--durations=15", *extra]


def run_pytest(backend: str, extra: list[str]) -> tuple[int, dict[str, int]]:
    """One backend's pytest run, its output passed through; its exit code and its summary counts."""
    # With the older Keras versions installed, their tests fail rather than skip when they are not found;
    # so do the engine tests (Spark, MLflow...) when an engine or Spark's Java runtime is missing.
    keras_backend = "tensorflow" if backend == "tf-keras" else backend
    env = {
        **os.environ,
        "KERAS_BACKEND": keras_backend,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_PICKLE_REQUIRE_OLD_KERAS": "1",
        "KERAS_PICKLE_REQUIRE_ENGINES": "1",
    }
    counts: dict[str, int] = {}
    with subprocess.Popen(
        pytest_args(backend, extra), cwd=REPO_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if SUMMARY.search(line):
                counts = {word: int(number) for number, word in COUNT.findall(line)}
    return process.returncode, counts


SUMMARY = re.compile(r"\d+ (passed|failed|error|errors|skipped|deselected)\b.* in [\d.]+s")
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped)\b")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=BACKENDS, action="append", help="run only this backend (repeatable)")
    args, extra = parser.parse_known_args(argv)
    install_old_keras()
    worst, lines, passed, failed = 0, [], 0, 0
    for backend in args.backend or BACKENDS:
        print(f"==== {backend} ====", flush=True)
        start = time.perf_counter()
        code, counts = run_pytest(backend, extra)
        lines.append(f"{backend}: pytest exited {code} after {time.perf_counter() - start:.0f} s: {counts}")
        worst = max(worst, code)
        passed += counts.get("passed", 0)
        failed += counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    print("\n".join(lines))
    print(f"total: {passed} passed, {failed} failed")
    return worst


if __name__ == "__main__":
    sys.exit(main())
