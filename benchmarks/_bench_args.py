"""bench's command line, parsed without importing Keras or a backend.

``keras-pickle bench`` (keras_pickle/cli.py) loads this file by path and parses with :func:`parse_args`
before it loads bench.py, so that ``--help`` and usage errors answer at once. :data:`MODEL_NAMES` are
the keys of ``benchmarks.models.BENCH``; bench.py checks that they agree.
"""

from __future__ import annotations

import argparse
from pathlib import Path

MODEL_NAMES = ("mlp3", "mobilenetv3small", "efficientnetb0", "resnet50", "deep150", "dense100mb")
HERE = Path(__file__).resolve().parent


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-pickle bench",
        description="Benchmark keras_pickle against Keras 3's own pickling and against the floors, in one process.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny models (a smoke test, for the tests)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3; 10 x N for the MLP)")
    parser.add_argument("--only", nargs="+", choices=MODEL_NAMES, metavar="MODEL", help=", ".join(MODEL_NAMES))
    parser.add_argument("--no-sweep", action="store_true", help="skip the state-size and depth sweeps")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurements (child processes)")
    parser.add_argument("--walks", action="store_true", help="count how often one dumps and one loads walk a model")
    quick = "benchmarks/results/quick.*"
    parser.add_argument("--json", type=Path, help=f"results (default docs/bench-results.json; --quick: {quick})")
    parser.add_argument("--png", type=Path, help=f"chart (default docs/bench.png; --quick: {quick})")
    parser.add_argument("--verbose", action="store_true", help="let TensorFlow log as it does by default")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The parsed arguments, default paths filled in; ``--help`` and usage errors exit here (SystemExit)."""
    args = parser().parse_args(argv)
    docs, results = HERE.parent / "docs", HERE / "results"
    args.json = args.json or (results / "quick.json" if args.quick else docs / "bench-results.json")
    args.png = args.png or (results / "quick.png" if args.quick else docs / "bench.png")
    if args.repeat < 1:
        parser().error("--repeat must be at least 1")
    return args
