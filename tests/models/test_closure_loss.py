"""A closure loss of the main script loads in any process (issue 35, section 5, third bullet).

keras.io's siamese example compiles with ``loss(margin=1)``, a function that returns the closure
``contrastive_loss``. No other process can name a function defined inside a function, so a payload
that referred to it by name pickled and then failed on arrival. It travels by value, as the main
script's top-level classes and functions do: plain ``pickle`` loads it anywhere, safe mode refuses it
unless ``allow_by_value=True``, and the copy trains as the original does.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import REPO_DIR, run_python, run_script

pytestmark = pytest.mark.backends  # the next step is the backend's

WRITER = """
import sys
import keras, numpy as np, pickle
import keras_pickle
keras_pickle.install()


def loss(margin=1):
    def contrastive_loss(y_true, y_pred):
        square_pred = keras.ops.square(y_pred)
        margin_square = keras.ops.square(keras.ops.maximum(margin - y_pred, 0))
        return keras.ops.mean((1 - y_true) * square_pred + y_true * margin_square)

    return contrastive_loss


keras.utils.set_random_seed(0)
inputs = keras.Input((4,))
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(4)(inputs)))
model.compile(optimizer="adam", loss=loss(margin=2))
rng = np.random.default_rng(0)
x, y = rng.normal(size=(16, 4)).astype("float32"), rng.integers(0, 2, (16, 1)).astype("float32")
model.fit(x, y, epochs=1, verbose=0)
out = sys.argv[1]
open(out + "/model.pkl", "wb").write(pickle.dumps(model))
model.train_on_batch(x[:8], y[:8])
variables = model.variables + model.optimizer.variables
np.savez(out + "/after.npz", *[keras.ops.convert_to_numpy(v.value) for v in variables])
"""

READER = """
import sys
import keras, numpy as np, pickle
import keras_pickle

out = sys.argv[1]
data = open(out + "/model.pkl", "rb").read()
try:
    keras_pickle.loads(data)
except keras_pickle.UnsafePayloadError as e:
    print("REFUSED", e)
for model in (pickle.loads(data), keras_pickle.loads(data, allow_by_value=True)):
    assert model.loss.__qualname__ == "loss.<locals>.contrastive_loss", model.loss
    assert model.loss.__closure__[0].cell_contents == 2
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 4)).astype("float32"), rng.integers(0, 2, (16, 1)).astype("float32")
    model.train_on_batch(x[:8], y[:8])
    with np.load(out + "/after.npz") as after:
        expected = [after[f"arr_{i}"] for i in range(len(after.files))]
    got = [keras.ops.convert_to_numpy(v.value) for v in model.variables + model.optimizer.variables]
    print("SAME" if len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected)) else "DIFF")
"""


def test_a_closure_loss_of_the_main_script_travels_by_value_and_trains_identically(tmp_path):
    writer = tmp_path / "siamese.py"
    writer.write_text(WRITER)
    run_script(writer, str(tmp_path), cwd=tmp_path, keras_imported=True)
    output = run_python(READER, str(tmp_path), cwd=tmp_path, env={"PYTHONPATH": str(REPO_DIR)}, keras_imported=True)
    lines = output.splitlines()
    refused = [line for line in lines if line.startswith("REFUSED")]
    assert refused and "loss.<locals>.contrastive_loss" in refused[0] and "allow_by_value=True" in refused[0]
    assert [line for line in lines if line in ("SAME", "DIFF")] == ["SAME", "SAME"]
    assert np.load(tmp_path / "after.npz").files  # the writer's next step was recorded
