"""The README is a front door and every link in the docs leads somewhere.

* README.md stays under 150 lines and holds the two commands (the demo; the tests, as ``.ci/run``
  runs them), a link to every integration page, and one performance table whose figures
  docs/performance.md gives with their command.
* Every relative link of README.md and of the pages under docs/ names a file that exists and, for a
  ``#fragment`` into a Markdown page, a heading of that page (GitHub's anchors).
* Every install line is the checkout form (``pip install -e '.[extra]'``): keras-pickle is on no
  package index, so ``pip install 'keras-pickle[...]'`` fails as written.
* No page tells users that optimizer instances need ``install(allow=("optimizers",))``: one never
  built pickles by its config, a built one as its model's (tests/integrations/test_sklearn.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO_DIR

README = REPO_DIR / "README.md"
PAGES = [README, *sorted((REPO_DIR / "docs").rglob("*.md")), REPO_DIR / "tests" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's anchor of every heading of ``page``: lowercase, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``."""
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_DIR)))
def test_every_relative_link_leads_to_a_file_and_a_heading(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: {file.name} has no heading #{fragment}")
    assert broken == [], f"{page.relative_to(REPO_DIR)}: " + "; ".join(broken)


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) < 150
    assert "python -m pip install -e '.[tensorflow]' && keras-pickle demo" in text
    test_command = "python -m pip install torch==2.13.0 -e '.[test,jax,torch]' && python tests/run_all.py"
    assert test_command in text and test_command in (REPO_DIR / ".ci" / "run").read_text()
    linked = {Path(target).name for target in links(README)}
    integrations = {page.name for page in (REPO_DIR / "docs" / "integrations").glob("*.md")} - {"README.md"}
    assert integrations <= linked, integrations - linked
    assert {"performance.md", "testing.md", "security.md", "guide.md"} <= linked


def test_the_readmes_performance_figures_are_the_performance_pages():
    """The README's one table is a subset of docs/performance.md's, which names the command."""
    readme_rows = [line for line in README.read_text().splitlines() if re.match(r"\| .*\d.*× \|$", line)]
    performance = (REPO_DIR / "docs" / "performance.md").read_text()
    assert len(readme_rows) >= 3
    for row in readme_rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        figures = cells[2:]  # Keras's, keras_pickle's, the ratio
        assert any(all(figure in line for figure in figures) for line in performance.splitlines()), row
    assert "python -m benchmarks bench" in README.read_text() and "python -m benchmarks bench" in performance


INSTALL_FROM_INDEX = re.compile(r"pip install [^`\n]*['\"]keras-pickle\[|`keras-pickle\[")


@pytest.mark.parametrize("page", [*PAGES, REPO_DIR / ".ci" / "run"], ids=lambda page: str(page.relative_to(REPO_DIR)))
def test_every_install_line_installs_from_the_checkout(page):
    assert INSTALL_FROM_INDEX.findall(page.read_text()) == []


def test_no_page_says_optimizer_instances_need_opting_in():
    for page in PAGES:
        text = page.read_text()
        assert 'add `"optimizers"`' not in text, page.name
        assert 'allow=("optimizers",)` a metric' not in text, page.name
        assert "Optimizers, metrics and callbacks raise" not in text, page.name
