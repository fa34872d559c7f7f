"""Losses, metrics and schedules without ``**kwargs`` or ``get_config`` travel with the model they
compile (issue 35, section 2 and section 5's second bullet).

keras.io's ``CustomMSE`` takes no ``**kwargs``: Keras's config of it holds ``reduction`` and ``dtype``,
which its constructor refuses, so a payload built from configs alone pickles and never loads. With
``install()`` in effect before they are constructed, their arguments travel instead: a copy through
``copy.deepcopy``, ``pickle`` and a fresh process holds every variable equal and takes the next steps
bit for bit. Constructed before ``install()``, ``dumps`` refuses, naming the object first and the fix.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import compile_object_models as models
import keras
import numpy as np
import pytest
from helpers import REPO_DIR, TESTS_DIR, constructed_before_install, run_python

import keras_pickle

pytestmark = pytest.mark.backends  # every variable and the next steps are the backend's

HERE = Path(__file__).resolve().parent
"""This folder, where compile_object_models.py is."""


@pytest.mark.parametrize("schedule", [False, True], ids=["constant rate", "WarmUpCosine"])
def test_deepcopy_and_pickle_rebuild_them_from_their_arguments_and_train_identically(schedule):
    model = models.compiled(schedule=schedule)
    copies = {
        "deepcopy": copy.deepcopy(model),
        "pickle": pickle.loads(pickle.dumps(model)),
        "keras_pickle": keras_pickle.loads(keras_pickle.dumps(model)),
    }
    for way, twin in copies.items():
        assert type(twin.loss) is models.CustomMSE and twin.loss is not model.loss, way
        assert twin.loss.regularization_factor == 0.5, way  # not the default a config alone would give
        assert models.values(twin) == models.values(model), way
        if schedule:
            rate = twin.optimizer._learning_rate
            assert type(rate) is models.WarmUpCosine and rate.learning_rate_base == 0.05, way
    expected = models.next_steps(model)
    for way, twin in copies.items():
        assert models.next_steps(twin) == expected, f"{way}: the next steps differ"


def test_a_fresh_process_loads_them_and_trains_identically(tmp_path):
    model = models.compiled(schedule=True)
    (tmp_path / "model.pkl").write_bytes(keras_pickle.dumps(model))
    run_python(
        f"""
        import pickle
        import compile_object_models as models
        # plain pickle: safe mode refuses PyTorch's Adam by its backend module, whatever the loss
        model = pickle.loads(open({str(tmp_path / "model.pkl")!r}, "rb").read())
        assert type(model.loss).__name__ == "CustomMSE" and model.loss.regularization_factor == 0.5
        before = models.values(model)
        pickle.dump((before, models.next_steps(model)), open({str(tmp_path / "seen.pkl")!r}, "wb"))
        """,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{HERE}:{TESTS_DIR}:{REPO_DIR}"},
        keras_imported=True,
    )
    with open(tmp_path / "seen.pkl", "rb") as f:
        before, after = pickle.load(f)
    assert before == models.values(model)
    assert after == models.next_steps(model)


def test_the_factor_changes_training_so_identical_steps_prove_it_travelled():
    model = models.compiled()
    twin = copy.deepcopy(model)
    twin.loss.regularization_factor = 0.1  # what Keras's config alone would rebuild
    assert models.next_steps(twin) != models.next_steps(model)


@pytest.mark.parametrize("culprit", ["loss", "metric", "schedule"])
def test_constructed_before_install_dumps_refuses_naming_the_object_first(culprit):
    loss = constructed_before_install(models.CustomMSE) if culprit == "loss" else "mse"
    metric = constructed_before_install(models.CategoricalTruePositives) if culprit == "metric" else "mae"
    rate = 0.01
    if culprit == "schedule":
        rate = constructed_before_install(lambda: models.WarmUpCosine(0.05, 20, 0.0, 3))
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model.compile(optimizer=keras.optimizers.Adam(rate), loss=loss, metrics=[metric])
    x, y = models.data()
    model.fit(x, y, epochs=1, verbose=0)
    name = {"loss": "CustomMSE", "metric": "CategoricalTruePositives", "schedule": "WarmUpCosine"}[culprit]
    for attempt in (pickle.dumps, keras_pickle.dumps):
        with pytest.raises(keras_pickle.UnrecoverableConfigError) as caught:
            attempt(model)
        message = str(caught.value)
        assert message.startswith(name) and "keras_pickle.install() before constructing it" in message
    if culprit == "schedule":  # an optimizer is copied from its config, which the schedule cannot give
        with pytest.raises(keras_pickle.KerasPicklingError, match="WarmUpCosine"):
            copy.deepcopy(model)
        return
    twin = copy.deepcopy(model)  # in one process the model is copied attribute by attribute instead
    assert np.array_equal(twin.predict(x, verbose=0), model.predict(x, verbose=0))


def test_one_given_to_a_compile_of_the_models_own_is_refused_at_dumps_naming_it():
    import kerasio

    model = kerasio.gan()
    model.compile(
        d_optimizer=keras.optimizers.Adam(1e-3),
        g_optimizer=keras.optimizers.Adam(2e-3),
        loss_fn=models.CustomMSE(regularization_factor=0.5),
    )
    with pytest.raises(keras_pickle.UnrecoverableConfigError) as caught:
        pickle.dumps(model)
    assert str(caught.value).startswith("CustomMSE 'custom_mse' cannot be rebuilt from its config")
    assert "get_config()" in str(caught.value)


class KwargsFactorLoss(keras.losses.Loss):
    """A constructor of its own with ``**kwargs``, Keras's ``get_config``: the config binds but omits ``factor``."""

    def __init__(self, factor=0.1, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, y_true, y_pred):
        return keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1) * self.factor


class ConfiguredMSE(models.CustomMSE):
    """keras.io's ``CustomMSE`` as the refusal says to write it: ``**kwargs`` and a ``get_config``."""

    def __init__(self, regularization_factor=0.1, name="custom_mse", **kwargs):
        super().__init__(regularization_factor=regularization_factor, name=name)

    def get_config(self):
        return {"regularization_factor": self.regularization_factor, "name": self.name}


def test_a_loss_its_config_cannot_rebuild_is_refused_alone_and_its_advice_works():
    loss = models.CustomMSE(regularization_factor=0.5)
    for attempt in (lambda: pickle.dumps(loss), lambda: keras_pickle.dumps(loss)):
        with pytest.raises(keras_pickle.PickleRefusedError) as refused:
            attempt()  # it used to write a payload that failed on load with TypeError('reduction')
        message = str(refused.value)
        assert message.startswith("CustomMSE 'custom_mse' cannot be pickled alone"), message
        assert "Pickle the model compiled with it" in message and "**kwargs" in message, message
    assert copy.deepcopy(loss).regularization_factor == 0.5  # a copy in this process keeps working
    # The advice, followed: the model compiled with it carries it ...
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss=loss)
    assert keras_pickle.loads(keras_pickle.dumps(model)).loss.regularization_factor == 0.5
    # ... or the class takes **kwargs and has a get_config: it travels alone.
    configured = ConfiguredMSE(regularization_factor=0.5)
    assert keras_pickle.loads(keras_pickle.dumps(configured)).regularization_factor == 0.5


def test_a_loss_whose_config_would_lose_an_argument_is_refused_alone_unless_it_kept_its_default():
    with pytest.raises(keras_pickle.PickleRefusedError, match="does not hold factor"):
        pickle.dumps(KwargsFactorLoss(factor=0.5))
    assert pickle.loads(pickle.dumps(KwargsFactorLoss())).factor == 0.1  # nothing to lose
