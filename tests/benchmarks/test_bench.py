"""The benchmarks run end to end at their smallest size (no timing assertions), and every benchmark
command the docs name exists with the options they give it."""

from __future__ import annotations

import json
import re

from helpers import REPO_DIR, run_python

BENCHMARKS = REPO_DIR / "benchmarks"


def run_benchmark(*args: str, timeout: float = 500, env: dict | None = None) -> str:
    code = "import runpy; runpy.run_module('benchmarks', run_name='__main__')"
    return run_python(code, *args, timeout=timeout, env=env, keras_imported=True)


def markdown_rows(stdout: str, columns: int) -> list[list[str]]:
    lines = [line for line in stdout.splitlines() if line.startswith("| ") and line.count(" | ") == columns - 1]
    lines = [line for line in lines if not line.startswith("| --- |")]  # header rows stay
    return [[cell.strip() for cell in line.strip("| ").split(" | ")] for line in lines]


def test_bench_runs_end_to_end_on_tiny_models(tmp_path):
    out_json, out_png = tmp_path / "results.json", tmp_path / "bench.png"
    code = "import sys; from keras_pickle.cli import main; sys.exit(main(sys.argv[1:]))"  # keras-pickle bench
    args = ["bench", "--quick", "--repeat", "1", "--json", str(out_json), "--png", str(out_png)]
    stdout = run_python(code, *args, timeout=500, keras_imported=True)
    results = json.loads(out_json.read_text())
    ops = {(t["workload"], t["op"]) for t in results["timings"]}
    assert {("dense100mb", "dumps"), ("dense100mb", "loads"), ("dense100mb", "deepcopy")} <= ops
    assert {("dense100mb", "10 loads in a row"), ("deep150", "loads"), ("resnet50", "dumps+loads")} <= ops
    assert ("mlp3", "dumps+loads") in ops
    for timing in results["timings"]:
        assert timing["keras_s"] > 0 and timing["keras_pickle_s"] > 0 and timing["ratio"] > 0
    floors = results["floors"]
    assert {r["model"] for r in floors["dumps"]} == {"mlp3", "mobilenetv3small", "resnet50", "dense100mb"}
    assert all(r["inband_ratio"] > 0 and r["dumps_inband_ratio"] > 0 and r["oob_ratio"] > 0 for r in floors["dumps"])
    assert all(r["buffers"] > 0 and r["copied_buffers"] == 0 for r in floors["dumps"])  # TensorFlow's reads alias
    assert {r["model"] for r in floors["loads"]} == {"mobilenetv3small", "efficientnetb0", "resnet50", "deep150"}
    assert all(r["loads_ratio"] > 0 and r["deepcopy_ratio"] > 0 for r in floors["loads"])
    # Keras constructing the layers is part of the floor, so it cannot take longer than the whole floor.
    assert all(0 < r["construction_bound_ratio"] < 1 for r in floors["loads"]), floors["loads"]
    assert not results["errors"]
    sweep = sorted((t["axis"], t["op"]) for t in results["timings"] if "axis" in t)  # 3 points of each axis
    assert sweep == sorted((axis, op) for axis in ("params", "depth") for op in ("dumps", "loads") for _ in "123")
    assert all(slope is not None for slope in results["slopes"].values()), results["slopes"]
    assert len(results["memory"]) == 2 * 7 and all(m["loads_result_ok"] for m in results["memory"])
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ratio" in stdout and "log-log slope" in stdout


def test_checksum_benchmark_runs_and_checks_what_it_times():
    rows = markdown_rows(run_benchmark("checksum", "--quick", "--repeat", "1"), 5)
    paths = ["keras_pickle.dump to a file", "keras_pickle.dumps in band", "pickle.dumps in band"]
    paths += ["keras_pickle.dumps out of band", "pickle.dumps out of band", "keras built-in"]
    expected = [(path, op) for path in paths for op in ("dumps", "loads")]
    assert [(row[0], row[1]) for row in rows if row[0] != "path"] == expected * 2, rows  # dense100mb, resnet50
    assert all(float(row[4].rstrip("x")) > 0 for row in rows if row[0] not in ("path", "keras built-in")), rows


def test_startup_benchmark_shows_the_tools_import_no_framework():
    rows = markdown_rows(run_benchmark("startup", "--repeat", "1"), 4)
    frameworks = {row[0]: row[3] for row in rows}
    for tool in ("import keras_pickle", "keras-pickle inspect FILE", "keras-pickle check --help"):
        assert frameworks[tool] == "none", rows
    assert "keras" in frameworks["import keras"].split(", "), rows


def test_bench_on_another_backend_gives_that_backends_figures_for_one_model(tmp_path):
    out_json = tmp_path / "bench.json"
    args = ["--quick", "--repeat", "1", "--only", "dense100mb", "--no-sweep", "--no-memory", "--json", str(out_json)]
    run_benchmark("bench", *args, env={"KERAS_BACKEND": "jax"})
    results = json.loads(out_json.read_text())
    assert results["meta"]["backend"] == "jax" and not results["errors"]
    assert [t["op"] for t in results["timings"]] == ["dumps in band", "dumps", "loads", "10 loads in a row", "deepcopy"]
    assert all(t["ratio"] > 0 for t in results["timings"])
    (floor,) = results["floors"]["dumps"]
    assert floor["inband_ratio"] > 0 and floor["dumps_inband_ratio"] > 0
    assert floor["buffers"] > 0 and floor["copied_buffers"] == 0  # JAX's arrays are handed out as they are


# --------------------------------------------------------------------------
# What the docs name
# --------------------------------------------------------------------------

DOCS = [REPO_DIR / "README.md", *sorted((REPO_DIR / "docs").rglob("*.md"))]


def test_every_benchmark_command_the_docs_name_exists_with_its_options():
    from benchmarks.__main__ import NAMES

    named = set()
    for page in DOCS:
        text = page.read_text()
        assert "python benchmarks/" not in text, f"{page.name} names a benchmark as a script: python -m benchmarks NAME"
        commands = re.findall(r"python -m benchmarks (\w+)([^`\n]*)", text)
        for name, rest in commands + [("bench", rest) for rest in re.findall(r"keras-pickle bench([^`\n]*)", text)]:
            assert name in NAMES, f"{page.name}: python -m benchmarks {name}: no such benchmark"
            source = (BENCHMARKS / f"{name}.py").read_text() + (BENCHMARKS / "common.py").read_text()
            missing = [o for o in re.findall(r"--[\w-]+", rest) if o != "--help" and f'"{o}"' not in source]
            assert not missing, f"{page.name}: python -m benchmarks {name} has no option {missing}"
            named.add(name)
    assert named == set(NAMES)  # every benchmark produces a figure the docs quote


def test_no_benchmark_reaches_keras_pickles_internals():
    """Measured through the public API (the wire format's reconstructor name aside)."""
    reaching = {
        path.name for path in BENCHMARKS.glob("*.py") if re.search(r"keras_pickle\._(?!_|format\b)", path.read_text())
    }
    assert reaching == set()
