"""The only place that knows how a backend stores variable values.

Everything else in keras_pickle speaks numpy and Keras variables. A backend
gets a fast path here when measurements justify one; the generic path works
for every backend Keras supports.

Ownership is settled here, in both directions:

* :func:`to_numpy` returns a *snapshot*: nothing done to the variable later
  (training, ``assign``) changes the array, so protocol-5 buffers handed out by
  ``dumps`` stay what was pickled. It copies only where the backend updates
  storage in place (PyTorch).
* :func:`assign` and :func:`initialize` leave the variable with storage of
  its own: it never aliases the array (or tensor) it was given, so a loaded
  model does not change when the caller overwrites the buffers or the payload
  bytes, and a deep copy shares nothing with its original.

Per backend (Keras 3.15, measured on CPU):

==========  ==========================================  ==========================================
backend     read (to_numpy)                             write (assign / initialize)
==========  ==========================================  ==========================================
tensorflow  zero-copy view of a resource-variable       as Keras does it: the variable's buffer
            read; copy-on-write protects it from         is TensorFlow's, never the numpy array's
            later assignments                           (its allocator reuses memory it holds)
jax         zero-copy view of the immutable array: an   one copy (``jnp.array``, which copies by
            assignment replaces the array, and XLA      contract): ``jnp.asarray`` of an aligned
            does not donate a buffer that a numpy view  numpy array aliases it, a deferred
            still refers to (training leaves it)        variable would keep the numpy array itself
torch       one copy (numpy's): variables are updated  initialize: one copy, a tensor is copied
            in place (``copy_``, optimizer steps);      (Keras would adopt a ``Parameter`` as is);
            a view where the caller copies the values   assign: numpy's copy into the variable's
            before returning (``snapshot=False``)       own storage
==========  ==========================================  ==========================================

On PyTorch every copy on the CPU is numpy's (:func:`_numpy_copy` says why), and a saved
value reaches a variable with that one copy: never a tensor made from it and then copied
into the variable.

A numpy array (layer-held state from ``save_own_variables``) is copied by
:func:`to_numpy`: it may be the layer's own, mutable storage.
"""

from __future__ import annotations

import keras
import numpy as np
from keras.src.backend.common.stateless_scope import in_stateless_scope

# numpy 2 moved byte_bounds out of the main namespace.
_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds


def backend_name() -> str:
    return keras.backend.backend()


def sync_training_state(obj) -> None:
    """Put a model's training state back into its variables, if the backend keeps it elsewhere.

    During ``fit`` the JAX trainer holds the variables' values in its own state
    and purges the variables (Keras's ``Callback.model`` syncs them; a model
    reached any other way, a closure or an attribute, is not synced). Syncing
    is Keras's own ``jax_state_sync()``, which the trainer expects callbacks to
    call; it does nothing outside ``fit`` and on other backends.
    """
    sync = getattr(obj, "jax_state_sync", None)
    if callable(sync):
        sync()


def to_numpy(value, *, snapshot: bool = True) -> np.ndarray:
    """A snapshot of a Keras variable, backend tensor or array, as numpy.

    Later assignments to the variable or training never change the result.
    No copy where the backend makes that free (TensorFlow, JAX: see the module
    docstring), one copy otherwise. The result may be read-only and may be
    shared with the variable's current value; callers must not write to it.

    ``snapshot=False``: the caller is done with the result before anything can
    change the variable (an in-band pickle copies it into the stream, a deep
    copy into the twin's variable), so PyTorch's CPU tensors are viewed, not cloned.
    """
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, keras.Variable):
        value = value.value
    if isinstance(value, np.ndarray):  # a variable whose value is numpy: not a backend's, so mutable
        return np.array(value, copy=True)
    if backend_name() == "torch" and callable(getattr(value, "detach", None)):
        return _torch_snapshot(value) if snapshot else _torch_view(value)
    # A tf.Variable: value() is one read (read_value() adds an identity op and a name scope);
    # the tensor it returns is a copy-on-write snapshot of the buffer.
    read = getattr(value, "value", None)
    if not callable(read):
        read = getattr(value, "read_value", None)
    if callable(read):
        value = read()
    try:
        return np.asarray(value)
    except Exception:
        return np.asarray(keras.ops.convert_to_numpy(value))


def device_value(value):
    """A Keras variable's current value as the backend's own tensor, on the device where it lives.

    What an in-process copy gives its twin: no transfer to the host and back, the twin's
    :func:`assign` (or :func:`initialize`) then copies it on that device. Valid until the variable
    changes (TensorFlow: a copy-on-write read; JAX: the immutable array; PyTorch: the live tensor),
    so the caller copies it before returning.
    """
    if isinstance(value, keras.Variable):
        value = value.value
    if isinstance(value, np.ndarray):
        return value
    name = backend_name()
    if name == "torch" and callable(getattr(value, "detach", None)):
        return value.detach()
    if name == "tensorflow" and callable(getattr(value, "value", None)):
        return value.value()  # a tf.Variable's read: a tensor on its device
    return value


def _torch_snapshot(tensor) -> np.ndarray:
    """One copy of a torch tensor, as numpy: numpy's copy on the CPU (:func:`_numpy_copy`), the transfer elsewhere."""
    tensor = tensor.detach()
    if tensor.device.type == "cpu":
        try:
            return _numpy_copy(tensor.numpy())
        except (TypeError, RuntimeError):  # bfloat16 and other types numpy lacks
            return np.asarray(keras.ops.convert_to_numpy(tensor.clone()))
    tensor = tensor.cpu()
    try:
        return tensor.numpy()  # a view of the transferred copy
    except (TypeError, RuntimeError):
        return np.asarray(keras.ops.convert_to_numpy(tensor))


def _numpy_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` made by numpy: one memcpy on the calling thread.

    PyTorch's CPU copies (``clone``, ``copy_``) split a large tensor across its intra-op
    threads, which wait for one another: on CPUs busy with other work one copy of 100 MiB
    took 0.65 s, numpy's 0.03 s.
    """
    return np.array(array, copy=True, order="C")


def _torch_view(tensor) -> np.ndarray:
    """A torch tensor as numpy without a copy where it lives on the CPU (a transfer elsewhere)."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        return _torch_snapshot(tensor)
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError):
        return _torch_snapshot(tensor)


def assign(variable, array) -> None:
    """Set a Keras variable (or a backend-native variable) to ``array`` (numpy or a tensor).

    A deferred variable (see :func:`is_uninitialized`) is created directly
    from ``array``. The variable never aliases ``array`` afterwards.
    """
    if is_uninitialized(variable):
        initialize(variable, array)
        return
    array = _native_byte_order(array)
    name = backend_name()
    if name == "jax" and isinstance(variable, keras.Variable):
        variable.assign(_jax_copy(array, variable.dtype))
    elif name == "torch" and _torch_copy_into(variable, array):
        return
    else:
        # TensorFlow assigns into the variable's own buffer, PyTorch copies
        # into it (Variable._direct_assign is copy_).
        variable.assign(array)


def is_uninitialized(variable) -> bool:
    """True for a Keras variable created in a ``StatelessScope`` and not yet given a value."""
    return isinstance(variable, keras.Variable) and getattr(variable, "_value", False) is None


def initialize(variable, value) -> None:
    """Give a deferred Keras variable its first value, without running its initializer.

    The variable gets storage of its own: ``value`` (numpy or a tensor) is
    converted with one copy.
    """
    value = _native_byte_order(value)
    name = backend_name()
    if name == "jax":
        value = _jax_copy(value, variable.dtype)
    elif name == "torch":
        value = _torch_copy(value, variable.dtype)
    # TensorFlow creates a tf.Variable, which holds its own copy.
    variable._initialize(value)


def _native_byte_order(value):
    """A numpy array in the machine's byte order (a payload written on a machine of the other order
    holds the other); anything else unchanged. PyTorch refuses the other order outright."""
    if isinstance(value, np.ndarray) and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value


def initialize_with_initializer(variable) -> None:
    """Run a deferred Keras variable's own initializer."""
    variable._deferred_initialize()


def _jax_copy(value, dtype):
    """A new JAX array: ``jnp.array`` copies by contract (``keras.ops.array`` is ``jnp.array``).

    A JAX array is copied too: training donates a variable's buffer to XLA,
    which would leave a second holder with a deleted array.
    """
    if isinstance(value, keras.Variable):
        value = value.value
    return keras.ops.array(value, dtype=dtype)


def _torch_copy(value, dtype):
    """A torch tensor that shares no memory with ``value``."""
    if isinstance(value, keras.Variable):
        value = value.value
    if callable(getattr(value, "detach", None)):  # a tensor or Parameter
        value = value.detach()
        tensor = keras.ops.convert_to_tensor(value, dtype=dtype)
        return tensor.clone() if _same_storage(tensor, value) else tensor
    tensor = keras.ops.convert_to_tensor(value, dtype=dtype)
    if isinstance(value, np.ndarray) and _overlaps(tensor, value):
        tensor = tensor.clone()  # Keras 3.15 copies numpy input; guard against a zero-copy conversion
    return tensor


def _torch_copy_into(variable, array) -> bool:
    """Copy a numpy ``array`` into a PyTorch variable's own CPU storage with numpy (:func:`_numpy_copy`'s
    reason), as Keras's ``assign`` would (``copy_``) but without its conversion to a tensor first (a
    second copy). False, having done nothing, where that does not apply: anything but a numpy array
    of the variable's shape and dtype, a variable elsewhere than on the CPU or of a type numpy lacks,
    within a ``StatelessScope``."""
    value = getattr(variable, "_value", None) if isinstance(variable, keras.Variable) else None
    if not isinstance(array, np.ndarray) or value is None or value.device.type != "cpu" or in_stateless_scope():
        return False  # in a StatelessScope, Keras's assign records the value instead of writing it
    try:
        storage = value.detach().numpy()
    except (TypeError, RuntimeError):
        return False
    if storage.dtype != array.dtype or storage.shape != array.shape:
        return False
    np.copyto(storage, array)
    return True


def _same_storage(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _overlaps(tensor, array: np.ndarray) -> bool:
    """True if a CPU torch tensor's memory overlaps ``array``'s."""
    if tensor.device.type != "cpu" or array.nbytes == 0:
        return False
    start = tensor.untyped_storage().data_ptr()
    end = start + tensor.untyped_storage().nbytes()
    low, high = _byte_bounds(array)
    return start < high and low < end
