"""tests/run_all.py, the README's test command: every pytest run it makes, two at a time, and the worst exit status."""

from __future__ import annotations

import run_all
from helpers import TESTS_DIR


def test_the_tensorflow_processes_run_every_folder_exactly_once():
    tensorflow = [run for run in run_all.RUNS if run.backend == "tensorflow"]
    for folder in {path.parent.name for path in TESTS_DIR.glob("*/test_*.py")}:
        chosen = [run.name for run in tensorflow if (folder in run.only) or (not run.only and folder not in run.ignore)]
        assert len(chosen) == 1, (folder, chosen)


def test_the_marker_runs_collect_every_file_that_marks_its_tests_and_the_backend_runs_leave_tf_keras_out():
    backends, tf_keras = run_all.marked("backends"), run_all.marked("tf_keras")
    for path in TESTS_DIR.glob("*/test_*.py"):
        name = str(path.relative_to(TESTS_DIR))
        if "pytestmark = pytest.mark.backends" in path.read_text():
            assert name in backends, name
    assert "models/test_tf_keras.py" in tf_keras and "models/test_tf_keras.py" not in backends
    assert "safe_mode/test_allowlist.py" in backends and "safe_mode/test_allowlist.py" in tf_keras  # both dialects
    for run in run_all.RUNS:
        if run.backend in ("jax", "torch"):
            assert run.only == backends and run.marker == "backends and not tf_keras", run
        if run.backend == "tf-keras":
            assert run.only == tf_keras and run.marker == "tf_keras", run


def test_runs_side_by_side_print_each_output_whole_and_exit_with_the_worst(tmp_path, monkeypatch, capsys):
    for name, body in {"passing": "assert True", "failing": "assert 1 == 2, 'the failing run'"}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / f"test_{name}.py").write_text(f"def test_{name}():\n    {body}\n")
    runs = tuple(
        run_all.Run(name, "tensorflow", "not tf_keras", only=(str(tmp_path / name),)) for name in ("passing", "failing")
    )
    monkeypatch.setattr(run_all, "RUNS", runs)
    monkeypatch.setattr(run_all, "install_old_keras", lambda: None)

    code = run_all.main(["--jobs", "2", "-p", "no:cacheprovider"])

    out = capsys.readouterr().out
    assert code == 1
    assert out.count("==== passing ====") == 1 and out.count("==== failing ====") == 1
    failing = out[out.index("==== failing ====") :]
    failing = failing[: failing.index("==== passing ====")] if "==== passing ====" in failing else failing
    assert "the failing run" in failing and "1 failed" in failing  # its output, in its own block
    progress = [line for line in out.splitlines() if line.endswith("[100%]") and " | " in line]
    assert sorted(line.split(" | ")[0] for line in progress) == ["failing", "passing"], out  # each file, as it ended
    assert "passing: pytest exited 0" in out and "failing: pytest exited 1" in out
    assert out.rstrip().endswith("total: 1 passed, 1 failed")
