"""MLflow: a logged model's requirements install, and keras_pickle reaches the serving process.

keras-pickle is on no package index, so ``keras-pickle==<version>`` in a model's requirements.txt fails
wherever MLflow restores the model's environment. Where this process did not install keras_pickle from
an index, the flavor logs the package in the model's code directory and requires its dependencies
instead: the written requirements resolve in a fresh virtual environment (``pip install --dry-run``),
and a process that cannot import keras_pickle otherwise serves the model from the logged copy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import yaml
from helpers import REPO_DIR, engine, run_python

import keras_pickle

mlflow = engine("mlflow")
keras_pickle_mlflow = engine("keras_pickle.integrations.mlflow")

UNREACHABLE = ("Could not fetch URL", "NewConnectionError", "Temporary failure in name resolution", "Network is")


def saved(path: Path) -> tuple[keras.Model, np.ndarray]:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    keras_pickle_mlflow.save_model(model, str(path))
    return model, np.linspace(-1, 1, 20, dtype="float32").reshape(5, 4)


def test_this_checkout_is_not_installed_from_an_index():
    assert not keras_pickle_mlflow.installed_from_an_index()  # the test extra installs it editable


def fake_install(site: Path, metadata: str, extra: dict[str, str]) -> Path:
    """``site``/keras_pickle/__init__.py and ``site``/``metadata`` with the files ``extra`` names."""
    package = site / "keras_pickle"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    info = site / metadata
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: keras-pickle\nVersion: 0.3.0\n")
    for name, text in extra.items():
        (info / name).write_text(text)
    return package


@pytest.mark.parametrize(
    "metadata, extra, from_index",
    [
        ("keras_pickle-0.3.0.dist-info", {"RECORD": "keras_pickle/__init__.py,,\n"}, True),
        ("keras_pickle-0.3.0.dist-info", {"RECORD": "keras_pickle/__init__.py,,\n",
                                          "direct_url.json": '{"url": "file:///x/keras_pickle-0.3.0.whl"}'}, False),
        ("keras_pickle-0.3.0.dist-info", {"RECORD": "__editable__.keras_pickle-0.3.0.pth,,\n",
                                          "direct_url.json": '{"dir_info": {"editable": true}}'}, False),
        ("keras_pickle.egg-info", {"SOURCES.txt": "keras_pickle/__init__.py\n"}, False),
    ],
    ids=["wheel-from-an-index", "local-wheel", "editable", "source-tree"],
)  # fmt: skip
def test_installed_from_an_index_tells_an_index_install_from_the_others(tmp_path, metadata, extra, from_index):
    package = fake_install(tmp_path, metadata, extra)
    assert keras_pickle_mlflow.installed_from_an_index(package, path=[str(tmp_path)]) is from_index


def test_the_dependencies_named_instead_are_pyprojects():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    names = sorted(requirement.split(">")[0].split("=")[0].strip() for requirement in declared)
    assert sorted(keras_pickle_mlflow.OWN_DEPENDENCIES) == names


def test_where_no_index_has_it_the_package_travels_and_the_requirements_resolve_in_a_fresh_venv(tmp_path):
    saved(tmp_path / "model")
    requirements = (tmp_path / "model" / "requirements.txt").read_text().splitlines()
    assert not [line for line in requirements if line.startswith("keras-pickle")], requirements
    assert f"keras=={keras.__version__}" in requirements and any(line.startswith("xxhash==") for line in requirements)
    assert (tmp_path / "model" / "code" / "keras_pickle" / "integrations" / "mlflow.py").is_file()
    assert not list((tmp_path / "model" / "code").rglob("__pycache__"))
    flavor = yaml.safe_load((tmp_path / "model" / "MLmodel").read_text())["flavors"]["keras_pickle"]
    assert "keras_pickle" not in flavor["modules"]  # the loader, never imported as the model's own code
    conda = yaml.safe_load((tmp_path / "model" / "conda.yaml").read_text())
    (pip,) = [dependency["pip"] for dependency in conda["dependencies"] if isinstance(dependency, dict)]
    assert pip == requirements  # conda.yaml's pip section: the same lines

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # --no-deps: each line as written must resolve on an index (keras-pickle==<version> did not); the pins come
    # from this one environment, so their own dependencies agree (resolving them all took 45 s against 9 s).
    command = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--dry-run",
               "--no-deps", "--no-input", "-r", str(tmp_path / "model" / "requirements.txt")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    output = result.stdout + result.stderr
    if result.returncode != 0 and any(sign in output for sign in UNREACHABLE):
        if os.environ.get("KERAS_PICKLE_REQUIRE_ENGINES") == "1":
            raise AssertionError(f"no package index reachable to resolve the requirements:\n{output[-3000:]}")
        pytest.skip("no package index reachable: the requirements could not be resolved")
    assert result.returncode == 0, output[-3000:]
    would_install = [line for line in output.splitlines() if line.startswith("Would install ")]
    assert would_install and f"keras-{keras.__version__}" in would_install[0].split(), output[-3000:]
    assert len(would_install[0].split()) - 2 == len(requirements)  # every line, nothing else


HIDDEN = """
import importlib.util, json, os, sys
repo = os.path.realpath(sys.argv[1])
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != repo]
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in str(getattr(f, "__module__", ""))]
found = {"importable_before": importlib.util.find_spec("keras_pickle") is not None}
import mlflow, numpy as np
found["predictions"] = mlflow.pyfunc.load_model(sys.argv[2]).predict(np.load(sys.argv[3])).tobytes().hex()
found["keras_pickle_file"] = sys.modules["keras_pickle"].__file__
print(json.dumps(found))
"""


def test_a_process_without_keras_pickle_serves_the_model_from_the_logged_package(tmp_path):
    import json

    model, x = saved(tmp_path / "model")
    np.save(tmp_path / "x.npy", x)
    out = run_python(HIDDEN, str(REPO_DIR), str(tmp_path / "model"), str(tmp_path / "x.npy"), cwd=tmp_path)
    found = json.loads(out.splitlines()[-1])
    assert found["importable_before"] is False  # the control: this process could not import keras_pickle
    assert found["keras_pickle_file"] == str(tmp_path / "model" / "code" / "keras_pickle" / "__init__.py")
    assert found["predictions"] == model.predict(x, verbose=0).tobytes().hex()


def test_installed_from_an_index_it_is_pinned_and_not_logged(tmp_path, monkeypatch):
    monkeypatch.setattr(keras_pickle_mlflow, "installed_from_an_index", lambda: True)
    saved(tmp_path / "model")
    requirements = (tmp_path / "model" / "requirements.txt").read_text().splitlines()
    assert f"keras-pickle=={keras_pickle.__version__}" in requirements
    assert not (tmp_path / "model" / "code").exists()
