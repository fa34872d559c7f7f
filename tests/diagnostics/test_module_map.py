"""The maps of the package stay true: docs/architecture.md lists every module, every package's docstring
lists its modules, no package ``__init__.py`` holds an implementation, and no two modules share a file
name (but a dialect package's module and its sibling's, which answer the same question for each Keras)."""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "keras_pickle"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
DIALECT_PACKAGES = {"_keras3", "_tfkeras"}
"""Sibling packages that answer the same questions for each Keras: a module name may appear in both."""


def _modules() -> list[str]:
    """Every module of keras_pickle by its path under ``keras_pickle/``, package ``__init__`` files aside
    (but the top-level one, the public API)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" and path.parent != PACKAGE:
            continue
        found.append(relative)
    return found


def _documented() -> set[str]:
    """The module paths the first column of docs/architecture.md's "Who owns what" table names."""
    text = ARCHITECTURE.read_text()
    table = text.split("## Who owns what", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("|")]
    return {path for cell in rows for path in re.findall(r"`([\w/]+\.py)`", cell)}


def _subpackages() -> list[Path]:
    return sorted(path.parent for path in PACKAGE.rglob("__init__.py") if path.parent != PACKAGE)


def test_architecture_lists_every_module_and_only_modules_that_exist():
    modules, documented = set(_modules()), _documented()
    assert sorted(modules - documented) == [], "modules docs/architecture.md does not list"
    assert sorted(documented - modules) == [], "modules docs/architecture.md lists that do not exist"


@pytest.mark.parametrize("package", _subpackages(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_a_package_docstring_maps_each_of_its_modules(package):
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    modules = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    missing = [name for name in modules if not re.search(rf"(:mod:`\.|``){name}(`|``)", docstring)]
    assert missing == [], f"{package.name}/__init__.py's docstring does not name these modules"


@pytest.mark.parametrize("package", _subpackages(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_a_package_init_holds_no_implementation(package):
    tree = ast.parse((package / "__init__.py").read_text())
    implementation = [
        node.lineno
        for node in tree.body
        if not isinstance(node, (ast.Import, ast.ImportFrom))
        and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        and not (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"])
    ]
    assert implementation == [], f"{package.name}/__init__.py holds code at these lines"


def test_no_two_modules_share_a_file_name_but_dialect_siblings():
    by_name = collections.defaultdict(list)
    for module in _modules():
        by_name[Path(module).name].append(Path(module).parent.as_posix())
    shared = {
        name: folders for name, folders in by_name.items() if len(folders) > 1 and not set(folders) <= DIALECT_PACKAGES
    }
    assert shared == {}
