"""bench.py's command line, parsed without importing Keras or a backend.

``keras-pickle bench --help`` and argument errors answer at once: the CLI parses with
:func:`parse_args` before it loads bench.py (which imports Keras, and with it TensorFlow).
:data:`MODEL_NAMES` are the keys of ``_bench_models.PLANS``; bench.py checks that they agree.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = (
    'Benchmark keras_pickle against Keras 3\'s own pickling and against "the floor", side by side, in one process.'
)
MODEL_NAMES = ("mlp3", "mobilenetv3small", "efficientnetb0", "resnet50", "deep150", "dense100mb")
HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="keras-pickle bench", description=DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="tiny models (a smoke test, for the tests)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3; 10 x N for the MLP)")
    parser.add_argument(
        "--only", nargs="+", choices=MODEL_NAMES, metavar="MODEL", help=f"only: {', '.join(MODEL_NAMES)}"
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the state-size and depth sweeps")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurements (child processes)")
    parser.add_argument("--profile", action="store_true", help="cProfile keras_pickle's loads of each model")
    quick_dir = "benchmarks/results/quick.*"
    parser.add_argument("--json", type=Path, help=f"results (default docs/bench-results.json; --quick: {quick_dir})")
    parser.add_argument("--png", type=Path, help=f"chart (default docs/bench.png; --quick: {quick_dir})")
    parser.add_argument(
        "--verbose", action="store_true", help="let TensorFlow log as it does by default (keras-pickle bench)"
    )
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The parsed arguments, default paths filled in; ``--help`` and usage errors exit here (SystemExit)."""
    args = parser().parse_args(argv)
    if args.json is None:
        args.json = HERE / "results" / "quick.json" if args.quick else DOCS / "bench-results.json"
    if args.png is None:
        args.png = HERE / "results" / "quick.png" if args.quick else DOCS / "bench.png"
    if args.repeat < 1:
        parser().error("--repeat must be at least 1")
    return args
