"""The package's structure: layers bottom to top, no cycle, and light tools.

Read from the source (ast), so that it holds for code no test happens to run.
docs/architecture.md draws the same layers; a new module must be placed in
``LAYERS`` before this passes.
"""

from __future__ import annotations

import ast
import importlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import keras
import pytest
from helpers import REPO_DIR

import keras_pickle

PACKAGE_DIR = Path(keras_pickle.__file__).resolve().parent
BOTTOM, KERAS, SIDES, TOP = 0, 1, 2, 3
# Each module's layer, by name or by package prefix (a trailing dot).
LAYERS = {
    # bottom: errors, the wire format, safe mode's policy, the restricted reader. No Keras, no backend.
    "keras_pickle.errors": BOTTOM,
    "keras_pickle.limits": BOTTOM,
    "keras_pickle._version": BOTTOM,
    "keras_pickle._wire.": BOTTOM,
    "keras_pickle._reader.": BOTTOM,
    "keras_pickle._safe_mode.": BOTTOM,
    "keras_pickle._quiet": BOTTOM,
    # diagnosis: what the format's readers and inspect need is bottom; naming Keras's side and choosing a
    # load's error sit with what they read.
    "keras_pickle._diagnosis.": BOTTOM,
    "keras_pickle._diagnosis.sides": KERAS,
    "keras_pickle._diagnosis.load_failure": TOP,
    "keras_pickle._diagnosis.diagnose": TOP,
    # what one Keras dialect needs (Keras 3), and the per-call context both sides read.
    "keras_pickle._keras3.": KERAS,
    "keras_pickle._tfkeras.": KERAS,
    "keras_pickle._dialect": KERAS,
    "keras_pickle._blueprint": KERAS,
    "keras_pickle._options": KERAS,
    "keras_pickle._pickling_context": KERAS,
    # the dump side and the load side.
    "keras_pickle._capture.": SIDES,
    "keras_pickle._rebuild.": SIDES,
    # top: the protocol (reconstructor, mixins, copies, allow=, install()), integrations, check, inspect, CLI.
    "keras_pickle._protocol.": TOP,
    "keras_pickle._format": TOP,
    "keras_pickle._allow": TOP,
    "keras_pickle._api": TOP,
    "keras_pickle._check.": TOP,
    "keras_pickle._inspect.": TOP,
    "keras_pickle.integrations.": TOP,
    "keras_pickle.demo": TOP,
    "keras_pickle.cli": TOP,
    "keras_pickle.__main__": TOP,
    "keras_pickle": TOP,
}
FRAMEWORKS = ("keras", "tensorflow", "jax", "jaxlib", "torch", "flax")
# Modules that must import no framework at any depth: the bottom layer and the byte-reading tools.
FRAMEWORK_FREE = ("keras_pickle.errors", "keras_pickle.limits", "keras_pickle._version", "keras_pickle._wire.",
                  "keras_pickle._reader.", "keras_pickle._safe_mode.", "keras_pickle._inspect.", "keras_pickle.cli",
                  "keras_pickle.__main__", "keras_pickle")  # fmt: skip
# Imports allowed inside a function: optional dependencies, never a keras_pickle module...
OPTIONAL = ("dask", "distributed", "ray", "scikeras", "cloudpickle", "ml_dtypes", "rich", "tf_keras")
# ...except these, each for start-up time: a command imports Keras only when it runs.
LAZY_COMMANDS = {("keras_pickle.cli", "keras_pickle._check"), ("keras_pickle.cli", "keras_pickle.demo")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def layer_of(module: str) -> int:
    for key, layer in sorted(LAYERS.items(), key=lambda item: -len(item[0])):
        if module == key or module == key.rstrip(".") or (key.endswith(".") and module.startswith(key)):
            return layer
    raise AssertionError(f"{module} has no layer: add it to LAYERS here and to docs/architecture.md")


def imports_of(module: str) -> list[tuple[str, bool, int]]:
    """(imported module, inside a function?, line) for every import statement of ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                for alias in child.names:
                    target = f"{base}.{alias.name}"
                    found.append((target if target in MODULES else base, in_function, child.lineno))
            elif not (isinstance(child, ast.If) and _is_type_checking(child.test)):
                visit(child, nested)

    visit(tree, False)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def internal_graph() -> dict[str, set[str]]:
    return {module: {target for target, _f, _l in imports_of(module) if target in MODULES} for module in MODULES}


def test_every_module_has_a_layer_and_imports_only_downward_or_sideways():
    upward = []
    for module in MODULES:
        for target, _in_function, line in imports_of(module):
            if target in MODULES and layer_of(target) > layer_of(module):
                upward.append(f"{module}:{line} imports {target} (layer {layer_of(target)} > {layer_of(module)})")
    assert not upward, "\n".join(upward)


def test_the_import_graph_has_no_cycle():
    graph = internal_graph()
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_function_level_imports_are_only_optional_dependencies():
    offending = []
    for module in MODULES:
        for target, in_function, line in imports_of(module):
            if not in_function or (module, target) in LAZY_COMMANDS:
                continue
            if target.startswith("keras_pickle") or target.split(".")[0] not in OPTIONAL:
                offending.append(f"{module}:{line} imports {target} inside a function")
    assert not offending, "\n".join(offending)


def test_the_bottom_layer_and_the_tools_import_no_framework():
    offending = []
    for module in MODULES:
        if layer_of(module) != BOTTOM and not any(
            module == key or (key.endswith(".") and module.startswith(key)) for key in FRAMEWORK_FREE
        ):
            continue
        for target, _in_function, line in imports_of(module):
            if target.split(".")[0] in FRAMEWORKS:
                offending.append(f"{module}:{line} imports {target}")
    assert not offending, "\n".join(offending)


def test_the_layer_check_catches_what_it_guards():
    # The checks above are only as good as the import reader: it must see a function-level
    # import, resolve a relative one, and find the reconstructor's dependency on the payload code.
    seen = imports_of("keras_pickle._protocol.reconstruct")
    assert ("keras_pickle._rebuild.decode", False) in [(t, f) for t, f, _ in seen]
    assert layer_of("keras_pickle._rebuild.decode") == SIDES and layer_of("keras_pickle._wire.schema") == BOTTOM
    lazy = [(t, f) for t, f, _ in imports_of("keras_pickle.cli")]
    assert ("keras_pickle._check", True) in lazy and ("keras_pickle._inspect", False) in lazy
    assert "keras_pickle._protocol.install" in internal_graph()["keras_pickle._format"]


def test_no_module_is_longer_than_a_sitting():
    long = [f"{m}: {len(p.read_text().splitlines())} lines" for m, p in MODULES.items()]
    long = [entry for entry in long if int(entry.rsplit(": ", 1)[1].split()[0]) > 420]
    assert not long, long


FRAMEWORK_PROBE = """
import json, runpy, sys
sys.argv = ["keras_pickle", *sys.argv[1:]]
try:
    runpy.run_module("keras_pickle", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "frameworks": sorted(m for m in sys.modules if m.split(".")[0] in %r)}))
""" % (FRAMEWORKS,)  # noqa: UP031


def run_cli_probe(*args: str, cwd: Path) -> dict:
    """``python -m keras_pickle ARGS`` in a fresh interpreter: its exit code and the frameworks it imported."""
    env = {"PYTHONPATH": str(REPO_DIR), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", FRAMEWORK_PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_inspect_and_help_import_no_framework_in_a_fresh_interpreter(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(model))
    described = run_cli_probe("inspect", "model.pkl", "--json", cwd=tmp_path)
    assert described == {"code": 0, "frameworks": []}
    for args in (["check", "--help"], ["inspect", "--help"], ["--help"]):
        assert run_cli_probe(*args, cwd=tmp_path) == {"code": 0, "frameworks": []}, args
    # The probe does see a framework when a command imports one.
    (tmp_path / "target.py").write_text("answer = 42\n")
    checked = run_cli_probe("check", "target:answer", cwd=tmp_path)
    assert checked["code"] == 0 and "keras" in checked["frameworks"]


def test_import_keras_pickle_is_light_until_a_keras_level_name_is_used(tmp_path):
    code = (
        "import sys, keras_pickle\n"
        "light = [m for m in sys.modules if m.split('.')[0] == 'keras']\n"
        "keras_pickle.FORMAT_VERSION, keras_pickle.limits.MAX_LAYERS, keras_pickle.KerasPickleError\n"
        "keras_pickle.install()\n"
        "print(len(light), keras_pickle.is_installed(), 'install' in dir(keras_pickle))\n"
    )
    env = {"PYTHONPATH": str(REPO_DIR), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "True", "True"]


@pytest.mark.parametrize("path", ["keras_pickle._format.restore", "keras_pickle._allow.restore_with_state",
                                  "keras_pickle._allow.restore_callback"])  # fmt: skip
def test_reconstructors_are_published_under_their_stable_paths(path):
    module, _, name = path.rpartition(".")
    function = getattr(importlib.import_module(module), name)
    assert (function.__module__, function.__qualname__) == (module, name)
    assert pickle.loads(pickle.dumps(function)) is function
