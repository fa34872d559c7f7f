"""Every example in docs/faq.md, asserted."""

from __future__ import annotations

import pickle
import threading
import weakref

import keras
import numpy as np
import pytest

import keras_pickle


class Holder:
    """Something users send to workers: data plus a member pickle cannot handle."""

    def __init__(self, member):
        self.data = np.arange(4)
        self.member = member


class Anchor:
    pass


ANCHOR = Anchor()


@pytest.mark.parametrize(
    "member, message",
    [
        (threading.RLock(), "cannot pickle '_thread.RLock' object"),
        (weakref.ref(ANCHOR), "cannot pickle 'weakref.ReferenceType' object"),
    ],
)
def test_faq_cannot_pickle_rlock_or_weakref(member, message):
    holder = Holder(member)
    with pytest.raises(TypeError, match=message):
        pickle.dumps(holder)
    report = keras_pickle.check(holder)
    assert [problem.path for problem in report.problems] == ["holder.member"]


class FaqScale(keras.layers.Layer):
    """An unregistered custom layer, as in most user code."""

    def call(self, x):
        return x * 2.0


def test_faq_could_not_locate_class():
    model = keras.Sequential([keras.Input((3,)), FaqScale()])
    keras_pickle.uninstall()
    try:
        data = pickle.dumps(model)
        with pytest.raises(Exception) as info:
            pickle.loads(data)
        assert "Could not locate class 'FaqScale'" in str(info.value) or "Could not locate class 'FaqScale'" in str(
            info.value.__context__
        )
    finally:
        keras_pickle.install()
    restored = pickle.loads(pickle.dumps(model))
    assert type(restored.layers[-1]) is FaqScale


def test_faq_could_not_serialize_object_of_type_functional():
    serialize = pytest.importorskip(
        "distributed.protocol", reason="distributed is not installed (pip install -e '.[test]' installs it)"
    ).serialize
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    functional = keras.Model(model.inputs, model.outputs)
    keras_pickle.uninstall()
    try:
        with pytest.raises(TypeError, match="Could not serialize object of type Sequential"):
            serialize(model, on_error="raise")
        with pytest.raises(TypeError, match="Could not serialize object of type Functional") as info:
            serialize(functional, on_error="raise")
        assert "_updated_config" in str(info.value.__cause__)
    finally:
        keras_pickle.install()
    header, frames = serialize(functional, on_error="raise")
    assert header["serializer"] == "pickle" and len(frames) == 1 + len(functional.variables)
