"""The coverage-guided fuzzer, tests/safe_mode/fuzz_atheris.py, runs in the suite with a fixed budget.

One libFuzzer session of ``RUNS`` inputs in a fresh interpreter, seeded
(``-seed=1``, ``PYTHONHASHSEED=0``) and bounded (``-runs``, a per-input
``-timeout``, ``-rss_limit_mb``, a subprocess timeout), against a temporary
corpus. It must end normally, report that it executed every input, have found
new coverage (the instrumentation of keras_pickle works), and leave no crash,
timeout, OOM or slow-unit artifact. The seed fixes libFuzzer's mutations but not
the exact path: coverage feedback from the interpreter varies slightly between
runs, so only these outcomes are asserted, never the corpus.

``RUNS`` takes about 30 s of fuzzing after a ~5-10 s TensorFlow import on two
cores; ``KERAS_PICKLE_ATHERIS_RUNS`` changes it. For a long session run the
script directly (see its docstring).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_DIR

pytest.importorskip(
    "atheris", reason="atheris is not installed (pip install -e '.[test]' installs it where wheels exist)"
)

RUNS = int(os.environ.get("KERAS_PICKLE_ATHERIS_RUNS", "50000"))


@pytest.mark.timeout(600)
def test_atheris_fixed_budget_finds_nothing(tmp_path):
    corpus = tmp_path / "corpus"
    artifacts = tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    argv = [
        sys.executable,
        str(Path(__file__).resolve().with_name("fuzz_atheris.py")),
        str(corpus),
        f"-runs={RUNS}",
        "-seed=1",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1",
        "-rss_limit_mb=4096",
        "-timeout=60",
    ]
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_BACKEND": "tensorflow",
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": str(REPO_DIR),
    }
    # libFuzzer's -rss_limit_mb reads the peak RSS from getrusage, and Linux carries a process's peak across
    # fork and exec: a child of this pytest process starts with the peak the process reached before (5.6 GB
    # after the Ray, Spark and Dask tests), over the limit before its first input. A small interpreter in
    # between forks the session from its own small peak, so the limit measures the session alone.
    launcher = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    argv = [sys.executable, "-c", launcher, *argv]
    result = subprocess.run(argv, cwd=REPO_DIR, env=env, capture_output=True, text=True, timeout=540)
    log = result.stderr + result.stdout
    tail = log[-6000:]

    assert result.returncode == 0, f"the fuzzer exited with {result.returncode}:\n{tail}"
    found = sorted(p.name for p in artifacts.iterdir())
    assert not found, f"the fuzzer wrote artifacts {found}:\n{tail}"

    done = re.search(r"^Done (\d+) runs in \d+ second", log, re.MULTILINE)
    assert done, f"no 'Done N runs' line:\n{tail}"
    assert int(done.group(1)) >= RUNS
    executed = re.search(r"^stat::number_of_executed_units:\s*(\d+)", log, re.MULTILINE)
    assert executed, f"no final stats:\n{tail}"
    assert int(executed.group(1)) >= RUNS
    new_units = re.search(r"^stat::new_units_added:\s*(\d+)", log, re.MULTILINE)
    assert new_units and int(new_units.group(1)) > 0, f"no new coverage: is keras_pickle instrumented?\n{tail}"
    # The script writes its six seed payloads into the corpus; libFuzzer adds what found new coverage.
    assert len(list(corpus.iterdir())) > 6
