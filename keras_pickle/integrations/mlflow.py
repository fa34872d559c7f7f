"""An MLflow flavor whose logged model is one keras_pickle payload, loaded through safe mode.

MLflow's ``mlflow.sklearn`` stores models with skops by default, which refuses custom classes,
and its pickle formats run whatever the file says on load. This flavor stores a keras_pickle
payload (with its checksum) and names this module as the pyfunc loader, so loading the logged
model unpickles no code: ``mlflow.pyfunc.load_model`` and :func:`load_model` read the payload with
``keras_pickle.loads`` (safe mode)::

    import keras_pickle.integrations.mlflow as keras_pickle_mlflow

    with mlflow.start_run():
        info = keras_pickle_mlflow.log_model(model, name="model", code_paths=["layers.py"])
    served = mlflow.pyfunc.load_model(info.model_uri)      # a fresh process: keras_pickle.loads
    served.predict(x)                                         # model.predict(x), as a numpy array
    keras_pickle_mlflow.load_model(info.model_uri)          # the Keras model itself

The model's requirements name Keras and the backend, pinned to the writing process's versions, and
keras-pickle: pinned, where this process installed it from a package index; otherwise (a checkout,
editable or not, a local wheel) no index has it, so the package itself is logged with the model
(its code directory, which MLflow puts on ``sys.path`` before it imports the loader) and the
requirements name its own dependencies instead (:func:`get_default_pip_requirements`).

Custom classes travel as the payload carries them: by reference (ship their module with
``code_paths``: loading imports the modules shipped so, and only those, then safe mode judges each
class by name) or, defined in the main script, by value, which safe mode loads only when the loader
opts in (``model_config={"allow_by_value": True}`` for pyfunc, ``allow_by_value=True`` here).
Importing this module requires ``mlflow``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import types
from pathlib import Path
from typing import Any

import keras
import numpy as np
import yaml
from mlflow.models import Model
from mlflow.models.model import MLMODEL_FILE_NAME
from mlflow.models.utils import _save_example
from mlflow.pyfunc import add_to_model
from mlflow.tracking.artifact_utils import _download_artifact_from_uri
from mlflow.utils.environment import (
    _CONDA_ENV_FILE_NAME,
    _PYTHON_ENV_FILE_NAME,
    _REQUIREMENTS_FILE_NAME,
    _mlflow_conda_env,
    _process_conda_env,
    _process_pip_requirements,
    _PythonEnv,
)
from mlflow.utils.model_utils import (
    _add_code_from_conf_to_system_path,
    _get_flavor_configuration,
    _validate_and_copy_code_paths,
)

from .._api import dumps, load
from .._version import __version__
from ..errors import UnsafePayloadError

FLAVOR_NAME = "keras_pickle"
PAYLOAD_FILE = "model.keras_pickle"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The keras_pickle package this process imported: logged with a model where no index has it."""
OWN_DEPENDENCIES = ("cloudpickle", "keras", "numpy", "xxhash")
"""keras-pickle's own requirements (pyproject.toml's ``dependencies``), named when the package travels
with the model instead of being required from an index."""
_BACKEND_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch", "numpy": "numpy"}


def installed_from_an_index(package_dir: Path = PACKAGE_DIR, path: list[str] | None = None) -> bool:
    """Whether the keras_pickle package at ``package_dir`` was installed from a package index.

    True only for a distribution's files as pip installs a wheel (its ``RECORD`` lists ``package_dir``'s
    ``__init__.py``) with no PEP 610 ``direct_url.json``, which pip writes for an install from a local
    directory, a file, a URL or a VCS, editable or not. A source tree on ``sys.path`` (its ``.egg-info``
    has no ``RECORD``) is not. ``path``: where to look for distributions (default ``sys.path``).
    """
    init = (package_dir / "__init__.py").resolve()
    for dist in importlib.metadata.distributions(name="keras-pickle", path=sys.path if path is None else path):
        record = dist.read_text("RECORD")
        if record is None or dist.read_text("direct_url.json") is not None:
            continue
        for line in record.splitlines():
            listed = line.split(",", 1)[0]
            if listed.endswith("keras_pickle/__init__.py") and Path(dist.locate_file(listed)).resolve() == init:
                return True
    return False


def get_default_pip_requirements() -> list[str]:
    """Keras and the backend's package, pinned to this process's versions, and keras-pickle: pinned where
    :func:`installed_from_an_index`, else its :data:`OWN_DEPENDENCIES` (pinned), the package itself
    travelling with the model (:func:`save_model`)."""
    packages = ["keras", _BACKEND_PACKAGES.get(keras.config.backend(), "numpy")]
    own = [f"keras-pickle=={__version__}"] if installed_from_an_index() else []
    if not own:
        packages += [name for name in OWN_DEPENDENCIES if name not in packages]
    return own + [f"{name}=={importlib.metadata.version(name)}" for name in packages]


def get_default_conda_env() -> dict:
    return _mlflow_conda_env(additional_pip_deps=get_default_pip_requirements())


def save_model(
    model: Any,
    path: str,
    *,
    conda_env: Any = None,
    code_paths: list[str] | None = None,
    mlflow_model: Model | None = None,
    signature: Any = None,
    input_example: Any = None,
    pip_requirements: Any = None,
    extra_pip_requirements: Any = None,
    metadata: dict | None = None,
) -> None:
    """Write ``model`` (a Keras object, or a structure safe mode loads) as an MLflow model at ``path``.

    ``path`` must not exist. The payload is ``keras_pickle.dumps(model, checksum=True)``. Where keras_pickle
    was not :func:`installed_from_an_index`, the package is copied into the model's code directory beside
    ``code_paths`` (never imported as the model's own code: see :func:`_shipped_modules`).
    """
    path = os.path.abspath(path)
    if os.path.exists(path):
        raise FileExistsError(f"Cannot save the model: {path} already exists.")
    os.makedirs(path)
    mlflow_model = Model() if mlflow_model is None else mlflow_model
    if signature is not None:
        mlflow_model.signature = signature
    if input_example is not None:
        _save_example(mlflow_model, input_example, path)
    if metadata is not None:
        mlflow_model.metadata = metadata
    travelling = [] if installed_from_an_index() else [str(PACKAGE_DIR)]
    code_dir = _validate_and_copy_code_paths([*(code_paths or []), *travelling] or None, path)
    with open(os.path.join(path, PAYLOAD_FILE), "wb") as file:
        file.write(dumps(model, checksum=True))
    add_to_model(
        mlflow_model,
        loader_module=__name__,
        data=PAYLOAD_FILE,
        code=code_dir,
        conda_env=_CONDA_ENV_FILE_NAME,
        python_env=_PYTHON_ENV_FILE_NAME,
        # Every key a loader may override (mlflow.pyfunc.load_model(uri, model_config={...})): MLflow drops, with a
        # warning, a key the logged model does not declare.
        model_config=dict(DECLARED_MODEL_CONFIG),
    )
    mlflow_model.add_flavor(
        FLAVOR_NAME,
        data=PAYLOAD_FILE,
        code=code_dir,
        modules=_shipped_modules(path, code_dir),
        keras_pickle_version=__version__,
        keras_version=keras.__version__,
        backend=keras.config.backend(),
    )
    mlflow_model.save(os.path.join(path, MLMODEL_FILE_NAME))
    if conda_env is None:
        defaults = get_default_pip_requirements() if pip_requirements is None else None
        conda_env, requirements, _constraints = _process_pip_requirements(
            defaults, pip_requirements, extra_pip_requirements
        )
    else:
        conda_env, requirements, _constraints = _process_conda_env(conda_env)
    with open(os.path.join(path, _CONDA_ENV_FILE_NAME), "w") as file:
        yaml.safe_dump(conda_env, stream=file, default_flow_style=False)
    with open(os.path.join(path, _REQUIREMENTS_FILE_NAME), "w") as file:
        file.write("\n".join(requirements))
    _PythonEnv.current().to_yaml(os.path.join(path, _PYTHON_ENV_FILE_NAME))


def log_model(model: Any, name: str | None = None, *, registered_model_name: str | None = None, **kwargs: Any):
    """Log ``model`` to the active run (:func:`save_model`'s keywords); MLflow's ``ModelInfo``."""
    return Model.log(
        artifact_path=None,
        name=name,
        flavor=sys.modules[__name__],
        registered_model_name=registered_model_name,
        model=model,
        **kwargs,
    )


def load_model(
    model_uri: str,
    dst_path: str | None = None,
    *,
    allow_by_value: bool = False,
    custom_objects: dict[str, Any] | None = None,
    safe_mode: bool = True,
) -> Any:
    """The logged object, read with ``keras_pickle.loads`` in safe mode (``allow_by_value``: see the module;
    ``custom_objects``: functions and classes the caller names, as ``keras_pickle.loads`` takes them;
    ``safe_mode=False``: for a model the caller trusts as much as code it runs, as ``keras_pickle.loads``)."""
    local = _download_artifact_from_uri(artifact_uri=model_uri, output_path=dst_path)
    conf = _get_flavor_configuration(model_path=local, flavor_name=FLAVOR_NAME)
    _add_code_from_conf_to_system_path(local, conf)
    return _read(os.path.join(local, conf["data"]), allow_by_value, custom_objects, safe_mode=safe_mode)


def _shipped_modules(path: str, code_dir: str | None) -> list[str]:
    """The top-level modules and packages ``code_paths`` copied into the model's code directory: the model's
    own code, whose functions loading trusts. keras_pickle itself, logged with the model where no index has
    it, is the loader, not the model's code: never listed."""
    if code_dir is None:
        return []
    found = []
    for entry in sorted(os.listdir(os.path.join(path, code_dir))):
        name, extension = os.path.splitext(entry)
        is_module = extension == ".py" or os.path.isfile(os.path.join(path, code_dir, entry, "__init__.py"))
        if is_module and name and name != _PACKAGE_NAME:
            found.append(name)
    return found


_PACKAGE_NAME = __name__.split(".", 1)[0]


def _read(
    payload_path: str,
    allow_by_value: bool,
    custom_objects: dict[str, Any] | None = None,
    *,
    safe_mode: bool = True,
    mlmodel: Model | None = None,
) -> Any:
    """Import the modules the model ships (its code: safe mode resolves classes of imported modules only),
    then ``keras_pickle.load`` in safe mode.

    Importing the shipped code runs it, so its functions are trusted as much as the caller trusts the
    model's code: they are named as custom objects (safe mode's allow-list otherwise admits only the
    functions Keras vouches for), beside the caller's own ``custom_objects``. ``mlmodel``: the model's MLmodel
    file, where the caller has read it already.
    """
    shipped_functions: dict[str, Any] = {}
    model_dir = os.path.dirname(payload_path)
    mlmodel = mlmodel or Model.load(os.path.join(model_dir, MLMODEL_FILE_NAME))
    conf = mlmodel.flavors.get(FLAVOR_NAME, {})
    code_dir = conf.get("code")
    for name in conf.get("modules") or ():
        if name == _PACKAGE_NAME:
            continue  # the loader itself, whatever the MLmodel file says: its functions are not custom objects
        shipped = code_dir and any(
            os.path.isfile(os.path.join(model_dir, code_dir, *parts))
            for parts in ((f"{name}.py",), (name, "__init__.py"))
        )
        if shipped:  # never a module from elsewhere, whatever the MLmodel file says
            module = importlib.import_module(name)
            shipped_functions.update(
                (key, value)
                for key, value in vars(module).items()
                if isinstance(value, types.FunctionType) and value.__module__ == module.__name__
            )
    try:
        with open(payload_path, "rb") as file:
            return load(
                file,
                safe_mode=safe_mode,
                allow_by_value=allow_by_value,
                custom_objects={**shipped_functions, **(custom_objects or {})},
            )
    except UnsafePayloadError as e:
        raise type(e)(in_mlflow_terms(str(e)), what=e.what) from e


DECLARED_MODEL_CONFIG = {"allow_by_value": False, "custom_objects": None, "safe_mode": True}
"""The ``model_config`` every logged model declares: each key a loader may override, at its safe default.

The MLmodel file is part of what a model's author writes, and MLflow hands its declared values to the loader
as if the caller had passed them. A file declaring anything else asks to loosen its own loading, so it is
refused (:func:`_refuse_loosened_declaration`): only the caller can loosen, by the switches named there."""


def _refuse_loosened_declaration(mlmodel: Model, model_dir: str) -> None:
    """Raise :class:`UnsafePayloadError` when ``mlmodel`` (the MLmodel file in ``model_dir``) declares a
    ``model_config`` that differs from :data:`DECLARED_MODEL_CONFIG` (a value keras_pickle never writes)."""
    pyfunc_conf = mlmodel.flavors.get("python_function", {})
    declared = pyfunc_conf.get("config") or {}
    loosened = {key: value for key, value in declared.items() if DECLARED_MODEL_CONFIG.get(key) != value}
    if loosened:
        raise UnsafePayloadError(
            f"The MLmodel file in {model_dir!r} declares model_config {loosened!r}, which this flavor never "
            f"writes (it declares {DECLARED_MODEL_CONFIG!r}): the file asks to loosen its own loading, and "
            "MLflow would pass that on as if you had asked for it. Only you can loosen safe mode. If you trust "
            "this model as much as code you run, load it with keras_pickle.integrations.mlflow.load_model("
            "model_uri, ...) and the switch you mean (safe_mode=False, allow_by_value=True or custom_objects="
            "{...}), which ignores the file's declaration.",
            what="model_config",
        )


MLFLOW_SWITCHES = (
    (
        "keras_pickle.loads(data, allow_by_value=True)",
        'mlflow.pyfunc.load_model(model_uri, model_config={"allow_by_value": True}) (or '
        "keras_pickle.integrations.mlflow.load_model(model_uri, allow_by_value=True))",
    ),
    (
        "keras_pickle.loads(data, safe_mode=False)",
        'mlflow.pyfunc.load_model(model_uri, model_config={"safe_mode": False}) (or '
        "keras_pickle.integrations.mlflow.load_model(model_uri, safe_mode=False))",
    ),
    (
        "keras_pickle.loads(data, custom_objects=",
        'mlflow.pyfunc.load_model(model_uri, model_config={"custom_objects": {...}}) with the same mapping, or '
        "keras_pickle.integrations.mlflow.load_model(model_uri, custom_objects=",
    ),
)
"""How a safe-mode refusal's advice is spelt through MLflow: the flavor's switches, not ``keras_pickle.loads``'s."""


def in_mlflow_terms(message: str) -> str:
    """``message`` (a safe-mode refusal) with each switch it names spelt as MLflow takes it: the advice names
    ``keras_pickle.loads(data, ...)``, or the same call as ``keras_pickle.load(file, ...)`` / ``(path, ...)``."""
    for direct, through_mlflow in MLFLOW_SWITCHES:
        for spelling in ("keras_pickle.loads(data", "keras_pickle.load(file", "keras_pickle.load(path"):
            message = message.replace(direct.replace("keras_pickle.loads(data", spelling), through_mlflow)
    return message


class _PyFuncModel:
    """What ``mlflow.pyfunc.load_model`` wraps: ``predict`` of the loaded object, as numpy."""

    def __init__(self, model: Any):
        self.model = model

    def get_raw_model(self) -> Any:
        return self.model

    def predict(self, data: Any, params: dict | None = None) -> Any:
        inputs = data.to_numpy() if hasattr(data, "to_numpy") else data
        if isinstance(self.model, keras.Model):
            return self.model.predict(inputs, verbose=0)
        return np.asarray(self.model.predict(inputs))


def _load_pyfunc(data_path: str, model_config: dict | None = None) -> _PyFuncModel:
    """MLflow's pyfunc entry point (``loader_module``): ``model_config={"allow_by_value": True}`` opts in;
    ``model_config={"custom_objects": {...}}`` names functions safe mode may load; ``model_config={"safe_mode":
    False}`` loads a model the caller trusts as much as code it runs."""
    model_dir = os.path.dirname(data_path)
    mlmodel = Model.load(os.path.join(model_dir, MLMODEL_FILE_NAME))
    _refuse_loosened_declaration(mlmodel, model_dir)
    config = model_config or {}
    allow_by_value = bool(config.get("allow_by_value", False))
    safe_mode = config.get("safe_mode", True) is not False
    custom_objects = config.get("custom_objects")
    return _PyFuncModel(_read(data_path, allow_by_value, custom_objects, safe_mode=safe_mode, mlmodel=mlmodel))
