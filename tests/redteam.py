"""Crafting hostile payloads as an attacker would: dump a real model, edit its header and body, write
any global the edit needs, and sign the result again (the checksum is not a secret).

Used by ``tests/safe_mode/test_redteam.py`` and by the structure-aware mode of ``tests/safe_mode/test_fuzz.py``.
"""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import random
import sys
import threading
from typing import Any

import keras
import numpy as np
from keras.src.saving import serialization_lib

from keras_pickle import _format
from keras_pickle._capture import encode as _capture_encode
from keras_pickle._protocol import dialects
from keras_pickle._wire.checksum import CHECKSUM_ALGORITHM, content_checksum


class GlobalRef:
    """Written to the stream as ``GLOBAL module name``, exactly as spelled: whatever it resolves to."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name
        # What the checksum reads off a custom object: the dotted name it was resolved from.
        self.__module__, self.__qualname__ = module, name

    def __repr__(self) -> str:
        return f"GlobalRef({self.module!r}, {self.name!r})"


class Call:
    """Written as ``REDUCE``: ``function(*args)``, the function a :class:`GlobalRef`."""

    def __init__(self, function: GlobalRef, *args: Any):
        self.function, self.args = function, args


class _CraftingPickler(pickle._Pickler):
    """The pure-Python pickler, with :class:`GlobalRef` and :class:`Call` written verbatim."""

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_global_ref(self, ref: GlobalRef) -> None:
        self.write(pickle.GLOBAL + f"{ref.module}\n{ref.name}\n".encode())

    def _save_call(self, call: Call) -> None:
        self.save(call.function)
        self.save(call.args)
        self.write(pickle.REDUCE)

    dispatch[GlobalRef] = _save_global_ref
    dispatch[Call] = _save_call


class _Restore:
    """Pickles as ``keras_pickle._format.restore(header, body)``."""

    def __init__(self, header: dict, body: dict):
        self.header, self.body = header, body

    def __reduce__(self):
        return _format.restore, (self.header, self.body)


def payload_parts(model: Any, protocol: int = 2) -> tuple[dict, dict]:
    """A real model's header and body, as ``dumps`` writes them (copies the caller may edit)."""
    header, body = _capture_encode.layer_payload(model, protocol, dialects.of(model))
    return dict(header), dict(body)


def craft(header: dict, body: dict, *, protocol: int = 2, sign: bool = True) -> bytes:
    """The pickle of ``restore(header, body)``; ``sign`` recomputes the checksum of the edited content."""
    header = dict(header)
    if sign:
        header["checksum"] = None
        header["checksum"] = content_checksum(header, body, CHECKSUM_ALGORITHM)
    return dumps_crafted(_Restore(header, body), protocol=protocol)


def dumps_crafted(obj: Any, *, protocol: int = 2) -> bytes:
    buffer = io.BytesIO()
    _CraftingPickler(buffer, protocol=protocol).dump(obj)
    return buffer.getvalue()


# --------------------------------------------------------------------------
# Config editing
# --------------------------------------------------------------------------


def edit_config(body: dict, edit) -> dict:
    """``body`` with ``edit(config_dict)`` applied to a copy of its config (``edit`` may return a new one)."""
    config = json.loads(body["config"])
    edited = edit(config)
    return {**body, "config": json.dumps(config if edited is None else edited)}


def layer_configs(config: dict) -> list[dict]:
    """The layer entries of a Sequential's or Functional's config."""
    return config["config"]["layers"]


def lambda_layer_config(name: str, function: str, arguments: dict | None = None) -> dict:
    """A Lambda layer's inner config that calls the function Keras resolves from ``function``."""
    real = keras.layers.Lambda(lambda x: x, name=name)
    inner = copy.deepcopy(real.get_config())
    inner["function"] = {"module": "evil", "class_name": "function", "config": function, "registered_name": function}
    inner["arguments"] = arguments or {}
    return inner


# --------------------------------------------------------------------------
# Watching for effects
# --------------------------------------------------------------------------

_AUDITED: list[str] = []
_AUDITING = threading.Event()
_WATCHED_EVENTS = ("os.", "subprocess.", "socket.", "shutil.", "ctypes.", "import", "exec", "compile")


_XLA_CACHE = os.environ.get("JAX_COMPILATION_CACHE_DIR")
"""The XLA compilation cache tests/conftest.py gives this process: on JAX, compiling a program (a model's first
call or fit, whatever the model) reads and writes there; what JAX does for the test process, not what a payload
makes happen. Nothing a payload holds can name the directory, which is created with a random name."""


def _in_xla_cache(args: tuple) -> bool:
    path = args[0] if args else None
    if not (_XLA_CACHE and isinstance(path, (str, bytes, os.PathLike))):
        return False
    path = os.fsdecode(path)
    return path == _XLA_CACHE or path.startswith(_XLA_CACHE + os.sep)


def _audit(event: str, args: tuple) -> None:
    if _AUDITING.is_set() and event.startswith(_WATCHED_EVENTS) and not _in_xla_cache(args):
        _AUDITED.append(f"{event}{args!r:.120}")


sys.addaudithook(_audit)


def keras_globals() -> dict:
    """The process-wide Keras settings a payload must never change."""
    return {
        "safe_mode": serialization_lib.in_safe_mode(),
        "floatx": keras.config.floatx(),
        "epsilon": keras.config.epsilon(),
        "image_data_format": keras.config.image_data_format(),
        "dtype_policy": keras.config.dtype_policy().name,
        "backend": keras.config.backend(),
        "python_random": random.getstate(),
        "numpy_random": np.random.get_state()[1].tobytes(),
    }


class Effects:
    """Within: what loading did besides raising (audited events, imports, marker, Keras globals)."""

    def __init__(self, marker):
        self.marker = marker

    def __enter__(self):
        self.modules = set(sys.modules)
        self.settings = keras_globals()
        _AUDITED.clear()
        _AUDITING.set()
        return self

    def __exit__(self, *exc):
        _AUDITING.clear()
        self.events = list(_AUDITED)
        return False

    def assert_none(self) -> None:
        assert not self.marker.exists(), "the payload's command ran"
        assert set(sys.modules) == self.modules, f"imported {sorted(set(sys.modules) - self.modules)}"
        assert not self.events, f"audited events while loading: {self.events[:5]}"
        assert keras_globals() == self.settings, "a Keras global changed"


# --------------------------------------------------------------------------
# Spellings and depths of a layer config (tests/safe_mode/test_allowlist*.py)
# --------------------------------------------------------------------------

REFUSED_LAYER_SPELLINGS = {  # how a config may name a layer kind ``k``, with or without a module
    "legacy, no module": lambda k: {"class_name": k},
    "public module": lambda k: {"module": "keras.layers", "class_name": k, "registered_name": None},
    "dotted class": lambda k: {"module": "keras", "class_name": f"layers.{k}"},
    "full path as class": lambda k: {"class_name": f"keras.layers.{k}"},
    "registered name only": lambda k: {"module": "evil", "class_name": "Foo", "registered_name": k},
    "package registered name": lambda k: {"class_name": "Foo", "registered_name": f"Custom>{k}"},
    "module null": lambda k: {"module": None, "class_name": k, "registered_name": None},
}


def nest(depth: str, layer: dict) -> dict:
    """``layer`` placed at ``depth`` (one of :data:`DEPTHS`), to go in a model's layer list."""
    if depth == "top":
        return layer
    if depth == "nested Sequential":
        return {"class_name": "Sequential", "config": {"name": "n1", "layers": [layer]}}
    if depth == "Sequential in Sequential":
        inner = {"class_name": "Sequential", "config": {"name": "n2", "layers": [layer]}}
        return {"class_name": "Sequential", "config": {"name": "n1", "layers": [inner]}}
    if depth == "nested Functional":
        node = {**layer, "name": "x", "inbound_nodes": []}
        return {
            "class_name": "Functional",
            "config": {"name": "f", "layers": [node], "input_layers": [], "output_layers": []},
        }
    if depth == "wrapper":
        return {"module": "keras.layers", "class_name": "TimeDistributed", "config": {"name": "w", "layer": layer}}
    raise ValueError(depth)


DEPTHS = ("top", "nested Sequential", "Sequential in Sequential", "nested Functional", "wrapper")
