"""TensorFlow's C++ logging kept off the terminal, for the CLI and the demo (``--verbose`` keeps it).

Two things are needed, because TensorFlow 2.21 logs twice over. ``TF_CPP_MIN_LOG_LEVEL=3``,
set before TensorFlow is imported (and inherited by every worker process started after), quiets
what it logs once its logging is initialized: the ``cuInit`` error of a CPU machine, kernel
notices. What it logs while it is imported, before that (``oneDNN custom operations are on``,
``Could not find cuda drivers``, "All log messages before absl::InitializeLog() ..."), goes
straight to file descriptor 2 whatever the variable says: :func:`quietly` sends descriptor 2 to a
temporary file for the import, and writes back what it caught if the import fails.

Imports nothing heavy itself; the callers import Keras inside :func:`quietly`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
from collections.abc import Iterator

LEVEL = "TF_CPP_MIN_LOG_LEVEL"


def quiet_environment() -> None:
    """Set ``TF_CPP_MIN_LOG_LEVEL=3`` unless the environment sets it already (the user's choice wins).

    Before TensorFlow is imported here, and for every process started from here on.
    """
    os.environ.setdefault(LEVEL, "3")


@contextlib.contextmanager
def quietly(enabled: bool = True) -> Iterator[None]:
    """Within: what is written to file descriptor 2 is caught, and written there after all if the block raises.

    For an import of Keras or TensorFlow, whose import-time logging ignores ``TF_CPP_MIN_LOG_LEVEL``.
    ``enabled=False``: nothing is caught. Where descriptor 2 cannot be duplicated (an embedded
    interpreter), nothing is caught either.
    """
    if not enabled:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        except BaseException:
            _restore(saved)
            caught.seek(0)
            os.write(2, caught.read())
            raise
        finally:
            _restore(saved)
            os.close(saved)


def _restore(saved: int) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    os.dup2(saved, 2)


def import_keras_quietly() -> None:
    """Import Keras (and its backend) with TensorFlow's logging quiet: a worker pool's ``initializer``.

    Sets ``TF_CPP_MIN_LOG_LEVEL=3`` unless it is set, then imports Keras inside :func:`quietly`.
    """
    quiet_environment()
    with quietly():
        importlib.import_module("keras")
