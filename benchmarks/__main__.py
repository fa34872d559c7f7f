"""``python -m benchmarks NAME [ARGS]``: run one benchmark (``python -m benchmarks`` lists them)."""

import importlib
import sys

import benchmarks

NAMES = (
    "bench",
    "behaviour",
    "checksum",
    "file_guard",
    "floors",
    "joblib_parallel",
    "model_zoo",
    "startup",
    "tf_keras_pickling",
)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in NAMES:
        print(f"usage: python -m benchmarks {{{','.join(NAMES)}}} [--help]\n\n{benchmarks.__doc__}", file=sys.stderr)
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    sys.argv = [f"python -m benchmarks {argv[0]}", *argv[1:]]
    return importlib.import_module(f"benchmarks.{argv[0]}").main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
