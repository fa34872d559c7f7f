"""The ``keras-pickle`` command: ``demo``, ``check``, ``inspect`` and ``bench``."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = argparse.ArgumentParser(prog="keras-pickle", description="Pickle Keras 3 models faithfully.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="Keras's built-in pickling vs keras_pickle through a spawn process pool")
    inspect_parser = commands.add_parser(
        "inspect",
        help="describe a pickled model without loading it (imports nothing the file names, runs none of its code)",
    )
    inspect_parser.add_argument("file", help="a file written by keras_pickle.dump, pickle.dump or joblib.dump")
    inspect_parser.add_argument("--verify", action="store_true", help="recompute the checksum, if the payload has one")
    inspect_parser.add_argument("--json", action="store_true", help="print one JSON object per payload")
    commands.add_parser(
        "bench", help="benchmark Keras's pickling and keras_pickle side by side (benchmarks/bench.py --help)"
    )
    check_parser = commands.add_parser("check", help="is an object pickle-safe? names every member that is not")
    check_parser.add_argument("target", help="module:attribute, e.g. my_training:dataset")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return _bench_command(argv[1:])  # every other argument belongs to bench.py
    args = parser.parse_args(argv)
    if args.command == "check":
        return _check_command(args.target)
    if args.command == "demo":
        from . import demo

        return demo.main()
    if args.command == "inspect":
        return _inspect_command(args.file, verify=args.verify, as_json=args.json)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _check_command(target: str) -> int:
    """Exit status: 0 pickle-safe, 1 problems found, 2 target not found."""
    import importlib

    from ._check import check

    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        print(f"keras-pickle check: expected module:attribute, got {target!r}", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        print(f"keras-pickle check: cannot find {target}: {e}", file=sys.stderr)
        return 2
    report = check(obj, name=attribute)
    print(report)
    return 0 if report.ok else 1


def _bench_command(bench_args: list[str]) -> int:
    """Run benchmarks/bench.py from the source tree keras_pickle is installed from."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench.py"
    if not script.is_file():
        print(f"keras-pickle bench: {script} not found; run it from a source checkout.", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("keras_pickle_bench", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(bench_args)


def _inspect_command(path: str, *, verify: bool, as_json: bool) -> int:
    """Exit status: 0 described, 1 not a readable payload, 3 a checksum mismatch."""
    import dataclasses
    import json

    from ._inspect import inspect_all
    from .errors import KerasPickleError

    try:
        infos = inspect_all(path, verify=verify)
    except OSError as e:
        print(f"keras-pickle inspect: {e}", file=sys.stderr)
        return 1
    except KerasPickleError as e:
        print(f"keras-pickle inspect: {e}", file=sys.stderr)
        return 1
    for number, info in enumerate(infos, 1):
        if as_json:
            print(json.dumps(dataclasses.asdict(info), default=repr))
        else:
            if len(infos) > 1:
                print(f"payload {number} of {len(infos)} in {path}")
            print(info)
    return 3 if any(info.checksum_status.startswith("MISMATCH") for info in infos) else 0


if __name__ == "__main__":
    sys.exit(main())
