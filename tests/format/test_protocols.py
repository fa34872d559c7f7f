"""Every pickle protocol works; protocol 5 hands every weight out of band."""

from __future__ import annotations

import io
import pickle

import keras
import numpy as np
import pytest
import zoo
from helpers import assert_same_state

import keras_pickle
from keras_pickle._wire.joined_stream import JoinedStream

pytestmark = pytest.mark.backends  # tests/run_all.py runs this file on every backend


@pytest.fixture(scope="module")
def model():
    return zoo.trained(zoo.functional)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_round_trips(model, protocol):
    data = pickle.dumps(model, protocol=protocol)
    assert_same_state(model, pickle.loads(data))
    assert_same_state(model, keras_pickle.loads(data))


def _weight_bytes(model) -> int:
    variables = list(model.variables) + list(model.optimizer.variables)
    return sum(keras.ops.convert_to_numpy(v).nbytes for v in variables)


def test_protocol_5_hands_every_variable_out_of_band():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512), keras.layers.Dense(256)])
    model.compile("adam", "mse")
    model.fit(np.ones((8, 256), "float32"), np.ones((8, 256), "float32"), verbose=0)

    buffers = []
    data = pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    n_variables = len(model.variables) + len(model.optimizer.variables)
    assert len(buffers) == n_variables
    out_of_band = sum(b.raw().nbytes for b in buffers)
    assert out_of_band == _weight_bytes(model)
    assert len(data) < 0.05 * out_of_band, f"{len(data)} in-band bytes for {out_of_band} weight bytes"

    restored = pickle.loads(data, buffers=buffers)
    assert_same_state(model, restored)
    restored_safe = keras_pickle.loads(data, buffers=buffers)
    assert_same_state(model, restored_safe)


def test_out_of_band_buffers_are_not_copies_of_the_stream():
    """Loading from out-of-band buffers must not need them in the stream."""
    model = zoo.trained(zoo.sequential)
    buffers = []
    data = keras_pickle.dumps(model, protocol=5, buffer_callback=buffers.append)
    with pytest.raises(keras_pickle.KerasUnpicklingError):
        keras_pickle.loads(data)  # the buffers are missing
    restored = keras_pickle.loads(data, buffers=[bytes(b.raw()) for b in buffers])
    assert_same_state(model, restored)


def test_protocol_5_without_callback_keeps_weights_in_band():
    model = zoo.trained(zoo.sequential)
    data = pickle.dumps(model, protocol=5)
    assert len(data) > _weight_bytes(model)
    assert_same_state(model, pickle.loads(data))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_dumps_returns_the_stream_dump_writes_to_a_file(protocol):
    """``dumps`` joins the stream once at the end instead of growing a BytesIO: same bytes as ``dump``."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(512), keras.layers.Dense(64)])
    model.compile("adam", "mse")
    model.fit(np.ones((4, 64), "float32"), np.ones((4, 64), "float32"), verbose=0)
    file = io.BytesIO()
    keras_pickle.dump(model, file, protocol)
    data = keras_pickle.dumps(model, protocol)
    assert type(data) is bytes
    assert data == file.getvalue()
    assert len(data) > _weight_bytes(model)  # the weights are in the stream, not views of the live variables
    assert_same_state(model, keras_pickle.loads(data))


def test_joined_stream_copies_writable_writes_and_keeps_large_immutable_ones_until_joined():
    stream = JoinedStream()
    small, large = bytearray(b"abc"), np.arange(1 << 15, dtype="float32")
    frozen_base = np.arange(1 << 15, dtype="float32")
    frozen = frozen_base.view()
    frozen.flags.writeable = False
    assert stream.write(b"head") == 4
    assert stream.write(small) == 3
    assert stream.write(pickle.PickleBuffer(large)) == large.nbytes
    assert stream.write(pickle.PickleBuffer(frozen)) == frozen.nbytes
    expected = b"headabc" + large.tobytes()
    small[:] = b"xyz"  # writable memory may change later in the dump: what was written stays written
    large[:] = -1
    frozen_base[:] = 7  # a read-only buffer is kept uncopied until the join (the one copy)
    assert stream.getvalue() == expected + frozen_base.tobytes()
    assert stream.getvalue() == expected + frozen_base.tobytes()  # joining again gives the same bytes


class _Fills:
    """Pickled after an array in one stream: its reducer overwrites the array, as a later object of a dump may."""

    def __init__(self, array, value):
        self.array, self.value = array, value

    def __reduce__(self):
        self.array[:] = self.value
        return str, ("filled",)


def test_joined_streams_pickler_keeps_writable_buffers_until_code_could_change_them():
    """The pickler keras_pickle.dumps uses for a model keeps a large writable buffer (a PyTorch variable's live
    memory, written as a PickleBuffer as a body's entries are) uncopied, so that the join is its one copy; before
    it saves any object whose saving may run code (a reducer; a class or function, whose lookup may run a
    metaclass's or an import hook), it copies what it kept, so what was written stays written. A plain Pickler on
    the same stream copies at once."""

    def floats(buffer) -> np.ndarray:
        return np.frombuffer(buffer, dtype="float32")

    kept = np.zeros(1 << 15, dtype="float32")
    stream = JoinedStream()
    stream.pickler(5, None).dump([pickle.PickleBuffer(kept), (1, "two", {3: [4.0]}, None, 2.5)])
    kept[:] = 1  # after the dump, before the join: the join reads the kept memory
    assert np.array_equal(floats(pickle.loads(stream.getvalue())[0]), kept)

    for code_may_run in (_Fills, str, len):  # a reducer; a class and a function saved by reference
        changed, later = np.zeros(1 << 15, dtype="float32"), np.zeros(1 << 15, dtype="float32")
        stream = JoinedStream()
        after = _Fills(changed, 2) if code_may_run is _Fills else code_may_run
        stream.pickler(5, None).dump([pickle.PickleBuffer(changed), after, pickle.PickleBuffer(later)])
        changed[:] = 2  # what code run by the object after it could have done
        later[:] = 3  # written after that object: kept until the join
        restored = pickle.loads(stream.getvalue())
        assert not floats(restored[0]).any() and (floats(restored[2]) == 3).all(), code_may_run

    copied_at_once = np.zeros(1 << 15, dtype="float32")
    stream = JoinedStream()
    pickle.Pickler(stream, 5).dump([pickle.PickleBuffer(copied_at_once)])
    copied_at_once[:] = 1
    assert not floats(pickle.loads(stream.getvalue())[0]).any()


class _YieldsThenZeroes:
    """Its reducer hands pickle the items of a list as a lazy iterator: the model, then, before the next item, code
    that zeroes the model's kernel; pickle calls no hook between two items."""

    def __init__(self, model):
        self.model = model

    def __reduce__(self):
        def items():
            yield self.model
            yield "saved"  # pickle takes two items before it saves the first
            kernel = self.model.layers[0].kernel
            kernel.assign(np.zeros(kernel.shape, kernel.dtype))
            yield "done"

        return list, (), None, items()


def test_dumps_keeps_the_values_written_when_a_lazy_iterator_changes_them_later():
    """keras_pickle.dumps keeps values uncopied until its join only for a model it reduces itself: anything else
    (here an object whose items come from a generator) is written with every value copied when it is written."""
    model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256)])
    before = keras.ops.convert_to_numpy(model.layers[0].kernel).copy()
    data = keras_pickle.dumps(_YieldsThenZeroes(model), protocol=5, checksum=True)
    restored, saved, note = keras_pickle.loads(data, safe_mode=False)  # the checksum, taken at capture, verifies
    assert (saved, note) == ("saved", "done") and not keras.ops.convert_to_numpy(model.layers[0].kernel).any()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(restored.layers[0].kernel), before)


class _ZeroesTheKernel:
    """Pickled after the model in one stream: its reducer overwrites the model's kernel mid-dump."""

    def __init__(self, model):
        self.model = model

    def __reduce__(self):
        kernel = self.model.layers[0].kernel
        kernel.assign(np.zeros(kernel.shape, kernel.dtype))
        return (str, ("done",))


def test_dumps_keeps_the_values_written_when_a_later_reducer_changes_them():
    """A PyTorch variable is read in band as a view of the live tensor: the stream copies it when written."""
    model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256)])
    before = keras.ops.convert_to_numpy(model.layers[0].kernel).copy()
    data = keras_pickle.dumps([model, _ZeroesTheKernel(model)], protocol=5, checksum=True)
    restored, note = keras_pickle.loads(data, safe_mode=False)  # the checksum, taken at capture, verifies
    assert note == "done" and not keras.ops.convert_to_numpy(model.layers[0].kernel).any()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(restored.layers[0].kernel), before)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "mixed_bfloat16"])
def test_variable_dtypes_travel_exactly(dtype):
    layer = keras.layers.Dense(3, dtype=dtype)
    layer.build((None, 2))
    layer.kernel.assign(np.arange(6).reshape(2, 3) / 7)
    for protocol in (2, 5):
        restored = pickle.loads(pickle.dumps(layer, protocol=protocol))
        for a, b in zip(layer.variables, restored.variables):
            assert str(a.dtype) == str(b.dtype)
            assert keras.ops.convert_to_numpy(a).tobytes() == keras.ops.convert_to_numpy(b).tobytes()
