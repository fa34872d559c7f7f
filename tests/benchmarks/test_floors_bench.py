"""The floors benchmark (benchmarks/floors.py) runs end to end on a tiny model and prints its table of ratios
(no timing assertions)."""

from __future__ import annotations

import json

from test_bench import markdown_rows, run_benchmark

COLUMNS = ["backend", "model", "state", "dumps floor", "dumps in band", "pickle in band", "dumps oob", "loads floor"]
COLUMNS += ["loads", "deepcopy", "joblib floor / task", "joblib / task"]


def test_floors_benchmark_prints_a_ratio_per_backend_model_and_operation(tmp_path):
    out_json = tmp_path / "floors.json"
    args = ["floors", "--quick", "--repeat", "1", "--models", "mlp3", "--tasks", "2", "--json", str(out_json)]
    rows = markdown_rows(run_benchmark(*args, "--backends", "tensorflow", "torch"), len(COLUMNS))
    assert rows[0] == COLUMNS, rows
    assert [(row[0], row[1]) for row in rows[1:]] == [("tensorflow", "3-layer MLP+Adam"), ("torch", "3-layer MLP+Adam")]
    for row in rows[1:]:
        assert all(float(cell.rstrip("×")) > 0 for cell in row[4:7] + row[8:10] + row[11:]), row
    results = json.loads(out_json.read_text())
    assert not results["errors"] and set(results["metas"]) == {"tensorflow", "torch"}
    assert all(
        set(row["ratios"]) == {"dumps in band", "pickle in band", "dumps oob", "loads", "deepcopy", "joblib"}
        for row in results["rows"]
    )
