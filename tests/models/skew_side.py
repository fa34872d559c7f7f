"""One side of a version-skew check: write payloads with this Keras, read another Keras's.

Run by tests/models/test_version_skew.py in a fresh interpreter whose ``PYTHONPATH`` picks the Keras
under test::

    python tests/models/skew_side.py [--read DIR]... [--write DIR]

``--write DIR`` builds every model of ``skew_models`` this Keras can build, and writes for each
``NAME.pkl`` (``keras_pickle.dumps``; the model with a class defined here, in ``__main__``, goes
through ``cloudpickle.dumps`` and travels by value), ``NAME.npz`` (every variable, the outputs,
and, for the trained models, every variable after one more epoch, where this Keras can train) and
``manifest.json`` (versions, models). ``--read DIR`` (repeatable; before writing) loads every
payload of another side's directory, compares it with what that side recorded, and prints one
JSON line mapping each directory to its report: per model, the outcome (``loaded``, or the
error's type, family and message) and each comparison made.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from pathlib import Path

import cloudpickle
import jax
import keras
import numpy as np
import skew_models
from keras import layers, ops

import keras_pickle


class MainScale(layers.Layer):
    """``skew_models.Scale``, defined in ``__main__``: cloudpickle ships it by value."""

    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")

    def call(self, x):
        return ops.multiply(x, self.w) * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def main_by_value(train):
    """functional_bn_custom with its custom layer defined in ``__main__``."""
    return skew_models.functional_bn_custom(train, scale_class=MainScale)


if hasattr(layers, "AdaptiveAveragePooling1D"):  # new in Keras 3.15

    class MainPool(layers.AdaptiveAveragePooling1D):
        """A class of ``__main__`` whose Keras base class an older Keras lacks: carried by value, its base by
        reference to a module the older Keras does not have."""


def main_newer_base(train):
    """MainPool in a Functional; a ValueError (not built) where this Keras lacks its base class."""
    if "MainPool" not in globals():
        raise ValueError("this Keras has no keras.layers.AdaptiveAveragePooling1D")
    inputs = keras.Input((8, 3))
    model = keras.Model(inputs, layers.Dense(2)(MainPool(4)(inputs)), name="main_newer_base")
    return model, skew_models.SEQ8, None


BY_VALUE = {"main_by_value": main_by_value, "main_newer_base": main_newer_base}
"""Models with a class of ``__main__``: written with ``cloudpickle.dumps`` and read with
``safe_mode=False``; ``main_newer_base`` also written with ``keras_pickle.dumps`` and read with
plain ``pickle.loads`` too (the ``_pickle`` outcomes of its report)."""
TRAINED = skew_models.TRAINED | {"main_by_value"}


def can_train() -> str | None:
    """None when this Keras can run ``fit`` on this backend, else why not (Keras 3.8 on a recent JAX)."""
    model = keras.Sequential([keras.Input((2,)), layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    try:
        model.fit(np.zeros((2, 2)), np.zeros((2, 1)), verbose=0)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def values(obj) -> list[np.ndarray]:
    """Every variable's value, optimizer slots included, in the object's order; less the optimizer slots
    of variables Keras overwrites with their gradient (:func:`unread_slots`)."""
    variables = list(obj.variables)
    if getattr(obj, "optimizer", None) is not None:
        unread = {id(v) for v in unread_slots(obj)}
        variables += [v for v in obj.optimizer.variables if id(v) not in unread]
    return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in variables]


def unread_slots(obj) -> list:
    """The optimizer's slots of float8 scales and amax histories (``overwrite_with_gradient``): Keras 3.8
    makes them and never reads or updates them, later Keras makes none."""
    overwritten = [v for v in obj.variables if getattr(v, "overwrite_with_gradient", False)]
    prefixes = tuple(v.path.replace("/", "_") + "_" for v in overwritten)
    return [v for v in obj.optimizer.variables if prefixes and v.name.startswith(prefixes)]


def outputs(obj, x) -> np.ndarray:
    """The object called on ``x`` (eagerly: no function is traced)."""
    return np.asarray(keras.ops.convert_to_numpy(obj(x)))


def write(directory: Path, train_error: str | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    train = train_error is None
    written = {}
    for name, builder in {**skew_models.MODELS, **BY_VALUE}.items():
        try:
            obj, x, y = builder(train)
        except (TypeError, ValueError) as e:  # a feature this Keras lacks (gated_attention before 3.11)
            written[name] = f"not built: {type(e).__name__}: {e}"
            continue
        data = cloudpickle.dumps(obj) if name in BY_VALUE else keras_pickle.dumps(obj)
        (directory / f"{name}.pkl").write_bytes(data)
        if name == "main_newer_base":
            (directory / f"{name}.plain.pkl").write_bytes(keras_pickle.dumps(obj))
        arrays = {f"v{i}": value for i, value in enumerate(values(obj))}
        arrays["outputs"] = outputs(obj, x)
        if hasattr(obj, "get_vocabulary"):
            arrays["vocabulary"] = np.array(obj.get_vocabulary())
        if train and name in TRAINED:
            obj.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
            arrays.update({f"t{i}": value for i, value in enumerate(values(obj))})
        np.savez(directory / f"{name}.npz", **arrays)
        written[name] = "written"
    manifest = {"keras": keras.__version__, "jax": jax.__version__, "numpy": np.__version__, "models": written}
    manifest["train"] = train_error or "yes"
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))


def read(directory: Path, train_error: str | None) -> dict:
    manifest = json.loads((directory / "manifest.json").read_text())
    report = {"writer": manifest, "reader": {"keras": keras.__version__, "jax": jax.__version__}, "models": {}}
    report["reader"]["train"] = train_error or "yes"
    for name, status in manifest["models"].items():
        if status != "written":
            report["models"][name] = {"outcome": "not written", "detail": status}
            continue
        report["models"][name] = _read_one(name, directory, train_error is None)
    return report


def _outcome(load, data: bytes) -> dict:
    """How ``load(data)`` failed (error type, whether keras_pickle's, message), or ``{"outcome": "loaded"}``."""
    try:
        load(data)
    except Exception as e:
        return {"outcome": type(e).__name__, "keras_pickle_error": isinstance(e, keras_pickle.KerasPickleError),
                "message": str(e)}  # fmt: skip
    return {"outcome": "loaded"}


def _read_one(name: str, directory: Path, train: bool) -> dict:
    data = (directory / f"{name}.pkl").read_bytes()
    if name == "main_newer_base":  # every way in, both writers: pickle and keras_pickle, cloudpickle and plain
        plain = (directory / f"{name}.plain.pkl").read_bytes()
        ways = {"pickle": pickle.loads, "keras_pickle": lambda d: keras_pickle.loads(d, safe_mode=False)}
        return {
            f"{writer}_{reader}": _outcome(load, payload)
            for writer, payload in (("cloudpickle", data), ("plain", plain))
            for reader, load in ways.items()
        }
    expected = np.load(directory / f"{name}.npz")
    builder = {**skew_models.MODELS, **BY_VALUE}[name]
    _obj, x, y = _inputs_of(builder)
    try:
        obj = keras_pickle.loads(data, safe_mode=name not in BY_VALUE)
    except Exception as e:
        return {
            "outcome": type(e).__name__,
            "keras_pickle_error": isinstance(e, keras_pickle.KerasUnpicklingError),
            "message": str(e),
        }
    result = {"outcome": "loaded"}
    saved = [expected[f"v{i}"] for i in range(sum(key.startswith("v") and key[1:].isdigit() for key in expected))]
    got = values(obj)
    result["variables"] = len(saved) == len(got) and all(
        a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(saved, got)
    )
    result["n_variables"] = [len(saved), len(got)]
    result["outputs"] = bool(np.array_equal(outputs(obj, x), expected["outputs"]))
    if getattr(obj, "optimizer", None) is not None:  # what no side reads: as a fresh optimizer has it
        result["unread_slots_zero"] = all(not np.any(keras.ops.convert_to_numpy(v.value)) for v in unread_slots(obj))
    if "vocabulary" in expected:
        result["vocabulary"] = [str(w) for w in obj.get_vocabulary()] == [str(w) for w in expected["vocabulary"]]
    if "t0" in expected and train:
        obj.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
        trained = values(obj)
        result["trains_identically"] = all(
            a.tobytes() == expected[f"t{i}"].tobytes() for i, a in enumerate(trained)
        ) and len(trained) == sum(key.startswith("t") for key in expected)
    return result


def _inputs_of(builder):
    """The inputs (and targets) the builder uses, without building a model."""
    data = {
        "convolution_recurrent": skew_models.SEQ,
        "attention": skew_models.SEQ,
        "gated_attention": skew_models.SEQ,
        "embedding_einsum": skew_models.TOKENS,
        "resizing": skew_models.IMAGES,
        "text_vectorization": skew_models.CORPUS,
        "string_lookup": skew_models.WORDS,
        "integer_lookup": skew_models.TOKENS,
    }
    name = builder.__name__
    y = skew_models.CLASSES if name == "classifier_metrics" else skew_models.Y1
    return None, data.get(name, skew_models.X8), y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read", type=Path, action="append", default=[])
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    assert keras.backend.backend() == "jax", keras.backend.backend()
    train_error = can_train()
    reports = {str(directory): read(directory, train_error) for directory in args.read}
    if args.write:
        write(args.write, train_error)
    print(json.dumps(reports))


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main())
