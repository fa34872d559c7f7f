"""Write the stored payloads of tests/data: one set per released format version.

    python tests/data/make_payloads.py          # from the repository root

Each ``NAME.pkl`` is a keras_pickle payload as ``keras_pickle.dumps`` wrote it
(format version ``keras_pickle.FORMAT_VERSION`` at the time), and ``NAME.npz``
what loading it must give back: ``x`` (inputs), ``y`` (the outputs on ``x``)
and ``var_000``, ``var_001``... (every variable, optimizer state included, in
order). ``tests/format/test_stored_payloads.py`` loads every one of them.

Never regenerate the files of an earlier format version: they are what users'
old pickles look like. When the format changes, bump the prefix (``v2_...``)
and add the new set beside the old one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for zoo

import keras  # noqa: E402
import numpy as np  # noqa: E402
import zoo  # noqa: E402

import keras_pickle  # noqa: E402


def sequential() -> keras.Model:
    """A Sequential with a custom layer (zoo.Scale) and activation, trained with Adam."""
    return zoo.trained(zoo.sequential)


RECORDED_SCALE = np.array([1.5, -0.5], "float32")
"""The array the recorded payloads' ``zoo.Wrapper`` was constructed with (a constructor argument, no variable)."""


def recorded_architecture() -> keras.Model:
    """The untrained architecture of :func:`recorded`."""
    encoder = keras.Sequential([keras.Input((zoo.FEATURES,)), keras.layers.Dense(2), keras.layers.Dropout(0.1)])
    return zoo.Wrapper(encoder, RECORDED_SCALE.copy())


def functional() -> keras.Model:
    """A Functional with a nested Sequential, a registered layer and a custom block."""
    return zoo.trained(zoo.functional)


def layer() -> keras.layers.Layer:
    """A standalone custom layer, built."""
    keras.utils.set_random_seed(2)
    scale = _layer_architecture()
    scale.build((None, zoo.FEATURES))
    return scale


def mixed_float16() -> keras.Model:
    """A Sequential built and trained under the global policy mixed_float16 (a LossScaleOptimizer)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        return zoo.trained(zoo.sequential)
    finally:
        keras.config.set_dtype_policy(previous)


def recorded() -> keras.Model:
    """A subclassed model without get_config taking a model and an array (recorded arguments), trained."""
    keras.utils.set_random_seed(3)
    model = recorded_architecture()
    model.compile(optimizer="adam", loss="mse")
    x, y = zoo.data()
    model.fit(x, np.repeat(y, 2, axis=1), epochs=1, batch_size=8, verbose=0)
    return model


# Format versions with a stored set, and what each set holds:
# name without its "v<version>_" prefix -> (builder, dumps keyword arguments).
SETS = {
    1: {
        "sequential": (sequential, {}),
        "sequential_checksum": (sequential, {"checksum": True}),
        "sequential_protocol2": (sequential, {"protocol": 2}),
        "functional": (functional, {}),
        "functional_checksum": (functional, {"checksum": True}),
        "layer": (layer, {}),
        "layer_checksum": (layer, {"checksum": True}),
    },
    2: {
        "sequential_checksum": (sequential, {"checksum": True}),
        "functional": (functional, {}),
        "functional_checksum": (functional, {"checksum": True}),
        "layer_checksum": (layer, {"checksum": True}),
        "mixed_float16_checksum": (mixed_float16, {"checksum": True}),
    },
    3: {
        "sequential_checksum": (sequential, {"checksum": True}),
        "functional_checksum": (functional, {"checksum": True}),
        "layer_checksum": (layer, {"checksum": True}),
        "recorded_checksum": (recorded, {"checksum": True}),
    },
    4: {
        "sequential_checksum": (sequential, {"checksum": True}),
        "functional_checksum": (functional, {"checksum": True}),
        "recorded_checksum": (recorded, {"checksum": True}),
    },
}
# tf-keras payloads (format version 4 on), written to tf_keras/: tests/models/test_tf_keras.py loads them, in the
# tf-keras process.
TF_KERAS_SETS = {4: ("tf_keras_functional_checksum", "tf_keras_subclassed_checksum")}
PAYLOADS = {f"v{version}_{name}": spec for version, specs in SETS.items() for name, spec in specs.items()}


def _layer_architecture() -> keras.layers.Layer:
    return zoo.Scale(2.5)


def _mixed_float16_architecture() -> keras.Model:
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        return zoo.sequential()
    finally:
        keras.config.set_dtype_policy(previous)


ARCHITECTURES = {
    "sequential": zoo.sequential,
    "functional": zoo.functional,
    "layer": _layer_architecture,
    "mixed_float16": _mixed_float16_architecture,
    "recorded": recorded_architecture,
}
"""What each stored object is, untrained, by set name without its prefix and options (``v2_sequential_checksum``:
``sequential``): the code the reference of :func:`reference_outputs` is built from, never a stored payload."""


def architecture_of(name: str) -> str:
    """``v1_sequential_protocol2`` -> ``sequential``: the set's entry in :data:`ARCHITECTURES`."""
    stem = name.split("_", 1)[1]
    for key in sorted(ARCHITECTURES, key=len, reverse=True):
        if stem == key or stem.startswith(f"{key}_"):
            return key
    raise KeyError(f"no architecture for stored payload {name!r}")


def reference_outputs(name: str, stored: dict[str, np.ndarray]) -> np.ndarray:
    """The outputs on ``stored["x"]`` of a model built here from its code (:data:`ARCHITECTURES`) and given the
    stored values: what the payload's object computes on this machine, without loading the payload.

    Outputs recorded on another CPU may differ from those in the last bits (TensorFlow's kernels follow the
    instruction set); this reference is computed by the same kernels as the loaded object's. Raises
    ``AssertionError`` where the code no longer builds variables of the stored shapes and dtypes.
    """
    reference = ARCHITECTURES[architecture_of(name)]()
    x = stored["x"]
    reference(x[:1])  # builds every variable (a subclassed model builds on its first call)
    variables = list(reference.variables)
    values = [stored[f"var_{i:03d}"] for i in range(len(variables))]
    for i, (variable, value) in enumerate(zip(variables, values)):
        have = (np.dtype(keras.backend.standardize_dtype(variable.dtype)), tuple(variable.shape))
        assert have == (value.dtype, value.shape), (
            f"{name}: variable #{i} {variable.path} is {have}, stored {value.dtype}{value.shape}"
        )
        variable.assign(value)
    return outputs(reference, x)


def variables_of(obj) -> list[np.ndarray]:
    variables = list(obj.variables)
    optimizer = getattr(obj, "optimizer", None)
    if optimizer is not None:
        variables += list(optimizer.variables)
    return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in variables]


def outputs(obj, x: np.ndarray) -> np.ndarray:
    if isinstance(obj, keras.Model):
        return obj.predict(x, verbose=0)
    return np.asarray(keras.ops.convert_to_numpy(obj(x)))


def main() -> None:
    """Write the set of the current format version (never an earlier one's)."""
    keras_pickle.install()
    x = zoo.data(8, seed=5)[0]
    for name, (builder, options) in SETS[keras_pickle.FORMAT_VERSION].items():
        name = f"v{keras_pickle.FORMAT_VERSION}_{name}"
        obj = builder()
        data = keras_pickle.dumps(obj, **options)
        (HERE / f"{name}.pkl").write_bytes(data)
        arrays = {f"var_{i:03d}": value for i, value in enumerate(variables_of(obj))}
        np.savez_compressed(HERE / f"{name}.npz", x=x, y=outputs(obj, x), **arrays)
        print(f"{name}: {len(data)} bytes, {len(arrays)} variables")
    write_tf_keras_set(x)


def write_tf_keras_set(x: np.ndarray) -> None:
    """The tf-keras payloads of the current format version: tests/tf_keras_models.py's models, trained;
    ``var_###`` holds every value ``tf_keras_models.all_values`` reads (random-generator states included)."""
    import tf_keras_models as tm

    x = tm.data(8)[0]
    for name in TF_KERAS_SETS.get(keras_pickle.FORMAT_VERSION, ()):
        model = tm.trained("functional" if "functional" in name else "subclassed")
        data = keras_pickle.dumps(model, checksum=True)
        name = f"v{keras_pickle.FORMAT_VERSION}_{name}"
        (HERE / "tf_keras" / f"{name}.pkl").write_bytes(data)
        arrays = {f"var_{i:03d}": value for i, value in enumerate(tm.all_values(model))}
        np.savez_compressed(HERE / "tf_keras" / f"{name}.npz", x=x, y=model.predict(x, verbose=0), **arrays)
        print(f"{name}: {len(data)} bytes, {len(arrays)} values")


if __name__ == "__main__":
    main()
