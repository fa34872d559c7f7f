"""The file guard's benchmark (benchmarks/file_guard.py) runs end to end at its smallest size and reports what
it measures (no timing assertions)."""

from __future__ import annotations

from helpers import run_python


def test_file_guard_benchmark_runs_and_reports_each_size_and_the_ratio():
    code = "import runpy; runpy.run_module('benchmarks.file_guard', run_name='__main__')"
    stdout = run_python(code, "--quick", "--repeat", "1", timeout=500, keras_imported=True)
    rows = [line.strip("| ").split(" | ") for line in stdout.splitlines() if line.startswith("| ")]
    assert [row[0] for row in rows] == ["strings", "---", "10", "100"], stdout
    assert all(float(cell) > 0 for row in rows[2:] for cell in row[2:5] + row[7:]), stdout  # loads, events
    assert "per-event cost with 100 strings ÷ with 10: " in stdout
