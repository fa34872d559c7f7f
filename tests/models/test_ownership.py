"""Ownership of values: dumps hands out snapshots, a loaded model or a copy owns its storage.

* The protocol-5 buffers ``dumps`` hands out never change when the original
  trains or is assigned afterwards (a backend whose variables are updated in
  place, PyTorch, must not hand out views of them).
* A model loaded from buffers or from in-band bytes never aliases them: the
  caller may overwrite them (a JAX array created from numpy on the CPU can
  share its memory).
* ``copy.deepcopy`` shares no storage with the original, in either direction.

Every check mutates and compares values; none inspects pointers, so the same
test holds on every backend.
"""

from __future__ import annotations

import copy
import pickle

import keras
import numpy as np
import pytest

import keras_pickle

pytestmark = pytest.mark.backends

FILL = 0x5A  # float32 0x5A5A5A5A is about 1.5e16: no variable holds it


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 1)).astype("float32")


def _train_step(model):
    x, y = _data()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)


def _model():
    """Dense + BatchNormalization + Dropout, trained one Adam step: trainable, non-trainable and optimizer variables."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    _train_step(model)
    return model


def _variables(model) -> list:
    return list(model.variables) + list(model.optimizer.variables)


def _values(model) -> list[tuple[str, np.ndarray]]:
    """An owned numpy copy of every variable's value (convert_to_numpy may alias the variable)."""
    return [(v.path, np.array(keras.ops.convert_to_numpy(v.value), copy=True)) for v in _variables(model)]


def _changed(before: list[tuple[str, np.ndarray]], after: list[tuple[str, np.ndarray]]) -> list[str]:
    assert len(before) == len(after)
    return [
        path
        for (path, a), (_, b) in zip(before, after)
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes()
    ]


def _assert_unchanged_by(mutate, observed, what: str) -> None:
    """Run ``mutate()``; every variable of ``observed`` must keep its value."""
    values = _values(observed)
    mutate()
    changed = _changed(values, _values(observed))
    assert not changed, f"{len(changed)} of {len(values)} variables of {what}: {changed}"


def _train_and_assign(model) -> None:
    """One more training step, then a new value for every variable, in place where the backend does so."""
    _train_step(model)
    for v in _variables(model):
        old = np.asarray(keras.ops.convert_to_numpy(v.value))
        v.assign((old + 1).astype(old.dtype))


def _overwrite(buffer) -> None:
    memoryview(buffer).cast("B")[:] = bytes([FILL]) * memoryview(buffer).nbytes


def _aligned_copy(raw: memoryview, alignment: int = 64) -> np.ndarray:
    """A writable copy of ``raw`` at an address backends may adopt without copying (JAX, TensorFlow)."""
    block = np.empty(raw.nbytes + alignment, dtype=np.uint8)
    start = -block.ctypes.data % alignment
    array = block[start : start + raw.nbytes]
    array[:] = np.frombuffer(raw, dtype=np.uint8)
    return array


def _owned_buffers(buffers, kind: str) -> list:
    if kind == "bytearray":
        return [bytearray(b.raw()) for b in buffers]
    if kind == "aligned":
        return [_aligned_copy(b.raw()) for b in buffers]
    return [np.frombuffer(bytearray(b.raw()), dtype=np.uint8) for b in buffers]


def _loads(how: str, data, buffers=None):
    if how == "pickle":
        return pickle.loads(data, buffers=buffers)
    return keras_pickle.loads(data, buffers=buffers)


# --------------------------------------------------------------------------
# (a) dumps hands out snapshots
# --------------------------------------------------------------------------


@pytest.mark.parametrize("writer", [pickle.dumps, keras_pickle.dumps])
def test_buffers_from_dumps_are_a_snapshot(writer):
    model = _model()
    values = _values(model)
    buffers = []
    data = writer(model, protocol=5, buffer_callback=buffers.append)
    assert buffers
    handed_out = [bytes(b.raw()) for b in buffers]

    _train_and_assign(model)
    assert _changed(values, _values(model)), "the test did not change the original"

    changed = [i for i, (b, raw) in enumerate(zip(buffers, handed_out)) if bytes(b.raw()) != raw]
    assert not changed, f"{len(changed)} of {len(buffers)} buffers changed with the original: {changed}"
    restored = pickle.loads(data, buffers=buffers)
    assert not _changed(values, _values(restored))


@pytest.mark.parametrize("writer", ["pickle 5", "pickle 4", "keras_pickle 5"])
def test_in_band_payload_from_dumps_is_a_snapshot(writer):
    """In band, the values are copied into the stream before dumps returns: PyTorch's are read
    without a clone then (keras_pickle.dumps knows there is no buffer_callback; protocol 4 copies
    each value into bytes), and what was pickled is still what loads."""
    model = _model()
    values = _values(model)
    dumps = keras_pickle.dumps if writer.startswith("keras_pickle") else pickle.dumps
    data = dumps(model, protocol=int(writer[-1]))  # protocol 5: PickleBuffers serialized in band
    _train_and_assign(model)
    assert not _changed(values, _values(pickle.loads(data)))


# --------------------------------------------------------------------------
# (b) a model loaded from buffers owns its storage
# --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["pickle", "keras_pickle"])
@pytest.mark.parametrize("kind", ["bytearray", "numpy", "aligned"])
def test_loaded_model_does_not_alias_the_buffers(how, kind):
    model = _model()
    buffers = []
    data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    owned = _owned_buffers(buffers, kind)
    loaded = _loads(how, data, buffers=owned)
    assert not _changed(_values(model), _values(loaded))

    def overwrite_every_buffer():
        for buffer in owned:
            _overwrite(buffer)

    _assert_unchanged_by(overwrite_every_buffer, loaded, "the loaded model alias the caller's buffers")


# --------------------------------------------------------------------------
# (c) ... or from in-band bytes
# --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["pickle", "keras_pickle"])
@pytest.mark.parametrize("protocol", [4, 5])
def test_loaded_model_does_not_alias_in_band_bytes(how, protocol):
    model = _model()
    data = bytearray(pickle.dumps(model, protocol=protocol))
    loaded = _loads(how, data)
    assert not _changed(_values(model), _values(loaded))
    _assert_unchanged_by(lambda: _overwrite(data), loaded, "the loaded model alias the payload bytes")


def test_loaded_model_does_not_alias_another_load():
    """Two loads of one payload (and the buffers they share) are independent."""
    model = _model()
    buffers = []
    data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    first, second = pickle.loads(data, buffers=buffers), pickle.loads(data, buffers=buffers)
    values = _values(second)
    _train_and_assign(first)
    assert not _changed(values, _values(second))


# --------------------------------------------------------------------------
# (d) deepcopy shares no storage
# --------------------------------------------------------------------------


def test_deepcopy_shares_no_storage_with_the_original():
    model = _model()
    twin = copy.deepcopy(model)
    assert not _changed(_values(model), _values(twin))
    _assert_unchanged_by(lambda: _train_and_assign(model), twin, "the copy changed with the original")


def test_original_shares_no_storage_with_its_deepcopy():
    model = _model()
    twin = copy.deepcopy(model)
    _assert_unchanged_by(lambda: _train_and_assign(twin), model, "the original changed with its copy")


# --------------------------------------------------------------------------
# Layer-held state: what save_own_variables writes and load_own_variables reads
# --------------------------------------------------------------------------


class HeldTable(keras.layers.Layer):
    """Keeps a numpy table outside Keras variables and keeps what load_own_variables hands it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.table = np.arange(1.0, 5.0, dtype="float32")

    def call(self, x):
        return x * self.table

    def save_own_variables(self, store):
        store["table"] = self.table

    def load_own_variables(self, store):
        self.table = store["table"]


class AssignsOnLoad(keras.layers.Layer):
    """Loads its weight with ``variable.assign`` from the store, as Keras's own hooks do."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.w

    def save_own_variables(self, store):
        store["w"] = self.w

    def load_own_variables(self, store):
        self.w.assign(store["w"])


def _hooked_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), HeldTable(), AssignsOnLoad(), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    _train_step(model)
    return model


def _layer_state(model) -> list[tuple[str, np.ndarray]]:
    return [("table", np.array(model.layers[0].table, copy=True))] + _values(model)


def test_buffers_from_dumps_snapshot_layer_held_state():
    model = _hooked_model()
    buffers = []
    pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    handed_out = [bytes(b.raw()) for b in buffers]

    model.layers[0].table[:] = -1.0  # the layer's own storage, changed in place
    _train_and_assign(model)

    changed = [i for i, (b, raw) in enumerate(zip(buffers, handed_out)) if bytes(b.raw()) != raw]
    assert not changed, f"{len(changed)} of {len(buffers)} buffers changed with the original: {changed}"


@pytest.mark.parametrize("protocol", [4, 5])
def test_layer_hooks_do_not_get_the_callers_memory(protocol):
    model = _hooked_model()
    if protocol == 5:
        buffers = []
        data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
        owned = _owned_buffers(buffers, "aligned")
        loaded = pickle.loads(data, buffers=owned)
    else:
        owned = [bytearray(pickle.dumps(model, protocol=4))]
        loaded = pickle.loads(owned[0])
    values = _layer_state(loaded)
    assert not _changed(_layer_state(model), values)

    for buffer in owned:
        _overwrite(buffer)

    changed = _changed(values, _layer_state(loaded))
    assert not changed, f"{len(changed)} of {len(values)} loaded values alias the caller's memory: {changed}"


@pytest.mark.parametrize("offset", [0, 1, 3, 8])
def test_a_loaded_model_trains_in_place_wherever_the_payload_bytes_sit(offset):
    """Loaded variables get memory of their own, aligned as the backend's kernels need, whatever the
    address of the buffers they were read from (TensorFlow aborts on an unaligned variable buffer)."""
    model = _model()
    buffers = []
    data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    shifted = []
    for buffer in buffers:
        raw = buffer.raw()
        block = bytearray(raw.nbytes + offset)
        block[offset:] = raw
        shifted.append(memoryview(block)[offset:])
    loaded = pickle.loads(data, buffers=shifted)
    reference = pickle.loads(data, buffers=buffers)
    assert not _changed(_values(model), _values(loaded))
    for twin in (reference, loaded):  # updates in place: an optimizer step, then assign_add on every variable
        keras.utils.set_random_seed(1)  # unseeded Dropout on PyTorch draws from torch's global generator
        twin.fit(*_data(), batch_size=8, epochs=1, verbose=0, shuffle=False)
        for v in _variables(twin):
            v.assign_add(keras.ops.ones(v.shape, dtype=v.dtype))
    assert _changed(_values(model), _values(loaded))
    assert not _changed(_values(reference), _values(loaded))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype="float32").reshape(3, 4),
        np.arange(12, dtype=">f4").reshape(3, 4),  # another byte order
        np.arange(24, dtype="float32").reshape(3, 8)[:, ::2],  # not contiguous
        np.arange(12, dtype="int64").reshape(3, 4)[::-1],
    ],
    ids=["native", "big-endian", "strided", "reversed-int64"],
)
def test_a_deferred_variable_takes_any_numpy_layout_as_its_value(array):
    """A loaded variable gets its value whatever the layout of the array read from the payload: byte
    order (a payload written on a machine of the other order), strides, or a dtype the fast path skips."""
    from keras_pickle._keras3 import backend as _backend
    from keras_pickle._keras3 import deferred as _deferred

    with _deferred.deferred_variables() as created:
        variable = keras.Variable(
            initializer="zeros", shape=array.shape, dtype=array.dtype.newbyteorder("="), trainable=False
        )
    assert len(created) == 1 and created[0] is variable and _backend.is_uninitialized(variable)
    _backend.initialize(variable, array)
    expected = array.astype(array.dtype.newbyteorder("="))
    assert np.array_equal(keras.ops.convert_to_numpy(variable.value), expected)
    variable.assign_add(keras.ops.ones(array.shape, dtype=variable.dtype))
    assert np.array_equal(keras.ops.convert_to_numpy(variable.value), expected + 1)
