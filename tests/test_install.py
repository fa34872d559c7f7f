"""install() / uninstall() / is_installed() and the opt-in mixins."""

from __future__ import annotations

import copy
import pickle

import keras
import zoo
from helpers import assert_same_state

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


def test_uninstall_restores_keras_own_reduce():
    before = {cls: dict(cls.__dict__) for cls in KERAS_CLASSES + [keras.callbacks.Callback]}
    keras_pickle.uninstall()
    try:
        keras_pickle.uninstall()  # twice is harmless
        assert not keras_pickle.is_installed()
        for cls in KERAS_CLASSES + [keras.callbacks.Callback]:
            for name in ("__reduce_ex__", "__reduce__", "__deepcopy__", "__copy__"):
                assert name not in cls.__dict__, (cls, name)
        assert keras.Model.__reduce__ is keras.src.saving.keras_saveable.KerasSaveable.__reduce__
        model = zoo.sequential()
        data = pickle.dumps(model)
        assert b"_unpickle_model" in data and b"keras_pickle" not in data
    finally:
        keras_pickle.install()
    for cls, attributes in before.items():
        for name in ("__reduce_ex__", "__deepcopy__"):
            assert cls.__dict__.get(name) is attributes.get(name)


def test_install_wins_back_hooks_another_library_replaced():
    original = keras.Model.__dict__["__deepcopy__"]
    keras.Model.__deepcopy__ = lambda self, memo: "patched by someone else"
    assert not keras_pickle.is_installed()
    keras_pickle.install()
    assert keras_pickle.is_installed()
    assert keras.Model.__dict__["__deepcopy__"] is original
    keras_pickle.uninstall()
    try:
        assert "__deepcopy__" not in keras.Model.__dict__
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
        monkeypatch.setattr(keras_pickle._mixins, "_uninstalled_explicitly", False)
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
