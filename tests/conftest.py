"""Shared fixtures: one TensorFlow import per test process, keras_pickle installed."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

import keras_pickle  # noqa: E402


@pytest.fixture(autouse=True)
def installed():
    """Every test starts with keras_pickle installed; tests may uninstall it. What a test opted in to
    (``install(allow=...)``, or a callback payload loaded with ``allow_callbacks=True``) ends with it."""
    keras_pickle.install()
    yield
    keras_pickle.uninstall()
    keras_pickle.install()
