"""install(allow=...): metrics, callbacks and unbuilt optimizers pickle with their complete state."""

from __future__ import annotations

import pickle

import keras
import numpy as np
import pytest
import zoo

import keras_pickle
from keras_pickle import _allow
from keras_pickle._protocol import opt_in as _opt_in


@pytest.fixture(autouse=True)
def reset_allow():
    yield
    keras_pickle.install(allow=())


def values(obj):
    return [
        (
            v.path,
            keras.ops.convert_to_numpy(v).dtype.str,
            keras.ops.convert_to_numpy(v).shape,
            keras.ops.convert_to_numpy(v).tobytes(),
        )
        for v in obj.variables
    ]


def labels_and_scores(seed, n=12, classes=3):
    rng = np.random.default_rng(seed)
    y_true = np.eye(classes, dtype="float32")[rng.integers(0, classes, n)]
    return y_true, rng.random((n, classes)).astype("float32")


class RunningMax(keras.metrics.Metric):
    """A custom metric with its own variable and a constructor argument."""

    def __init__(self, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale
        self.peak = self.add_variable(shape=(), initializer="zeros", name="peak")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.peak.assign(keras.ops.maximum(self.peak, keras.ops.max(y_pred) * self.scale))

    def result(self):
        return self.peak

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


class NumpyTally(keras.metrics.Metric):
    """A custom metric that keeps running state in numpy attributes, not Keras variables."""

    def __init__(self, classes=3, **kwargs):
        super().__init__(**kwargs)
        self.classes = classes
        self.seen = np.zeros(classes)
        self.batches = []

    def update_state(self, y_true, y_pred, sample_weight=None):
        predicted = np.argmax(keras.ops.convert_to_numpy(y_pred).reshape(-1, self.classes), axis=-1)
        self.seen += np.bincount(predicted, minlength=self.classes)
        self.batches.append(keras.ops.convert_to_numpy(y_pred).astype("float32"))

    def result(self):
        return float(self.seen.max())

    def get_config(self):
        return {**super().get_config(), "classes": self.classes}


METRICS = {
    "Mean": lambda: keras.metrics.Mean(),
    "AUC": lambda: keras.metrics.AUC(num_thresholds=20),
    "AUC multi_label (variables created on first update)": lambda: keras.metrics.AUC(multi_label=True),
    "F1Score (variables created on first update)": lambda: keras.metrics.F1Score(average="macro"),
    "R2Score (some variables created on first update)": lambda: keras.metrics.R2Score(),
    "custom RunningMax": lambda: RunningMax(scale=2.0),
}


@pytest.mark.parametrize("name", sorted(METRICS))
@pytest.mark.parametrize("protocol", [2, 5])
def test_metrics_keep_their_accumulated_state(name, protocol):
    keras_pickle.install(allow=("metrics",))
    metric = METRICS[name]()
    y_true, y_pred = labels_and_scores(0)
    if name == "Mean":
        metric.update_state(y_pred)
    else:
        metric.update_state(y_true, y_pred)
    restored = pickle.loads(pickle.dumps(metric, protocol=protocol))
    assert type(restored) is type(metric) and restored.get_config() == metric.get_config()
    assert values(restored) == values(metric) and len(values(metric)) > 0
    assert np.array_equal(keras.ops.convert_to_numpy(restored.result()), keras.ops.convert_to_numpy(metric.result()))
    # Both go on accumulating identically, and share nothing.
    y_true, y_pred = labels_and_scores(1)
    for m in (metric, restored):
        m.update_state(y_pred) if name == "Mean" else m.update_state(y_true, y_pred)
    assert values(restored) == values(metric)
    assert not {id(v) for v in metric.variables} & {id(v) for v in restored.variables}


def test_metric_variables_travel_out_of_band_with_protocol_5():
    keras_pickle.install(allow=("metrics",))
    metric = keras.metrics.AUC(num_thresholds=1000)
    metric.update_state([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3])
    buffers = []
    data = pickle.dumps(metric, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == len(metric.variables) == 4
    assert sum(memoryview(b).nbytes for b in buffers) == 16000 and len(data) < 2000
    assert keras_pickle.inspect(data).kind == "metric"
    restored = pickle.loads(data, buffers=buffers)
    assert values(restored) == values(metric)


def test_unbuilt_optimizers_pickle_and_built_ones_stay_refused():
    keras_pickle.install(allow=("metrics", "callbacks", "optimizers"))
    optimizer = keras.optimizers.SGD(learning_rate=0.25, momentum=0.5)
    optimizer.iterations.assign(7)
    data = pickle.dumps(optimizer)
    assert keras_pickle.inspect(data).kind == "optimizer"
    restored = pickle.loads(data)
    assert restored.get_config() == optimizer.get_config() and not restored.built
    assert values(restored) == values(optimizer) and int(restored.iterations) == 7

    model = zoo.trained(zoo.sequential)
    with pytest.raises(keras_pickle.PickleRefusedError, match="Refusing to pickle keras.optimizers.Adam: it is built"):
        pickle.dumps(model.optimizer)
    assert b"keras_pickle._format" in pickle.dumps(model)  # the model carries its optimizer


def test_callbacks_keep_every_attribute_and_their_model():
    keras_pickle.install(allow=("callbacks",))
    model = zoo.trained(zoo.sequential)
    stopping = keras.callbacks.EarlyStopping(monitor="loss", patience=2, restore_best_weights=True)
    x, y = zoo.data()
    model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=[stopping])
    assert stopping.best_weights is not None
    model2, stopping2 = pickle.loads(pickle.dumps((model, stopping)))
    assert type(stopping2) is keras.callbacks.EarlyStopping
    assert sorted(vars(stopping2)) == sorted(vars(stopping))
    for name in ("monitor", "patience", "wait", "stopped_epoch", "best", "best_epoch", "params"):
        assert getattr(stopping2, name) == getattr(stopping, name), name
    assert all(np.array_equal(a, b) for a, b in zip(stopping2.best_weights, stopping.best_weights))
    assert stopping2.model is model2  # pickled once, shared as before


def test_a_callback_attribute_that_cannot_be_pickled_is_named(tmp_path):
    keras_pickle.install(allow=("callbacks",))

    class Logger(keras.callbacks.Callback):
        def __init__(self, path):
            super().__init__()
            self.every = 2
            self.log_file = open(path, "w")  # noqa: SIM115

    logger = Logger(tmp_path / "log.txt")
    try:
        with pytest.raises(keras_pickle.KerasPicklingError, match="attribute 'log_file'") as info:
            pickle.dumps(logger)
        assert "TextIOWrapper" in str(info.value)
    finally:
        logger.log_file.close()


def test_history_pickles_by_default():
    model = zoo.trained(zoo.sequential)
    x, y = zoo.data()
    history = model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    model2, history2 = pickle.loads(pickle.dumps((model, history)))
    assert history2.history == history.history and history2.epoch == history.epoch == [0, 1]
    assert history2.model is model2
    with pytest.raises(keras_pickle.PickleRefusedError, match="keras.callbacks.EarlyStopping"):
        pickle.dumps(keras.callbacks.EarlyStopping())


def test_allow_is_checked_kept_and_reset():
    with pytest.raises(TypeError, match=r"allow=\('metrics',\)"):
        keras_pickle.install(allow="metrics")
    with pytest.raises(ValueError, match="'losses'"):
        keras_pickle.install(allow=("losses",))
    keras_pickle.install(allow=("metrics",))
    keras_pickle.install()  # keeps the setting (keras_pickle.dumps calls install())
    keras_pickle.dumps(keras.metrics.Mean())
    keras_pickle.install(allow=())
    accumulated = keras.metrics.Mean()
    accumulated.update_state([1.0])
    with pytest.raises(keras_pickle.PickleRefusedError):
        pickle.dumps(accumulated)  # a fresh one travels by config without allow=: it loses nothing
    keras_pickle.install(allow=("metrics",))
    keras_pickle.uninstall()
    try:
        assert _opt_in.allowed() == frozenset()
    finally:
        keras_pickle.install()


def test_a_process_that_loads_an_allowed_metric_can_send_it_back(monkeypatch):
    keras_pickle.install(allow=("metrics",))
    metric = keras.metrics.Mean()
    metric.update_state([4.0, 5.0])
    data = pickle.dumps(metric)
    # A worker: nothing allowed, and the user never called install(allow=...) there.
    monkeypatch.setattr(_opt_in, "_allowed", frozenset())
    monkeypatch.setattr(_opt_in, "_explicit", False)
    restored = pickle.loads(data)
    assert "metrics" in _opt_in.allowed()
    assert float(pickle.loads(pickle.dumps(restored)).result()) == 4.5


# --------------------------------------------------------------------------
# Safe mode
# --------------------------------------------------------------------------


def test_safe_mode_loads_allowed_metrics_and_callbacks():
    keras_pickle.install(allow=("metrics", "callbacks"))
    model = zoo.trained(zoo.sequential)
    stopping = keras.callbacks.EarlyStopping(monitor="loss", patience=2, restore_best_weights=True)
    x, y = zoo.data()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[stopping])
    metric = keras.metrics.AUC(num_thresholds=20)
    metric.update_state(*labels_and_scores(0))

    data = keras_pickle.dumps((model, stopping, metric))
    # Callbacks act on files (a checkpoint's path, a backup directory): safe mode loads them on request only.
    with pytest.raises(keras_pickle.UnsafePayloadError, match=r"allow_callbacks=True"):
        keras_pickle.loads(data)
    model2, stopping2, metric2 = keras_pickle.loads(data, allow_callbacks=True)
    assert stopping2.model is model2 and stopping2.wait == stopping.wait
    assert all(np.array_equal(a, b) for a, b in zip(stopping2.best_weights, stopping.best_weights))
    assert type(metric2) is keras.metrics.AUC and values(metric2) == values(metric)


class Forged:
    """Pickles as ``function(*args)``: what a hostile payload can ask for."""

    def __init__(self, function, *args):
        self.reduced = (function, args)

    def __reduce__(self):
        return self.reduced


def forged_metric_state(**changes):
    keras_pickle.install(allow=("metrics",))
    metric = keras.metrics.Mean()
    metric.update_state([1.0, 2.0])
    function, (header, body, state) = metric.__reduce_ex__(5)
    assert function is _allow.restore_with_state
    return pickle.dumps(Forged(function, header, body, {**state, **changes}), protocol=5)


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"attributes": {"__class__": 1}}, id="dunder attribute"),
        pytest.param({"attributes": {"name": keras.layers.Dense}}, id="attribute that is not plain data"),
        pytest.param({"variable_attributes": {"total": 99}}, id="variable index out of range"),
        pytest.param({"kind": "layers"}, id="unknown kind"),
        pytest.param({"variables": "not a list"}, id="variables not a list"),
    ],
)
def test_safe_mode_refuses_forged_metric_state(changes):
    data = forged_metric_state(**changes)
    with pytest.raises(keras_pickle.KerasUnpicklingError, match="Corrupt keras_pickle payload: the saved state"):
        keras_pickle.loads(data)


@pytest.mark.parametrize(
    "cls, attributes, message",
    [
        (keras.layers.Dense, {}, "is not a Keras callback class"),
        (keras.callbacks.EarlyStopping, {"__dict__": {}}, "not a dict of names"),
    ],
)
def test_safe_mode_refuses_forged_callbacks(cls, attributes, message):
    data = pickle.dumps(Forged(_allow.restore_callback, cls, attributes))
    with pytest.raises(keras_pickle.KerasUnpicklingError, match=message):
        keras_pickle.loads(data, allow_callbacks=True)  # past the opt-in, the reconstructor's own checks


@pytest.mark.parametrize("safe_mode", [False, True])
def test_numpy_attributes_of_a_metric_travel_with_it(safe_mode):
    keras_pickle.install(allow=("metrics",))
    metric = NumpyTally()
    metric.update_state(None, np.eye(3)[[0, 2, 2]])
    restored = keras_pickle.loads(keras_pickle.dumps(metric), safe_mode=safe_mode)
    assert restored.seen.tolist() == [1.0, 0.0, 2.0] and restored.seen.dtype == metric.seen.dtype
    assert len(restored.batches) == 1 and np.array_equal(restored.batches[0], metric.batches[0])
    assert restored.seen is not metric.seen


def test_a_tensorboard_writer_is_named_under_allow(tmp_path):
    keras_pickle.install(allow=("callbacks",))
    model = zoo.trained(zoo.sequential)
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path))
    board.set_model(model)
    assert board._train_writer is not None  # opens the writer, as fit does
    with pytest.raises(keras_pickle.KerasPicklingError, match=r"attribute '_writers' of keras.callbacks.TensorBoard"):
        pickle.dumps(board)
