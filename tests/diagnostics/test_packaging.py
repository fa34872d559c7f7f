"""pyproject.toml's extras, and every install command the docs and CI give: the extras exist as spelt.

pip normalizes an extra's name (PEP 685: lowercase, runs of ``-``, ``_`` and ``.`` as one ``-``);
pip 23 and older compare the spelling as written, so ``.[tf_keras]`` against an extra declared
``tf_keras`` warned "does not provide the extra" and installed nothing. Every extra is declared in
its normalized spelling, and every command names it so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO_DIR

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = REPO_DIR
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

# 'keras-pickle[a,b]' or '.[a,b]' inside quotes: how the README, the guide and CI spell an install.
INSTALL = re.compile(r"""['"](?:keras-pickle|\.)\[([A-Za-z0-9,_.-]+)\]""")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_extra_is_declared_in_its_normalized_spelling():
    assert "tf-keras" in EXTRAS
    assert [name for name in EXTRAS if name != normalized(name)] == []


def test_extras_that_include_others_name_them_as_declared():
    for name, requirements in EXTRAS.items():
        for requirement in requirements:
            match = re.match(r"keras-pickle\[([^\]]+)\]", requirement)
            if match:
                assert set(match.group(1).split(",")) <= EXTRAS.keys(), (name, requirement)


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / ".ci" / "run", ROOT / "tests" / "run_all.py", *sorted(ROOT.glob("docs/**/*.md"))]


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_install_command_names_extras_that_exist(path):
    for match in INSTALL.finditer(path.read_text()):
        for extra in match.group(1).split(","):
            assert extra in EXTRAS, f"{path.name}: {match.group(0)} names no extra {extra!r}"


def test_the_readme_and_the_guide_say_how_to_install_tf_keras():
    """From a checkout: keras-pickle is on no package index (tests/diagnostics/test_docs_pages.py)."""
    assert "'.[tf-keras]'" in (ROOT / "README.md").read_text()
    assert "python -m pip install -e '.[tf-keras]'" in (ROOT / "docs" / "guide.md").read_text()
