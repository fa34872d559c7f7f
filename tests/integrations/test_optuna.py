"""Optuna: a study run with ``n_jobs=2`` whose trials store their trained models, reloaded in a fresh process.

Each trial pickles its model (an unregistered custom layer, Adam state) into its user attributes
in a journal file; another interpreter opens the study from that file and reloads every model,
with ``pickle.loads`` and with ``keras_pickle.loads`` (safe mode), predicting bit-identically.
"""

from __future__ import annotations

import base64
import json
import pickle

import integration_models as im
import keras
import pytest
from helpers import TESTS_DIR, engine, run_python

optuna = engine("optuna")
from optuna.storages import JournalStorage  # noqa: E402
from optuna.storages.journal import JournalFileBackend  # noqa: E402

RELOAD = """
import base64, json, pickle, sys
import integration_models, keras, optuna
import keras_pickle
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

study = optuna.load_study(study_name="tuned", storage=JournalStorage(JournalFileBackend(sys.argv[1])))
x, _ = integration_models.regression_data(16)
found = []
for trial in study.trials:
    data = base64.b64decode(trial.user_attrs["model"])
    plain, safe = pickle.loads(data), keras_pickle.loads(data)
    found.append({
        "number": trial.number,
        "same": [keras.ops.convert_to_numpy(m.predict(x, verbose=0)).tobytes().hex() == trial.user_attrs["predicted"]
                 for m in (plain, safe)],
        "layers": sorted(type(layer).__name__ for layer in plain.layers),
        "iterations": int(plain.optimizer.iterations),
    })
print(json.dumps(found))
"""


def objective(trial) -> float:
    learning_rate = trial.suggest_float("learning_rate", 1e-3, 1e-1, log=True)
    keras.utils.set_random_seed(trial.number)
    model = keras.Sequential(im.layers(1, None))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse")
    im.fit_regressor(model, epochs=2)
    x, y = im.regression_data(16)
    trial.set_user_attr("model", base64.b64encode(pickle.dumps(model)).decode())
    trial.set_user_attr("predicted", model.predict(x, verbose=0).tobytes().hex())
    return float(model.evaluate(x, y, verbose=0))


@pytest.mark.timeout(300)
def test_every_trials_model_reloads_in_a_fresh_process(tmp_path):
    journal = str(tmp_path / "study.log")
    study = optuna.create_study(study_name="tuned", storage=JournalStorage(JournalFileBackend(journal)))
    study.optimize(objective, n_trials=4, n_jobs=2)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 4

    output = run_python(RELOAD, journal, env={"PYTHONPATH": f"{TESTS_DIR.parent}:{TESTS_DIR}"}, keras_imported=True)
    reloaded = json.loads(output.splitlines()[-1])
    assert [entry["number"] for entry in reloaded] == [0, 1, 2, 3]
    for entry in reloaded:
        assert entry["same"] == [True, True], entry
        assert {"Gate", "Shift"} <= set(entry["layers"])
        assert entry["iterations"] == 4  # 2 epochs of 2 steps: the optimizer state came back too
