"""Every fenced Python example in README.md and docs/ runs as written, or says it is a fragment.

The runnable examples in docs/integrations/ run as the scripts they say they are.
Each runs in a fresh interpreter as ``__main__``, so the custom layer it
defines in ``__main__`` must travel to the workers by value (loky, Dask, Ray)
or be found again by re-importing the script (``spawn``). Each ends with its
own assertions (bit-identical training, identical predictions after a round
trip) and then prints ``<engine> ok``.

Every other ```` ```python ```` block of a page under docs/ (docs/security.md aside, whose
blocks show attacks) either runs, as written, in a fresh interpreter (a module it imports
that is not installed skips it), or is marked a fragment by an HTML comment on the line
just before its fence, which says what the reader supplies::

    <!-- fragment: data: any payload's bytes -->
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


# --------------------------------------------------------------------------
# Every other example: runs, or is marked a fragment
# --------------------------------------------------------------------------

FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FRAGMENT = re.compile(r"<!-- fragment: (.*?) -->\n\Z")
SCRIPT = re.compile(r"\A# (\w+\.py) — run with: python \1\n")
EXCLUDED = ("security.md",)  # its blocks show attacks, not usage


def doc_pages() -> list:
    """README.md and every page under docs/, but :data:`EXCLUDED`."""
    pages = [REPO_DIR / "README.md", *(REPO_DIR / "docs").rglob("*.md")]
    return sorted(p for p in pages if p.name not in EXCLUDED)


def examples() -> list[tuple[str, int, str, str | None]]:
    """(page, line, code, fragment reason or None) of every Python block of every page, scripts aside."""
    found = []
    for page in doc_pages():
        text = page.read_text()
        for match in FENCE.finditer(text):
            code = match.group(1)
            if SCRIPT.match(code):
                continue  # an integrations page's script: test_integration_page_example_runs runs it
            before = text[: match.start()]
            marker = FRAGMENT.search(before.rsplit("\n", 2)[-2] + "\n") if before.count("\n") >= 2 else None
            found.append((str(page.relative_to(REPO_DIR)), before.count("\n") + 1, code, marker and marker.group(1)))
    return found


RUNNABLE = [pytest.param(code, id=f"{page}:{line}") for page, line, code, reason in examples() if reason is None]


def test_every_fragment_marker_marks_a_python_block_and_says_why():
    for page in doc_pages():
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            if "<!-- fragment" in line:
                assert FRAGMENT.search(line + "\n") and FRAGMENT.search(line + "\n").group(1).strip(), (page, number)
                assert lines[number + 1] == "```python", f"{page.name}:{number + 1}: a marker with no block after it"


def test_the_docs_hold_runnable_examples_and_fragments():
    found = examples()
    assert len(RUNNABLE) >= 3 and any(reason for *_rest, reason in found)
    assert {"docs/guide.md", "README.md"} <= {page for page, _line, _code, reason in found if reason is None}


@pytest.mark.parametrize("code", RUNNABLE)
@pytest.mark.timeout(300)
def test_every_unmarked_example_runs_as_written(tmp_path, code):
    for module in re.findall(r"^(?:import|from) (\w+)", code, re.M):
        pytest.importorskip(module, reason=f"the example imports {module}, which is not installed")
    script = tmp_path / "example.py"
    script.write_text(code)
    run_script(script, cwd=tmp_path, timeout=280)


def test_the_guide_names_the_format_version_keras_pickle_writes():
    from keras_pickle._wire.schema import FORMAT_VERSION

    guide = (REPO_DIR / "docs" / "guide.md").read_text()
    assert f"keras_pickle writes format version {FORMAT_VERSION} and reads versions 1 to {FORMAT_VERSION}" in guide
