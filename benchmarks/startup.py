"""Start-up time of the ``keras-pickle`` tools, next to ``python -c pass`` and ``import keras``.

Each command in a fresh interpreter, best of ``--repeat``: wall time, ratio to ``python -c pass``, and which of
Keras, TensorFlow, JAX and PyTorch it imported (none, for ``inspect`` and ``--help``)::

    python -m benchmarks startup [--repeat 5]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import common

FRAMEWORKS = ("keras", "tensorflow", "jax", "torch")
# Runs ``python -m keras_pickle ARGS`` (or plain code after -c) and reports which frameworks got imported.
PROBE = f"""
import json, runpy, sys
if sys.argv[1:2] == ["-c"]:
    exec(sys.argv[2])
else:
    sys.argv[0] = "keras_pickle"
    try:
        runpy.run_module("keras_pickle", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
sys.stdout.flush()
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({FRAMEWORKS!r}))), file=sys.stderr)
"""


def time_command(args: list[str], repeat: int, cwd: str) -> tuple[float, list[str]]:
    best, frameworks = float("inf"), []
    for _ in range(repeat):
        start = time.perf_counter()
        result = subprocess.run(args, cwd=cwd, env=common.env(), capture_output=True, text=True, timeout=600)
        best = min(best, time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr}")
        lines = result.stderr.strip().splitlines()
        frameworks = json.loads(lines[-1]) if lines and lines[-1].startswith("[") else []
    return best, frameworks


def main(argv: list[str] | None = None) -> int:
    args = common.parser(__doc__, repeat=5, quick=False).parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        payload = os.path.join(directory, "model.pkl")  # a one-layer model's, written in a child: this one stays light
        model = "pickle.dumps(keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)]))"
        code = f"import pickle, keras, keras_pickle; keras_pickle.install(); open({payload!r}, 'wb').write({model})"
        subprocess.run([sys.executable, "-c", code], check=True, env=common.env(), capture_output=True, timeout=600)
        probe = [sys.executable, "-c", PROBE]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import keras_pickle": [*probe, "-c", "import keras_pickle"],
            "keras-pickle inspect FILE": [*probe, "inspect", payload],
            "keras-pickle inspect FILE --json": [*probe, "inspect", payload, "--json"],
            "keras-pickle check --help": [*probe, "check", "--help"],
            "import keras": [*probe, "-c", "import keras"],
        }
        rows = [(label, *time_command(command, args.repeat, directory)) for label, command in commands.items()]
    baseline = rows[0][1]
    header = ["command", f"wall, best of {args.repeat}", "÷ python -c pass", "frameworks"]
    rows = [[label, f"{s * 1000:.0f} ms", f"{s / baseline:.1f}×", ", ".join(f) or "none"] for label, s, f in rows]
    common.table("Start-up time", header, rows)
    return 0
