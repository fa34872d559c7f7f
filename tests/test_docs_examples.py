"""The runnable examples in docs/integrations/, run as the scripts they say they are.

Each runs in a fresh interpreter as ``__main__``, so the custom layer it
defines in ``__main__`` must travel to the workers by value.
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


@pytest.mark.parametrize(
    "page, engine",
    [
        pytest.param("dask.md", "distributed", id="dask"),
        pytest.param("ray.md", "ray", id="ray"),
    ],
)
@pytest.mark.timeout(480)
def test_integration_page_example_runs(tmp_path, page, engine):
    pytest.importorskip(engine, reason=f"{engine} is not installed (pip install -e '.[test]' installs it)")
    name, code = script_in(page)
    script = tmp_path / name
    script.write_text(code)
    out = run_script(script, cwd=tmp_path, timeout=420)
    assert f"{page.removesuffix('.md')} ok" in out
