"""The ``keras-pickle`` command: ``demo``, ``check``, ``inspect`` and ``bench``.

Help and usage errors come first, for every command, before Keras or a backend
is imported (``bench`` parses its arguments with ``benchmarks.common.bench_args``
before it imports ``benchmarks.bench``; ``check`` imports its target before Keras, so a
target that cannot be imported is named at once). ``inspect`` imports neither
Keras nor a backend at all (it reads bytes; it starts in the time Python does);
``check`` and ``demo`` import Keras when they run.

TensorFlow's C++ logging stays off the terminal (:mod:`keras_pickle._quiet`: ``TF_CPP_MIN_LOG_LEVEL=3``
before TensorFlow is imported, inherited by the demo's workers, and what TensorFlow prints while it
is imported caught) unless ``--verbose`` is given to ``demo``, ``check`` or ``bench``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from . import _quiet
from ._inspect import inspect_all
from ._version import __version__
from .errors import ChecksumMismatchError, KerasPickleError

INSPECT_EXIT_CODES = """exit status:
  0  every payload was described
  1  the file cannot be read, or holds no readable keras_pickle payload
  2  usage error
  3  the payload is damaged: its checksum, recomputed (--verify), does not match, or the stream is
     too damaged to read and shows a keras_pickle payload that carries a checksum"""

VERBOSE_HELP = "let TensorFlow log as it does by default (it is kept quiet otherwise)"

CHECK_EXIT_CODES = """exit status:
  0  the object is pickle-safe
  1  the object is not pickle-safe (each problem is listed)
  2  usage error, or TARGET cannot be imported"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return _bench_command(argv[1:])  # every other argument belongs to bench.py
    args = _parse(argv)
    if args.command == "inspect":
        return _inspect_command(args.file, verify=args.verify, as_json=args.json)
    _logging(verbose=args.verbose)
    if args.command == "check":
        return _check_command(args.target, as_json=args.json, verbose=args.verbose)
    with _quiet.quietly(not args.verbose):
        from . import demo  # imports Keras: only for this command
    return demo.main(verbose=args.verbose)


def _logging(*, verbose: bool) -> None:
    """Before TensorFlow is imported: its C++ logging at level 3 (quiet), or at its default, 0 (``--verbose``).

    A level set in the environment wins either way.
    """
    if verbose:
        os.environ.setdefault(_quiet.LEVEL, "0")
    else:
        _quiet.quiet_environment()


def _parse(argv: list[str]) -> argparse.Namespace:
    """The parsed command line; a usage error exits with the usage of the command it belongs to (status 2)."""
    parser, commands = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would blame the top-level parser and print its usage, not the command's
        commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser, and each command's own parser by name."""
    parser = argparse.ArgumentParser(prog="keras-pickle", description="Pickle Keras 3 models faithfully.")
    parser.add_argument("--version", action="version", version=f"keras-pickle {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser(
        "demo", help="Keras's built-in pickling vs keras_pickle through a spawn process pool"
    )
    demo_parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    inspect_parser = commands.add_parser(
        "inspect",
        help="describe a pickled model without loading it (imports nothing the file names, runs none of its code)",
        description="Describe the keras_pickle payloads in FILE without loading them: nothing the file names "
        "is imported and none of its code runs; neither Keras nor a backend is imported.",
        epilog=INSPECT_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect_parser.add_argument("file", help="a file written by keras_pickle.dump, pickle.dump or joblib.dump")
    inspect_parser.add_argument("--verify", action="store_true", help="recompute the checksum, if the payload has one")
    inspect_parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per payload, one per line; its keys are the fields of keras_pickle.PayloadInfo "
        "(python -m pydoc keras_pickle.PayloadInfo)",
    )
    bench_parser = commands.add_parser(
        "bench", help="benchmark Keras's pickling and keras_pickle side by side (python -m benchmarks bench --help)"
    )
    check_parser = commands.add_parser(
        "check",
        help="is an object pickle-safe? names every member that is not",
        description="Import TARGET and report every member that pickle.dumps would fail on, by path.",
        epilog=CHECK_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check_parser.add_argument("target", help="module:attribute, e.g. my_training:dataset")
    check_parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    check_parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    return parser, {"demo": demo_parser, "inspect": inspect_parser, "bench": bench_parser, "check": check_parser}


def _error(command: str, message: str, *, as_json: bool, error_type: str) -> None:
    print(f"keras-pickle {command}: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message, "error_type": error_type}))


def _check_command(target: str, *, as_json: bool, verbose: bool) -> int:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        _error("check", f"expected module:attribute, got {target!r}", as_json=as_json, error_type="UsageError")
        return 2
    sys.path.insert(0, os.getcwd())
    try:  # the target first: one that cannot be imported is named before Keras is imported
        with _quiet.quietly(not verbose):
            obj = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        _error("check", f"cannot find {target}: {e}", as_json=as_json, error_type=type(e).__name__)
        return 2
    with _quiet.quietly(not verbose):
        from ._check import check  # imports Keras: only for this command

    report = check(obj, name=attribute)
    print(json.dumps(report.to_json()) if as_json else report)
    return 0 if report.ok else 1


def _bench_command(bench_args: list[str]) -> int:
    """Run ``python -m benchmarks bench`` from the source tree keras_pickle is installed from.

    Its arguments are parsed first by ``benchmarks.common.bench_args``, which imports no Keras:
    ``--help`` and usage errors answer before ``benchmarks.bench`` imports Keras and a backend.
    """
    source = Path(__file__).resolve().parent.parent
    if not (source / "benchmarks" / "bench.py").is_file():
        print(f"keras-pickle bench: {source / 'benchmarks'} not found; run it from a source checkout.", file=sys.stderr)
        return 2
    if str(source) not in sys.path:
        sys.path.insert(0, str(source))
    args = importlib.import_module("benchmarks.common").bench_args(bench_args)
    _logging(verbose=args.verbose)
    with _quiet.quietly(not args.verbose):
        bench = importlib.import_module("benchmarks.bench")  # imports Keras
    return bench.main(bench_args)


def _inspect_command(path: str, *, verify: bool, as_json: bool) -> int:
    try:
        infos = inspect_all(path, verify=verify)
    except (OSError, KerasPickleError) as e:
        _error("inspect", str(e), as_json=as_json, error_type=type(e).__name__)
        return 3 if isinstance(e, ChecksumMismatchError) else 1
    try:
        for number, info in enumerate(infos, 1):
            if as_json:
                print(json.dumps(info.to_json()))
            else:
                if len(infos) > 1:
                    print(f"payload {number} of {len(infos)} in {path}")
                print(info)
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    return 3 if any(info.checksum_status.startswith(("MISMATCH", "DAMAGED")) for info in infos) else 0


def _reader_gone() -> int:
    """The reader of the output closed it (``keras-pickle inspect f | head``): stop quietly, as a command
    killed by SIGPIPE does (status 141). What is left unflushed goes to the null device, so that Python's
    final flush raises nothing either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


if __name__ == "__main__":
    sys.exit(main())
