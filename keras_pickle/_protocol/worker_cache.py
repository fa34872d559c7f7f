"""A joblib worker's repeated tasks: the model rebuilt once per payload, each task given its own copy.

joblib's workers (loky, ``multiprocessing``) receive a large model as weights joblib wrote to a file
once and memory-maps (:mod:`keras_pickle._rebuild.reclaim`), and every task that names the same model
rebuilds it from its config: for a large model that rebuild (constructing and building every layer,
creating every variable from the mapped values) is most of what a task costs. Here the first task's
rebuild is kept, untouched, and every later arrival of the same payload gets a deep copy of it
(:func:`keras_pickle._protocol.copy.copy_layer`: rebuilt from the kept model's config and given
every value, as ``copy.deepcopy`` does), which on TensorFlow shares the values copy-on-write.

Every task still gets an independent model, equal to what a rebuild from its payload gives: the kept
model is never handed out, and what one task does to its copy reaches neither the kept model nor
another task. The payload is checked as every payload is (header, body, checksum, safe mode's
judgment) before the cache is asked.

The key is the payload's content: its header, configs, small arrays and bytes hashed (xxh3), each
memory-mapped weight by its file's identity (path, offset, shape, dtype, inode, size and
modification time; only a file of a joblib pool (:data:`JOBLIB_POOL_FILE`), which joblib names anew
for each array object and never rewrites), the load options (safe mode, ``allow_by_value``, ``allow_callbacks``, the
caller's custom objects). A body holding anything else is not cached. One model is kept per
process; another payload replaces it. Only Keras 3 models with memory-mapped weights are cached:
nothing changes for any other payload.

On TensorFlow only: its copy shares each value with the kept model until either writes it, so a
copy costs a fraction of a rebuild (0.055 s against 0.25 s per load for a 96 MiB Dense stack with its
Adam slots, ``python -m benchmarks joblib_parallel``'s worker load, measured while ``joblib.dump`` files were
cached). A PyTorch or JAX copy copies every value, which cost more than the rebuild from the mapped
values it replaced (PyTorch: 0.27 s against 0.05 s), and doubled what each worker holds.
"""

from __future__ import annotations

import os
import re
import threading
import types
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import xxhash

from .. import _dialect, _options
from .._wire.refs import InertReference
from .._wire.schema import KIND_LAYER

JOBLIB_POOL_FILE = re.compile(r"\d+-\d+-[0-9a-f]{32}\.pkl")
"""How joblib names the file it memory-maps one argument array from for its workers (``pid-thread-uuid4``):
a new name per array object, written once and never rewritten (``joblib._memmapping_reducer``). A file of
``joblib.dump`` may be rewritten in place under the same name, size and time: not cached."""

_lock = threading.Lock()
_kept: dict[str, Any] = {}
hits = 0
"""How many tasks this process answered with a copy of the kept model (tests read it)."""


class _Uncacheable(Exception):
    """The body holds something the key cannot describe by content: not cached."""


def rebuilt_or_copied(header: dict, body: dict, rebuild: Callable[[], Any], copy: Callable[[Any], Any]) -> Any:
    """``copy(kept)`` of the model kept for this payload, if any; else ``rebuild()``, kept, and copied.

    Only a Keras 3 model payload is cached (:func:`key` says which); anything else is ``rebuild()``.
    A copy that fails is answered by ``rebuild()`` (and the kept model dropped).
    """
    global hits
    key = payload_key(header, body)
    if key is None:
        return rebuild()
    with _lock:
        kept = _kept.get(key)
        if kept is None:
            _kept.clear()  # the previous payload's model goes before this one is built
        else:
            hits += 1
    if kept is None:
        kept = rebuild()
        with _lock:
            _kept.clear()
            _kept[key] = kept
    try:
        return copy(kept)
    except Exception:
        with _lock:
            _kept.clear()
        return rebuild()


def clear() -> None:
    """Drop the kept model."""
    with _lock:
        _kept.clear()


def payload_key(header: dict, body: dict) -> str | None:
    """The content key of a Keras 3 model payload on TensorFlow (see the module docstring); ``None``: not cached."""
    if header["kind"] != KIND_LAYER or header["dialect"] != _dialect.KERAS3:
        return None
    if keras.backend.backend() != "tensorflow":
        return None  # a copy would copy every value (see the module docstring)
    options = _options.load_options()
    digest = xxhash.xxh3_128()
    try:
        _feed(digest, header)
        _feed(digest, body)
        _feed(digest, (options.safe_mode, options.allow_by_value, options.allow_callbacks))
        _feed(digest, sorted((name, _identity(obj)) for name, obj in options.custom_objects.items()))
    except _Uncacheable:
        return None
    return digest.hexdigest()


def _identity(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}@{id(obj)}"


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, np.memmap):
        if not (isinstance(value.filename, str) and JOBLIB_POOL_FILE.fullmatch(os.path.basename(value.filename))):
            raise _Uncacheable  # a file a later joblib.dump may rewrite in place: only a pool's files are cached
        status = os.stat(value.filename)
        identity = (value.filename, value.offset, value.shape, value.dtype.str, status.st_dev, status.st_ino)
        digest.update(repr(("memmap", *identity, status.st_size, status.st_mtime_ns)).encode())
    elif isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _Uncacheable
        digest.update(repr(("array", value.dtype.str, value.shape)).encode())
        digest.update(np.ascontiguousarray(value).data)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        digest.update(b"bytes%d:" % len(value))
        digest.update(value)
    elif isinstance(value, str):
        digest.update(b"str%d:" % len(value))
        digest.update(value.encode("utf-8", "surrogatepass"))
    elif value is None or isinstance(value, (bool, int, float, np.generic)):
        digest.update(repr((type(value).__name__, value)).encode())
    elif isinstance(value, dict):
        digest.update(b"dict%d{" % len(value))
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"%s%d[" % (type(value).__name__.encode(), len(value)))
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    elif isinstance(value, InertReference):
        digest.update(repr(("ref", value.qualified_name, value.carried, id(value.target))).encode())
    elif isinstance(value, (type, types.FunctionType)):
        digest.update(repr(("object", _identity(value))).encode())
    else:
        raise _Uncacheable
