"""install() / uninstall() / is_installed() and the opt-in mixins."""

from __future__ import annotations

import copy
import pickle

import keras
import zoo
from helpers import assert_same_state, run_python

import keras_pickle
from keras_pickle import _format

KERAS_CLASSES = [keras.Layer, keras.Model, keras.losses.Loss, keras.optimizers.Optimizer, keras.metrics.Metric]


def test_install_is_idempotent_and_reported():
    keras_pickle.install()
    keras_pickle.install()
    assert keras_pickle.is_installed()
    reduce_ex = keras.Layer.__dict__["__reduce_ex__"]
    keras_pickle.install()
    assert keras.Layer.__dict__["__reduce_ex__"] is reduce_ex


UNINSTALL_IN_A_PRISTINE_PROCESS = """
    import pickle
    import keras
    import keras_pickle

    classes = [keras.Layer, keras.Model, keras.losses.Loss, keras.optimizers.Optimizer,
               keras.metrics.Metric, keras.callbacks.Callback]
    names = ("__reduce_ex__", "__reduce__", "__deepcopy__", "__copy__")
    before = {(c, n): c.__dict__.get(n) for c in classes for n in names}
    keras_pickle.install()
    assert keras_pickle.is_installed()
    assert any(c.__dict__.get(n) is not before[(c, n)] for c in classes for n in names)
    keras_pickle.uninstall()
    keras_pickle.uninstall()  # twice is harmless
    assert not keras_pickle.is_installed()
    after = {(c, n): c.__dict__.get(n) for c in classes for n in names}
    assert after == before, [k for k in before if after[k] is not before[k]]
    assert keras.Model.__reduce__ is keras.src.saving.keras_saveable.KerasSaveable.__reduce__
    data = pickle.dumps(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
    assert b"_unpickle_model" in data and b"keras_pickle" not in data
    print("uninstall restored Keras")
"""


def test_uninstall_restores_keras_own_reduce():
    """In a fresh interpreter: no other library (scikeras) has patched Keras there."""
    assert "uninstall restored Keras" in run_python(UNINSTALL_IN_A_PRISTINE_PROCESS, keras_imported=True)


def test_uninstall_restores_what_was_there_before_install():
    names = ("__reduce_ex__", "__reduce__", "__deepcopy__", "__copy__")
    keras_pickle.uninstall()
    try:
        before = {(cls, n): cls.__dict__.get(n) for cls in KERAS_CLASSES + [keras.callbacks.Callback] for n in names}
        keras_pickle.install()
        keras_pickle.uninstall()
        after = {(cls, n): cls.__dict__.get(n) for cls in KERAS_CLASSES + [keras.callbacks.Callback] for n in names}
        assert after == before
    finally:
        keras_pickle.install()


def test_install_wins_back_hooks_another_library_replaced():
    keras_pickle.uninstall()
    before_install = keras.Model.__dict__.get("__deepcopy__")
    keras_pickle.install()
    original = keras.Model.__dict__["__deepcopy__"]
    keras.Model.__deepcopy__ = lambda self, memo: "patched by someone else"
    assert not keras_pickle.is_installed()
    keras_pickle.install()
    assert keras_pickle.is_installed()
    assert keras.Model.__dict__["__deepcopy__"] is original
    keras_pickle.uninstall()
    try:
        assert keras.Model.__dict__.get("__deepcopy__") is before_install
    finally:
        keras_pickle.install()


def test_payload_references_the_stable_reconstructor():
    data = pickle.dumps(zoo.sequential(), protocol=2)
    assert b"keras_pickle._format" in data and b"restore" in data
    assert _format.restore.__module__ == "keras_pickle._format"


def test_loading_a_payload_installs_unless_uninstalled_explicitly(monkeypatch):
    data = pickle.dumps(zoo.sequential())
    keras_pickle.uninstall()
    try:
        pickle.loads(data)
        assert not keras_pickle.is_installed(), "an explicit uninstall() must stick"
        monkeypatch.setattr(keras_pickle._protocol.install, "_uninstalled_explicitly", False)
        pickle.loads(data)
        assert keras_pickle.is_installed()
    finally:
        keras_pickle.install()


class OptInModel(keras_pickle.LayerPickleMixin, zoo.Tower):
    """A class that opts in per class, without install()."""


def test_mixins_work_per_class_without_install():
    model = OptInModel(4)
    model(zoo.data()[0])
    keras_pickle.uninstall()
    try:
        data = pickle.dumps(model)
        assert b"keras_pickle._format" in data
        restored = pickle.loads(data)
        assert type(restored) is OptInModel
        assert_same_state(model, restored)
        assert_same_state(model, copy.deepcopy(model))
    finally:
        keras_pickle.install()
