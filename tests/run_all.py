"""Run the suite on every Keras backend, one pytest process per backend, and the tf-keras tests.

The whole suite runs on TensorFlow; every test file marked ``backends``
(``pytestmark = pytest.mark.backends``: the files whose behaviour depends on
how a backend stores variables) runs again on JAX and on PyTorch. Keras picks
its backend once per process, hence one process each. The tests marked
``tf_keras`` (tf-keras, Keras 2) run in a process of their own, and the
TensorFlow run is split in three by folder (:data:`RUNS`)::

    python tests/run_all.py                      # every run, two at a time
    python tests/run_all.py --jobs 1             # one at a time, output passed through as it comes
    python tests/run_all.py --backend jax        # one backend alone (its marked files)
    KERAS_BACKEND=torch python -m pytest -m "backends and not tf_keras"   # the same, by hand
    python -m pytest -m tf_keras                 # the tf-keras tests alone

A pytest process keeps about one core busy, so two run at a time, longest first. With more than one at a time,
each run's output is printed whole when it ends, and meanwhile the line pytest writes for each test file it has
run, named by its run. Extra arguments go to every pytest run. The exit status is pytest's worst; the last line
adds up what every run passed and failed."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
BACKENDS = ("tensorflow", "jax", "torch", "tf-keras")
"""What ``--backend`` chooses from: Keras 3 on each backend, and tf-keras (on TensorFlow)."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One pytest process: its backend, its marker, and what it collects: ``only`` these folders or files of
    ``tests/``, or every folder but those ``ignore`` names."""

    name: str
    backend: str
    marker: str
    ignore: tuple[str, ...] = ()
    only: tuple[str, ...] = ()

    def argv(self, extra: list[str]) -> list[str]:
        folders = [str(Path("tests", folder)) for folder in self.only]
        ignored = [f"--ignore={Path('tests', folder)}" for folder in self.ignore]
        # The slowest tests of each run are listed at its end: where the run's time goes.
        return [sys.executable, "-m", "pytest", "-m", self.marker, "--durations=15", *ignored, *extra, *folders]


def marked(marker: str) -> tuple[str, ...]:
    """The test files (under ``tests/``) that mark a test, or themselves, ``marker``: the only files a run that selects
    ``marker`` collects, so that it does not import every engine and model zoo to deselect their tests."""
    spelt = f"mark.{marker}"
    return tuple(
        str(path.relative_to(REPO_DIR / "tests"))
        for path in sorted((REPO_DIR / "tests").glob("*/test_*.py"))
        if spelt in path.read_text()
    )


BACKENDS_ONLY = "backends and not tf_keras"
"""The JAX and PyTorch runs' marker: a test both dialects share is marked ``backends`` with its file and, for its
tf-keras case, ``tf_keras`` too (tests/safe_mode/test_allowlist.py), which the tf-keras run runs."""
TENSORFLOW_SHARDS = (("models",), ("diagnostics", "benchmarks"))
"""The folders of two TensorFlow processes; a third runs every other folder (format, safe_mode, integrations: the
engines, the fuzzers). Each takes about a third of the TensorFlow tests' time (diagnostics holds the docs' examples,
which start every engine)."""
RUNS = (
    Run(
        "tensorflow (format, safe_mode, integrations)",
        "tensorflow",
        "not tf_keras",
        ignore=tuple(folder for shard in TENSORFLOW_SHARDS for folder in shard),
    ),
    Run("tensorflow (models)", "tensorflow", "not tf_keras", only=TENSORFLOW_SHARDS[0]),
    Run("tensorflow (diagnostics, benchmarks)", "tensorflow", "not tf_keras", only=TENSORFLOW_SHARDS[1]),
    Run("jax", "jax", BACKENDS_ONLY, only=marked("backends")),
    Run("torch", "torch", BACKENDS_ONLY, only=marked("backends")),
    Run("tf-keras", "tf-keras", "tf_keras", only=marked("tf_keras")),
)
"""Longest first: two at a time, each slot takes the next run as it frees, and the two end close together (on 2 idle
cores: 596, 550, 529, 374, 232 and 123 seconds)."""
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


def run_pytest(run: Run, extra: list[str], echo: Callable[[str], None]) -> tuple[int, dict[str, int], float, str]:
    """One pytest run: its exit code, its summary counts, its seconds and its whole output; each line is also
    handed to ``echo`` as it comes."""
    # With the older Keras versions installed, their tests fail rather than skip when they are not found;
    # so do the engine tests (Spark, MLflow...) when an engine or Spark's Java runtime is missing.
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow" if run.backend == "tf-keras" else run.backend,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_PICKLE_REQUIRE_OLD_KERAS": "1",
        "KERAS_PICKLE_REQUIRE_ENGINES": "1",
    }
    start, lines, counts = time.perf_counter(), [], {}
    with subprocess.Popen(
        run.argv(extra), cwd=REPO_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        for line in process.stdout:
            echo(line)
            lines.append(line)
            if SUMMARY.search(line):
                counts = {word: int(number) for number, word in COUNT.findall(line)}
    return process.returncode, counts, time.perf_counter() - start, "".join(lines)


SUMMARY = re.compile(r"\d+ (passed|failed|error|errors|skipped|deselected)\b.* in [\d.]+s")
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped)\b")
PROGRESS = re.compile(r"\[\s*\d+%\]\s*$")
"""pytest's line for a test file it has run, ``tests/x/test_y.py ..F.  [ 42%]``."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=BACKENDS, action="append", help="run only this backend (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, help="pytest processes at a time (default 2)")
    args, extra = parser.parse_known_args(argv)
    install_old_keras()
    runs = [run for run in RUNS if run.backend in (args.backend or BACKENDS)]
    jobs = max(1, min(args.jobs, len(runs)))
    print(f"{len(runs)} pytest runs, {jobs} at a time: {', '.join(run.name for run in runs)}", flush=True)
    printing, results = threading.Lock(), {}

    def one(run: Run) -> None:
        def progress(line: str) -> None:  # side by side: each file's line as it ends, named by its run
            if PROGRESS.search(line):
                with printing:
                    print(f"{run.name} | {line}", end="", flush=True)

        def through(line: str) -> None:
            sys.stdout.write(line)
            sys.stdout.flush()

        if jobs == 1:
            print(f"==== {run.name} ====", flush=True)
        results[run] = run_pytest(run, extra, through if jobs == 1 else progress)
        if jobs > 1:
            with printing:
                print(f"==== {run.name} ====\n{results[run][3]}", flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        for future in [pool.submit(one, run) for run in runs]:
            future.result()
    worst, passed, failed = 0, 0, 0
    for run in runs:
        code, counts, seconds, _ = results[run]
        print(f"{run.name}: pytest exited {code} after {seconds:.0f} s: {counts}")
        worst = max(worst, code)
        passed += counts.get("passed", 0)
        failed += counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    print(f"total: {passed} passed, {failed} failed")
    return worst


if __name__ == "__main__":
    sys.exit(main())
