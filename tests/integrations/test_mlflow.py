"""MLflow: a Keras model logged as a keras_pickle payload, served by ``mlflow.pyfunc`` in a fresh process.

The logged model holds no pickled code (its pyfunc loader is ``keras_pickle.integrations.mlflow``),
the fresh process reads it in safe mode and predicts bit-identically; its custom layer's module
travels with ``code_paths`` and nowhere else; a class carried by value loads only when the loader
opts in.
"""

from __future__ import annotations

import json
import sys

import keras
import numpy as np
import pytest
import yaml
from helpers import engine, run_python

import keras_pickle

mlflow = engine("mlflow")
keras_pickle_mlflow = engine("keras_pickle.integrations.mlflow")

LAYERS_MODULE = """
import keras


def half_relu(x):
    return keras.ops.relu(x) * 0.5


class MlflowGate(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="random_normal", name="w")

    def call(self, x):
        return x * keras.ops.sigmoid(self.w)
"""

SERVE = """
import json, sys
import mlflow, numpy as np
x = np.load(sys.argv[1])
found = {"gate_importable": __import__("importlib").util.find_spec("mlflow_case_layers") is not None}
for name, uri in json.loads(sys.argv[2]).items():
    try:
        found[name] = mlflow.pyfunc.load_model(uri).predict(x).tobytes().hex()
    except Exception as e:
        found[name] = type(e).__name__ + ": " + str(e)
found["by_value_allowed"] = mlflow.pyfunc.load_model(
    json.loads(sys.argv[2])["by_value"], model_config={"allow_by_value": True}).predict(x).tobytes().hex()
print(json.dumps(found))
"""


@pytest.fixture
def layers_module(tmp_path, monkeypatch):
    source = tmp_path / "src" / "mlflow_case_layers.py"
    source.parent.mkdir()
    source.write_text(LAYERS_MODULE)
    monkeypatch.syspath_prepend(str(source.parent))
    import mlflow_case_layers

    yield source, mlflow_case_layers
    sys.modules.pop("mlflow_case_layers", None)


def trained(gate_class) -> tuple[keras.Model, np.ndarray]:
    """Scaler and network in one Keras model: an adapted Normalization, the custom layer, Dense; one epoch."""
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(32, 4)).astype("float32")
    scaler = keras.layers.Normalization()
    scaler.adapt(x)
    model = keras.Sequential([keras.Input((4,)), scaler, gate_class(), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, x.sum(axis=1), epochs=1, batch_size=8, verbose=0)
    return model, x


def test_a_logged_model_serves_bit_identically_in_a_fresh_process_through_safe_mode(
    tmp_path, layers_module, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # MLflow writes artifacts under ./mlruns: never into the tree
    source, layers = layers_module
    model, x = trained(layers.MlflowGate)
    # A class of the main script (here made one), carried by value: refused unless the loader opts in.
    carried = type("CarriedGate", (layers.MlflowGate,), {"__module__": "__main__"})
    monkeypatch.setattr(sys.modules["__main__"], "CarriedGate", carried, raising=False)
    by_value_model, _ = trained(carried)

    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)  # the serving process finds the run there too
    mlflow.set_tracking_uri(tracking)
    with mlflow.start_run():
        by_reference = keras_pickle_mlflow.log_model(model, name="model", code_paths=[str(source)])
        by_value = keras_pickle_mlflow.log_model(by_value_model, name="carried")
    np.save(tmp_path / "x.npy", x)
    uris = {"by_reference": by_reference.model_uri, "by_value": by_value.model_uri}
    served = json.loads(
        run_python(SERVE, str(tmp_path / "x.npy"), json.dumps(uris), cwd=tmp_path, keras_imported=True).splitlines()[-1]
    )

    assert not served["gate_importable"]  # the layer's module reached the fresh process through code_paths only
    assert served["by_reference"] == model.predict(x, verbose=0).tobytes().hex()
    assert served["by_value"].startswith("UnsafePayloadError")
    # The refusal names MLflow's own switch (followed just above: by_value_allowed), not keras_pickle.loads's.
    assert 'model_config={"allow_by_value": True}' in served["by_value"], served["by_value"]
    assert "keras_pickle.loads(data, allow_by_value=True)" not in served["by_value"]
    assert served["by_value_allowed"] == by_value_model.predict(x, verbose=0).tobytes().hex()


def test_the_logged_model_declares_keras_pickle_and_holds_no_pickled_code(tmp_path, layers_module):
    source, layers = layers_module
    model, x = trained(layers.MlflowGate)
    path = tmp_path / "saved"
    keras_pickle_mlflow.save_model(model, str(path), code_paths=[str(source)])
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert "model.keras_pickle" in files and not [f for f in files if f.endswith((".pkl", ".pickle", ".cloudpickle"))]
    mlmodel = yaml.safe_load((path / "MLmodel").read_text())
    assert mlmodel["flavors"]["python_function"]["loader_module"] == "keras_pickle.integrations.mlflow"
    assert mlmodel["flavors"]["keras_pickle"]["keras_pickle_version"] == keras_pickle.__version__
    requirements = (path / "requirements.txt").read_text().splitlines()
    # keras-pickle pinned where it came from an index, else logged with the model (test_mlflow_requirements.py)
    pinned = f"keras-pickle=={keras_pickle.__version__}" in requirements
    assert pinned is keras_pickle_mlflow.installed_from_an_index() is not (path / "code" / "keras_pickle").is_dir()
    assert f"keras=={keras.__version__}" in requirements
    restored = keras_pickle_mlflow.load_model(str(path))
    assert type(restored.layers[1]) is layers.MlflowGate
    for original, loaded in zip(
        model.variables + model.optimizer.variables, restored.variables + restored.optimizer.variables
    ):
        assert np.array_equal(keras.ops.convert_to_numpy(original), keras.ops.convert_to_numpy(loaded)), original.path
    assert np.array_equal(restored.predict(x, verbose=0), model.predict(x, verbose=0))


def test_functions_of_the_shipped_code_load_and_others_are_named_in_mlflow_terms(tmp_path, layers_module):
    """Safe mode loads a plain function only if Keras vouches for it or the caller names it: the flavor names
    the functions of the code it ships (importing that code already trusts it); any other function is refused
    with the flavor's own switch."""
    source, layers = layers_module
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation=layers.half_relu)])
    x = np.ones((3, 4), "float32")
    shipped, unshipped = tmp_path / "shipped", tmp_path / "unshipped"
    keras_pickle_mlflow.save_model(model, str(shipped), code_paths=[str(source)])
    restored = keras_pickle_mlflow.load_model(str(shipped))
    assert restored.layers[0].activation is layers.half_relu
    assert np.array_equal(restored.predict(x, verbose=0), model.predict(x, verbose=0))
    keras_pickle_mlflow.save_model(model, str(unshipped))
    with pytest.raises(keras_pickle.UnsafePayloadError) as info:
        keras_pickle_mlflow.load_model(str(unshipped))
    assert 'model_config={"custom_objects"' in str(info.value)
    assert "keras_pickle.integrations.mlflow.load_model(model_uri, custom_objects={'half_relu'" in str(info.value)
    named = keras_pickle_mlflow.load_model(str(unshipped), custom_objects={"half_relu": layers.half_relu})
    assert np.array_equal(named.predict(x, verbose=0), model.predict(x, verbose=0))


def test_a_refused_lambda_names_the_flavors_safe_mode_switch_and_following_it_loads(tmp_path):
    """Through MLflow the advice to load without safe mode names the flavor's switch, and that switch works,
    through pyfunc (``model_config``) and through the flavor's ``load_model``."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), keras.layers.Lambda(lambda t: t * 2.0)])
    x = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    keras_pickle_mlflow.save_model(model, str(tmp_path / "m"))
    with pytest.raises(keras_pickle.LambdaLayerError) as info:
        mlflow.pyfunc.load_model(str(tmp_path / "m"))
    assert 'model_config={"safe_mode": False}' in str(info.value)
    assert "keras_pickle.loads(data, safe_mode=False)" not in str(info.value)
    served = mlflow.pyfunc.load_model(str(tmp_path / "m"), model_config={"safe_mode": False})
    assert np.array_equal(served.predict(x), model.predict(x, verbose=0))
    direct = keras_pickle_mlflow.load_model(str(tmp_path / "m"), safe_mode=False)
    assert np.array_equal(direct.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize(
    "declared", [{"safe_mode": False}, {"allow_by_value": True}, {"custom_objects": {"relu": "os.system"}}]
)
def test_an_mlmodel_file_cannot_loosen_its_own_loading_and_the_advice_loads_it(tmp_path, declared):
    """MLflow passes the ``model_config`` an MLmodel file declares to the loader as if the caller had: a file
    that declares a loosened value (which the flavor never writes) is refused before anything is read, and the
    refusal's advice (the flavor's ``load_model`` with the switch) loads the model."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2), keras.layers.Lambda(lambda t: t * 2.0)])
    x = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    keras_pickle_mlflow.save_model(model, str(tmp_path / "m"))
    mlmodel = tmp_path / "m" / "MLmodel"
    written = yaml.safe_load(mlmodel.read_text())
    assert written["flavors"]["python_function"]["config"] == keras_pickle_mlflow.DECLARED_MODEL_CONFIG
    written["flavors"]["python_function"]["config"].update(declared)
    mlmodel.write_text(yaml.safe_dump(written))
    with pytest.raises(keras_pickle.UnsafePayloadError) as info:
        mlflow.pyfunc.load_model(str(tmp_path / "m"))
    assert "asks to loosen its own loading" in str(info.value)
    assert repr(declared)[1:-1] in str(info.value)
    assert "keras_pickle.integrations.mlflow.load_model(model_uri" in str(info.value)
    # The caller asking for the same thing through pyfunc does not make the file's declaration acceptable.
    with pytest.raises(keras_pickle.UnsafePayloadError):
        mlflow.pyfunc.load_model(str(tmp_path / "m"), model_config={"safe_mode": False})
    direct = keras_pickle_mlflow.load_model(str(tmp_path / "m"), safe_mode=False)
    assert np.array_equal(direct.predict(x, verbose=0), model.predict(x, verbose=0))
