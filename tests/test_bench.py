"""The benchmark script runs end to end on tiny models (no timing assertions)."""

from __future__ import annotations

import json
import re

from helpers import REPO_DIR, run_python, run_script


def test_bench_runs_end_to_end_on_tiny_models(tmp_path):
    out_json, out_png = tmp_path / "results.json", tmp_path / "bench.png"
    code = "import sys; from keras_pickle.cli import main; sys.exit(main(sys.argv[1:]))"
    args = ["bench", "--quick", "--repeat", "1", "--json", str(out_json), "--png", str(out_png)]
    stdout = run_python(code, *args, timeout=500)
    results = json.loads(out_json.read_text())
    ops = {(t["workload"], t["op"]) for t in results["timings"]}
    assert {("dense100mb", "dumps"), ("dense100mb", "loads"), ("dense100mb", "deepcopy")} <= ops
    assert {("deep150", "loads"), ("resnet50", "dumps+loads"), ("mlp3", "dumps+loads")} <= ops
    for timing in results["timings"]:
        assert timing["keras_s"] > 0 and timing["keras_pickle_s"] > 0 and timing["ratio"] > 0
    floors = results["floors"]
    assert {r["model"] for r in floors["dumps"]} == {"mlp3", "mobilenetv3small", "resnet50", "dense100mb"}
    assert all(r["inband_ratio"] > 0 and r["dumps_inband_ratio"] > 0 and r["oob_ratio"] > 0 for r in floors["dumps"])
    assert {r["model"] for r in floors["loads"]} == {"mobilenetv3small", "efficientnetb0", "resnet50", "deep150"}
    assert all(r["loads_ratio"] > 0 and r["deepcopy_ratio"] > 0 for r in floors["loads"])
    assert [r["model"] for r in floors["loads"] if r["linear_floor_s"]] == ["deep150"]
    # Keras constructing the layers is part of the floor, so it cannot take longer than the whole floor.
    assert all(0 < r["construction_bound_ratio"] < 1 for r in floors["loads"]), floors["loads"]
    assert {r["model"] for r in results["dumps_phases"]} == {r["model"] for r in floors["dumps"]}
    assert all(r["config_of_s"] > 0 and r["state_capture_s"] > 0 for r in results["dumps_phases"])
    assert results["goals"] and all(g["value"] is not None for g in results["goals"]), results["goals"]
    assert not results["errors"]
    assert results["memory"] and all(m["loads_result_ok"] for m in results["memory"])
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ratio" in stdout and "Goals" in stdout


def test_checksum_benchmark_runs_and_checks_what_it_times():
    stdout = run_script(REPO_DIR / "benchmarks" / "checksum.py", "--quick", "--repeat", "1")
    row = re.compile(r"^(?P<path>\S.*?)\s+(?P<op>dumps|loads)\s+[\d.]+s\s+[\d.]+s\s+[\d.]+x$")
    rows = [(m["path"], m["op"]) for m in map(row.match, stdout.splitlines()) if m]
    paths = [
        "keras_pickle.dump to a file",
        "keras_pickle.dumps in band",
        "pickle.dumps in band",
        "keras_pickle.dumps out of band",
        "pickle.dumps out of band",
    ]
    expected = [(path, op) for path in paths for op in ("dumps", "loads")]
    assert rows == expected * 2, stdout  # dense100mb, then resnet50
    assert stdout.count("keras built-in ") == 4, stdout


def test_startup_benchmark_shows_the_tools_import_no_framework():
    stdout = run_script(REPO_DIR / "benchmarks" / "startup.py", "--repeat", "1")
    frameworks = {line[:36].strip(): line.split("×", 1)[1].strip() for line in stdout.splitlines()[1:]}
    for tool in ("import keras_pickle", "keras-pickle inspect FILE", "keras-pickle check --help"):
        assert frameworks[tool] == "none", stdout
    assert "keras" in frameworks["import keras"].split(", "), stdout


def test_backends_benchmark_puts_each_backend_side_by_side(tmp_path):
    out_json = tmp_path / "backends.json"
    args = ["--quick", "--repeat", "1", "--backend", "tensorflow", "--backend", "jax", "--json", str(out_json)]
    stdout = run_script(REPO_DIR / "benchmarks" / "backends.py", *args, timeout=500)
    rows = [[c.strip() for c in line.split("|")] for line in stdout.splitlines() if line.count("|") == 4]
    rows = [r for r in rows if r[0] in ("tensorflow", "jax")]
    ops = {"dumps in band", "dumps out of band", "loads"}
    assert {(r[0], r[1]) for r in rows} == {(b, op) for b in ("tensorflow", "jax") for op in ops}, stdout
    assert all(float(r[4].rstrip("×")) > 0 for r in rows), stdout
    results = json.loads(out_json.read_text())["results"]
    assert [r["backend"] for r in results] == ["tensorflow", "jax"]
    assert all(r["copies"]["buffers"] > 0 for r in results)
    assert all(
        r["floor"]["floor_s"] > 0 and set(r["floor"]["writers"]) == {"pickle.dumps", "keras_pickle.dumps"}
        for r in results
    )
    assert "In-band dumps vs the floor" in stdout, stdout
