"""Shared fixtures: one TensorFlow import per test process, keras_pickle installed."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    # On JAX, XLA compiles each new model's steps; the same program (a model and its copy, the same model in a
    # fresh interpreter this process starts) then compiles once per test process instead of once per model.
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _xla_cache = tempfile.mkdtemp(prefix="keras-pickle-xla-cache-")
    _owner = os.getpid()  # a forked child that exits through atexit leaves the cache to this process
    atexit.register(lambda: os.getpid() == _owner and shutil.rmtree(_xla_cache, ignore_errors=True))
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    if importlib.util.find_spec("filelock") is not None:  # a size limit turns on JAX's locking of the cache
        os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(2 << 30)

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
