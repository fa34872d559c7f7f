"""The second sweep of real models (tests/sweep_models.py), on every backend: each model pickled here
and loaded in one fresh interpreter (joblib for the scikit-learn Pipeline), and deep-copied here;
every variable, the predictions and one more training step compared bit for bit with the original.

On PyTorch, Keras draws an unseeded dropout's masks from torch's global generator, which belongs to
the process, not the model (and a model's first ``fit`` in a process draws from it more than later
ones do, so even seeding both processes alike does not line the steps up): those models' next steps
differ whatever pickles them, and the test says exactly which. A seeded Dropout's state travels and
its step matches on every backend.

On JAX the keras.io Transformer, ViT, the bidirectional GRU and the two-output model take about a
minute to compile here: ``benchmarks/model_zoo.py`` runs them on JAX; this file runs the rest there.
Keras 3.15's JAX trainer fails a second ``fit`` with ``use_ema=True`` (with or without keras_pickle),
so there the EMA model's original cannot take the step its copies take: state and predictions are
compared, and the test checks that the original's step still fails that way.

The fresh interpreter never installs keras_pickle and holds nothing this process built: the
layers whose constructors take no ``**kwargs`` (keras.io's ``PatchEncoder``, ``TransformerBlock``)
come back from the constructor arguments recorded while keras_pickle was installed.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import pickle
from pathlib import Path

import joblib
import keras
import numpy as np
import pytest
import sweep_models
from helpers import REPO_DIR, TESTS_DIR, run_python

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend

HERE = Path(__file__).resolve().parent
"""This folder: the fresh interpreter imports this module by name."""

# Traced steps cost seconds per model on TensorFlow, eager ones on JAX. The fresh interpreter reads
# run_eagerly from each model's compile config.
sweep_models.RUN_EAGERLY = keras.backend.backend() != "jax"
SLOW_ON_JAX = ("keras.io text Transformer", "keras.io ViT", "BiGRU with dropout", "dict inputs, two outputs")
EMA = "AdamW, EMA, gradient accumulation"


def digests(values) -> list[str]:
    out = []
    for value in values:
        array = np.ascontiguousarray(keras.ops.convert_to_numpy(getattr(value, "value", value)))
        out.append(hashlib.sha256(f"{array.dtype}{array.shape}".encode() + array.tobytes()).hexdigest()[:16])
    return out


def observe(case: sweep_models.SweepCase, obj, x, y) -> dict:
    """Every variable, the predictions, one more step, every variable again: what a copy must repeat.

    A step that fails is recorded as its error, which the copy must repeat too: on JAX, Keras 3.15's
    trainer fails a second ``fit`` with ``use_ema=True`` (with or without keras_pickle).
    """
    before = digests(sweep_models.variables_of(obj, case.models))
    predictions = digests(keras.tree.flatten(case.predict(obj, x)))
    try:
        case.step(obj, x, y)
    except Exception as e:
        return {"before": before, "pred": predictions, "after": [f"{type(e).__name__}: {e}"[:200]]}
    return {"before": before, "pred": predictions, "after": digests(sweep_models.variables_of(obj, case.models))}


CHILD = """
    import io, json, pickle, sys

    import joblib
    import keras

    import sweep_models
    import test_sweep

    directory = sys.argv[1]
    with open(f"{directory}/names.json") as f:
        names = json.load(f)
    seen = {}
    for i, name in enumerate(names):
        case = sweep_models.CASES[name]
        with open(f"{directory}/{i}.pkl", "rb") as f:
            data = f.read()
        obj, x, y = joblib.load(io.BytesIO(data)) if case.joblib else pickle.loads(data)
        seen[name] = test_sweep.observe(case, obj, x, y)
    print(json.dumps(seen))
"""


def compare(name: str, expected: dict, got: dict) -> list[str]:
    problems = []
    steps = not (keras.backend.backend() == "jax" and name.startswith(EMA))
    for what in ("before", "pred", "after")[: 3 if steps else 2]:
        a, b = expected[what], got[what]
        if len(a) != len(b):
            problems.append(f"{name}: {what}: {len(b)} values, expected {len(a)}")
        elif a != b:
            problems.append(f"{name}: {what}: {sum(p != q for p, q in zip(a, b))} of {len(a)} differ")
    return problems


def test_the_second_sweep_round_trips_through_a_fresh_process_and_deepcopy(tmp_path):
    names = [n for n in sweep_models.CASES if keras.backend.backend() != "jax" or n not in SLOW_ON_JAX]
    expected, problems = {}, []
    for i, name in enumerate(names):
        case = sweep_models.CASES[name]
        keras.utils.set_random_seed(0)
        obj, x, y = case.make()
        if case.joblib:
            buffer = io.BytesIO()
            joblib.dump((obj, x, y), buffer)
            data = buffer.getvalue()
        else:
            data = pickle.dumps((obj, x, y), protocol=5)
        (tmp_path / f"{i}.pkl").write_bytes(data)
        twin = copy.deepcopy(obj)
        expected[name] = observe(case, obj, x, y)
        problems += compare(f"{name} (deepcopy)", expected[name], observe(case, twin, x, y))
    (tmp_path / "names.json").write_text(json.dumps(names))
    env = {"PYTHONPATH": f"{REPO_DIR}:{TESTS_DIR}:{HERE}"}  # sweep_models, and this module
    seen = json.loads(
        run_python(CHILD, str(tmp_path), cwd=TESTS_DIR, env=env, timeout=600, keras_imported=True)
        .strip()
        .splitlines()[-1]
    )
    for name in names:
        problems += compare(f"{name} (fresh process)", expected[name], seen[name])
    unseeded = [
        f"{n} ({how}): after" for n in sweep_models.TORCH_GLOBAL_GENERATOR for how in ("deepcopy", "fresh process")
    ]
    diverged = [p.rsplit(":", 1)[0] for p in problems if p.split(": ")[1] == "after"]
    if keras.backend.backend() == "torch":
        assert sorted(diverged) == sorted(unseeded), "\n".join(problems)
        problems = [p for p in problems if p.rsplit(":", 1)[0] not in unseeded]
    assert not problems, "\n".join(problems)
    failed_steps = {name: seen["after"][0] for name, seen in expected.items() if len(seen["after"]) == 1}
    if keras.backend.backend() == "jax":
        assert list(failed_steps) == [EMA] and failed_steps[EMA].startswith("TypeError"), failed_steps
    else:
        assert not failed_steps, failed_steps
