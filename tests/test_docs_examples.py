"""The runnable examples in docs/integrations/, run as the scripts they say they are.

Each runs in a fresh interpreter as ``__main__``, so the custom layer it
defines in ``__main__`` must travel to the workers by value (loky, Dask, Ray)
or be found again by re-importing the script (``spawn``). Each ends with its
own assertions (bit-identical training, identical predictions after a round
trip) and then prints ``<engine> ok``.
"""

from __future__ import annotations

import re

import pytest
from helpers import REPO_DIR, run_script

DOCS = REPO_DIR / "docs" / "integrations"


def script_in(page: str) -> tuple[str, str]:
    """(file name, code) of the example block that starts with ``# NAME.py — run with``."""
    text = (DOCS / page).read_text()
    match = re.search(r"```python\n# (\w+\.py) — run with: python \1\n(.*?)```", text, re.S)
    assert match, f"{page} has no runnable example"
    return match.group(1), match.group(2)


PAGES = [
    pytest.param("joblib.md", "joblib", "joblib ok", id="joblib"),
    pytest.param("multiprocessing.md", None, "multiprocessing ok", id="multiprocessing"),
    pytest.param("keras-wrappers.md", "sklearn", "keras wrappers ok", id="keras-wrappers"),
    pytest.param("scikit-learn-scikeras.md", "scikeras", "scikeras ok", id="scikeras"),
    pytest.param("dask.md", "distributed", "dask ok", id="dask"),
    pytest.param("ray.md", "ray", "ray ok", id="ray"),
    pytest.param("spark.md", "pyspark", "spark ok", id="spark"),
    pytest.param("mlflow.md", "mlflow", "mlflow ok", id="mlflow"),
    pytest.param("optuna.md", "optuna", "optuna ok", id="optuna"),
]


def test_every_engine_page_has_a_runnable_example():
    pages = sorted(path.name for path in DOCS.glob("*.md") if path.name != "README.md")
    assert pages == sorted(param.values[0] for param in PAGES)
    for page in pages:
        script_in(page)


@pytest.mark.parametrize("page, engine, printed", PAGES)
@pytest.mark.timeout(480)
def test_integration_page_example_runs(tmp_path, page, engine, printed):
    if engine is not None:
        pytest.importorskip(engine, reason=f"{engine} is not installed (pip install -e '.[test]' installs it)")
    name, code = script_in(page)
    script = tmp_path / name
    script.write_text(code)
    out = run_script(script, cwd=tmp_path, timeout=420)
    assert printed in out.splitlines(), out
