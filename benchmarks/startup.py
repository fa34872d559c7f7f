"""Start-up time of the ``keras-pickle`` tools, next to ``python -c pass`` and ``import keras``.

Each command runs in a fresh interpreter, best of ``--repeat`` runs, and the
table shows its wall time and its ratio to ``python -c pass``. The column
"frameworks" lists which of Keras, TensorFlow, JAX and PyTorch the command
imported (it should be none for ``inspect`` and ``--help``):

    python benchmarks/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("keras", "tensorflow", "jax", "torch")
# Runs ``python -m keras_pickle ARGS`` (or plain code) and reports which frameworks got imported.
PROBE = """
import json, runpy, sys
args = sys.argv[1:]
if args[:1] == ["-c"]:
    exec(args[1])
else:
    sys.argv = ["keras_pickle", *args]
    try:
        runpy.run_module("keras_pickle", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
sys.stdout.flush()
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(%r))), file=sys.stderr)
""" % (FRAMEWORKS,)  # noqa: UP031


def time_command(args: list[str], repeat: int, cwd: str) -> tuple[float, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR), "TF_CPP_MIN_LOG_LEVEL": "3"}
    best, frameworks = float("inf"), []
    for _ in range(repeat):
        start = time.perf_counter()
        result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        best = min(best, time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr}")
        lines = result.stderr.strip().splitlines()
        frameworks = json.loads(lines[-1]) if lines and lines[-1].startswith("[") else []
    return best, frameworks


def write_payload(directory: str) -> str:
    """A one-layer model's payload, written in a child process (this one stays light)."""
    path = os.path.join(directory, "model.pkl")
    code = (
        "import pickle, keras, keras_pickle\n"
        "keras_pickle.install()\n"
        "model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])\n"
        f"open({path!r}, 'wb').write(pickle.dumps(model))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR), "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, timeout=600)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command; the best is kept")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        payload = write_payload(directory)
        commands = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("import keras_pickle", [sys.executable, "-c", PROBE, "-c", "import keras_pickle"]),
            ("keras-pickle inspect FILE", [sys.executable, "-c", PROBE, "inspect", payload]),
            ("keras-pickle inspect FILE --json", [sys.executable, "-c", PROBE, "inspect", payload, "--json"]),
            ("keras-pickle check --help", [sys.executable, "-c", PROBE, "check", "--help"]),
            ("import keras", [sys.executable, "-c", PROBE, "-c", "import keras"]),
        ]
        rows = []
        for label, command in commands:
            seconds, frameworks = time_command(command, args.repeat, directory)
            rows.append((label, seconds, frameworks))
    baseline = rows[0][1]
    print(f"{'command':36} {'wall (best of ' + str(args.repeat) + ')':>20} {'÷ python -c pass':>18}  frameworks")
    for label, seconds, frameworks in rows:
        shown = ", ".join(frameworks) if frameworks else "none"
        print(f"{label:36} {seconds * 1000:17.0f} ms {seconds / baseline:17.1f}×  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
