"""The ``keras-pickle`` command: ``demo`` (more subcommands join it)."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = argparse.ArgumentParser(prog="keras-pickle", description="Pickle Keras 3 models faithfully.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="Keras's built-in pickling vs keras_pickle through a spawn process pool")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from . import demo

        return demo.main()
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
