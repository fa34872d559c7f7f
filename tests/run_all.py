"""Run the suite on every Keras backend, one pytest process per backend.

The whole suite runs on TensorFlow; every test file marked ``backends``
(``pytestmark = pytest.mark.backends``: the files whose behaviour depends on
how a backend stores variables) runs again on JAX and on PyTorch. Keras picks
its backend once per process, hence one process each::

    python tests/run_all.py                      # all three
    python tests/run_all.py --backend jax        # one backend alone (its marked files)
    KERAS_BACKEND=torch python -m pytest -m backends   # the same, by hand

Extra arguments go to every pytest run. The exit status is pytest's worst.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
BACKENDS = ("tensorflow", "jax", "torch")


def pytest_args(backend: str, extra: list[str]) -> list[str]:
    marker = [] if backend == "tensorflow" else ["-m", "backends"]
    return [sys.executable, "-m", "pytest", *marker, *extra]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=BACKENDS, action="append", help="run only this backend (repeatable)")
    args, extra = parser.parse_known_args(argv)
    worst, lines = 0, []
    for backend in args.backend or BACKENDS:
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        print(f"==== {backend} ====", flush=True)
        start = time.perf_counter()
        code = subprocess.run(pytest_args(backend, extra), cwd=REPO_DIR, env=env).returncode
        lines.append(f"{backend}: pytest exited {code} after {time.perf_counter() - start:.0f} s")
        worst = max(worst, code)
    print("\n".join(lines))
    return worst


if __name__ == "__main__":
    sys.exit(main())
