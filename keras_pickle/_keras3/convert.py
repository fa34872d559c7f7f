"""What a payload written under one backend needs to load under another.

Keras gives some state a dtype that depends on the backend, and records some
backend-specific classes in configs:

* ``dtype="int"`` (an optimizer's ``iteration``, a custom counter) is int64 on
  TensorFlow and int32 on JAX and PyTorch. Integers are converted **by
  value**: a value the loading dtype cannot hold (an iteration count of
  2**40 into int32) raises :class:`BackendConversionError` naming the
  variable, never wraps.
* A ``SeedGenerator``'s state (Dropout, RNN dropout, any seeded layer) is
  int64 on TensorFlow, uint32 on JAX and int32 on PyTorch, which reads the
  uint32 bits of its int32. **The value of a seed is its 32 bits**: int32 and
  uint32 states are reinterpreted bit for bit (PyTorch's -5 is JAX's
  4294967291), a 32-bit state becomes TensorFlow's int64 as its unsigned
  value, and a TensorFlow int64 state gives its low 32 bits if it is in
  [-2**31, 2**32) (both readings of 32 bits), else
  :class:`BackendConversionError`. The state is carried exactly; the random
  stream drawn from it is the loading backend's (each backend has its own
  RNG algorithm).
* A PyTorch model's compile config names PyTorch's optimizer classes
  (``keras.src.backend.torch.optimizers.torch_adam.Adam``). Loaded under
  another backend, a built-in optimizer of another backend is named by its
  public class (``keras.optimizers.Adam``), which Keras resolves to the
  loading backend's own, and ``jit_compile`` (recorded as the writing
  backend resolved it) is ``"auto"`` again: the loading backend decides.

Conversions happen only when the payload was written under another backend
*and* the dtypes differ: a same-backend load assigns every value untouched,
and a dtype difference there is a mismatch (``_state`` reports it). Floats
are never converted: dtype policies do not depend on the backend.

Whoever wrote the payload, JAX without 64-bit mode (``JAX_ENABLE_X64``)
holds a float64 or complex128 variable in 32 bits: loading 64-bit values there raises
:class:`BackendConversionError` naming the variable and ``JAX_ENABLE_X64``. A
64-bit integer loads if every value fits in 32 bits, and raises otherwise. A
payload written by JAX without 64-bit mode holds the 32-bit values its
variables really had, and loads there bit-exact.
"""

from __future__ import annotations

import copy
import re
import warnings
from typing import Any

import keras
import numpy as np

from .._wire import config_walk
from ..errors import BackendConversionError

# Keras names a SeedGenerator's state variable so; the variable is found by that name.
SEED_STATE_NAME = "seed_generator_state"
SEED_DTYPES = ("int32", "uint32", "int64")
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
# 64-bit dtypes JAX holds in 32 bits unless 64-bit mode is on, and the dtype it holds them in.
JAX_64_BIT = {"float64": "float32", "complex128": "complex64", "int64": "int32", "uint64": "uint32"}
_BACKEND_OPTIMIZER = re.compile(r"keras\.src\.backend\.(\w+)\.optimizers?(?:\.\w+)*")


def is_foreign(written_backend: str | None) -> bool:
    """Whether a payload written under ``written_backend`` comes from another backend than this process's."""
    return written_backend is not None and written_backend != keras.backend.backend()


def converted(variable: Any, array: np.ndarray, target: str, *, where: str, path: str) -> np.ndarray | None:
    """``array`` as ``target`` (the dtype of ``variable`` here), or None if no rule converts it.

    ``where`` names the variable in messages ("Variable #3 'dropout/seed_generator_state'
    of Sequential 'seq'"). See the module docstring for the rules.
    """
    source = np.dtype(array.dtype).name
    if source not in INTEGER_DTYPES or target not in INTEGER_DTYPES:
        return None
    if str(getattr(variable, "name", "")) == SEED_STATE_NAME and source in SEED_DTYPES and target in SEED_DTYPES:
        return _seed_as(array, target, where=where, path=path)
    return _integers_as(array, target, where=where, path=path)


def _integers_as(array: np.ndarray, target: str, *, where: str, path: str) -> np.ndarray:
    info = np.iinfo(target)
    if array.size:
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            bad = high if high > info.max else low
            raise BackendConversionError(
                f"{where} holds {bad} ({array.dtype.name} in the payload), which {keras.backend.backend()} "
                f"stores as {target} ([{info.min}, {info.max}]): it cannot be loaded without changing its "
                "value. Load it under the backend that wrote it.",
                path=path,
                backend=keras.backend.backend(),
            )
    return array.astype(target)


def _seed_as(array: np.ndarray, target: str, *, where: str, path: str) -> np.ndarray:
    """A seed state as ``target``: its 32 bits, reinterpreted."""
    if array.dtype.itemsize == 4:
        bits = array.view(np.uint32)
    else:
        if array.size and (int(array.min()) < -(2**31) or int(array.max()) >= 2**32):
            bad = int(array.max()) if int(array.max()) >= 2**32 else int(array.min())
            raise BackendConversionError(
                f"{where} is a seed state holding {bad} ({array.dtype.name} in the payload), which does not "
                f"fit in 32 bits: {keras.backend.backend()} keeps seed state as {target}, 32 bits. Load it "
                "under the backend that wrote it, or reseed the layer.",
                path=path,
                backend=keras.backend.backend(),
            )
        bits = (array & 0xFFFFFFFF).astype(np.uint32)
    if target == "uint32":
        return np.ascontiguousarray(bits)
    if target == "int32":
        return np.ascontiguousarray(bits).view(np.int32)
    return bits.astype(np.int64)


def held_dtype(target: str) -> str:
    """The dtype this backend stores a variable declared ``target`` in (JAX without 64-bit mode narrows)."""
    held = JAX_64_BIT.get(target)
    if held is None or keras.backend.backend() != "jax" or _jax_holds(target):
        return target
    return held


def check_held(target: str, array: np.ndarray, *, where: str, path: str) -> None:
    """Raise if this backend would hold ``array``, for a variable of dtype ``target``, with fewer bits.

    Only JAX does, without 64-bit mode: see the module docstring. A payload that already holds
    the narrow dtype (written by JAX without 64-bit mode) loses nothing and loads as it is.
    """
    held = held_dtype(target)
    if held == target or np.dtype(array.dtype).name == held:
        return
    if target in ("int64", "uint64") and array.dtype.kind in "iu":
        info = np.iinfo(held)
        if not array.size or (int(array.min()) >= info.min and int(array.max()) <= info.max):
            return  # every value survives the 32-bit variable
        problem = f"and the payload has a value outside [{info.min}, {info.max}]"
    else:
        problem = "which would round its values silently"
    raise BackendConversionError(
        f"{where} is {target}, but JAX without 64-bit mode holds it as {held}, {problem}. "
        "Set JAX_ENABLE_X64=1 in the environment (or call "
        "jax.config.update('jax_enable_x64', True)) before loading it.",
        path=path,
        backend="jax",
    )


def _jax_holds(dtype: str) -> bool:
    """Whether this JAX process keeps a ``dtype`` value in ``dtype`` (64-bit mode may change at run time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX warns that it truncates the dtype: that is the question
        value = keras.ops.convert_to_numpy(keras.ops.zeros((), dtype=dtype))
    return np.dtype(value.dtype).name == dtype


def public_optimizer(module: Any, name: Any) -> type | None:
    """The public class (``keras.optimizers.Adam``) of a backend's own optimizer class
    (``keras.src.backend.torch.optimizers.torch_adam`` + ``Adam``), or ``None``.

    Keras resolves the public class to the loading backend's own when it builds the optimizer,
    so naming it never needs the backend's module imported by name.
    """
    if not (isinstance(module, str) and isinstance(name, str) and _BACKEND_OPTIMIZER.fullmatch(module)):
        return None
    public = getattr(keras.optimizers, name, None)
    return public if _is_optimizer_class(public) else None


def portable_config(config: Any) -> Any:
    """``config`` with each backend's own built-in optimizer class named by its public class.

    ``{"module": "keras.src.backend.torch.optimizers.torch_adam", "class_name": "Adam"}`` becomes
    ``{"module": "keras.optimizers", "class_name": "Adam"}``, which Keras resolves to the loading
    backend's own class: PyTorch's again under PyTorch (without importing its module by name, which
    safe mode never does), its own under another backend. A class ``keras.optimizers`` does not
    name is kept. Returns a new structure; ``config`` is not changed.
    """
    config = copy.deepcopy(config)
    for node in config_walk.object_refs(config):
        module, name = node.get("module"), node.get("class_name")
        # Keras records a built-in class with its class name as registered name.
        if node.get("registered_name") in (None, name) and public_optimizer(module, name) is not None:
            node["module"] = "keras.optimizers"
    return config


def portable_compile_config(compile_config: dict, written_backend: str | None) -> dict:
    """A compile config ready for this backend: :func:`portable_config`, and, from another
    backend, ``jit_compile="auto"``.

    Keras records ``jit_compile`` as resolved by the writing backend (JAX: ``True``, meaning
    ``jax.jit``); each backend means something else by it (XLA, ``jax.jit``, ``torch.compile``),
    so a payload from another backend lets the loading backend choose, as a fresh ``compile()``
    would.
    """
    compile_config = portable_config(compile_config)
    if is_foreign(written_backend) and isinstance(compile_config, dict) and "jit_compile" in compile_config:
        compile_config["jit_compile"] = "auto"
    return compile_config


def is_optimizer_config(config: Any) -> bool:
    """Whether ``config`` is a built-in optimizer's (a standalone optimizer payload), judged by its module."""
    module = config.get("module") if isinstance(config, dict) else None
    return isinstance(module, str) and (
        bool(_BACKEND_OPTIMIZER.fullmatch(module)) or module.startswith(("keras.optimizers", "keras.src.optimizers"))
    )


def _is_optimizer_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, keras.optimizers.Optimizer)
