"""What survives pickling: Keras's built-in ``__reduce__`` vs keras_pickle, side by side.

Each check runs in this one process, first with keras_pickle uninstalled
(Keras's own path), then installed, and prints one table row per check:

    python benchmarks/behaviour.py

Checks that need a process without the custom class (the usual situation
in a worker) load the payload in a fresh interpreter.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_pickle  # noqa: E402
from keras_pickle.demo import Gate  # noqa: E402  (an unregistered custom layer)


def model_with_custom_layer(custom: bool = True) -> keras.Model:
    keras.utils.set_random_seed(0)
    last = Gate() if custom else keras.layers.Dense(8)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(0.3, seed=1), last])
    model.compile("adam", "mse")
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    model.fit(x, np.ones((16, 8), "float32"), verbose=0)
    return model


def fresh_process_load(payload: bytes) -> str:
    """Load ``payload`` in a new interpreter; return 'yes' or the error's last line."""
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        f.write(payload)
    code = f"import pickle; pickle.loads(open({f.name!r}, 'rb').read()); print('yes')"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    os.unlink(f.name)
    if result.returncode == 0:
        return "yes"
    lines = [line for line in result.stderr.splitlines() if "Could not locate" in line or "Error" in line]
    located = [line for line in lines if "Could not locate" in line]
    return "no: " + ((located or lines or ["failed"])[-1].split(". ")[0][-70:])


def attempt(function) -> str:
    try:
        return function()
    except keras_pickle.PickleRefusedError:
        return "refused: PickleRefusedError says why and what to do"
    except Exception as e:
        return f"no: {type(e).__name__}: {str(e).splitlines()[0][:60]}"


def checks() -> dict[str, object]:
    def fresh():
        return fresh_process_load(pickle.dumps(model_with_custom_layer()))

    def protocol_0():
        model = model_with_custom_layer()
        pickle.loads(pickle.dumps(model, protocol=0))
        return "yes"

    def out_of_band():
        buffers = []
        data = pickle.dumps(model_with_custom_layer(), protocol=5, buffer_callback=buffers.append)
        return f"{len(buffers)} buffers, {len(data) / 1e3:.1f} kB in band"

    def metric_state():
        metric = keras.metrics.Mean()
        metric.update_state([1.0, 2.0])
        return f"{float(pickle.loads(pickle.dumps(metric)).result())} (expected 1.5)"

    def optimizer_state():
        optimizer = model_with_custom_layer().optimizer
        restored = pickle.loads(pickle.dumps(optimizer))
        return f"iterations {int(restored.iterations)} of {int(optimizer.iterations)}, built={restored.built}"

    def training_continues():
        model = model_with_custom_layer(custom=False)
        twin = copy.deepcopy(model)
        x = np.random.default_rng(1).normal(size=(16, 4)).astype("float32")
        for m in (model, twin):
            m.fit(x, np.ones((16, 8), "float32"), shuffle=False, verbose=0)
        same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(model.variables, twin.variables))
        return "yes" if same else "no: weights differ (Dropout seed state lost)"

    def dask_ships():
        from distributed.protocol import deserialize, serialize

        model = model_with_custom_layer()
        header, frames = serialize(model, on_error="raise")  # what client.submit / scatter do
        restored = deserialize(header, frames)
        same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(model.variables, restored.variables))
        return f"yes, {len(frames) - 1} zero-copy weight frames" if same else "no: weights differ"

    def dask_token():
        from dask.base import tokenize

        model = model_with_custom_layer()
        same = tokenize(model, ensure_deterministic=True) == tokenize(copy.deepcopy(model), ensure_deterministic=True)
        return "yes" if same else "no: a copy gets another token"

    dask = {}
    if importlib.util.find_spec("distributed") is not None:
        dask = {
            "Dask sends the model to a worker": dask_ships,
            "Dask tokenize(model) deterministic, same for a copy": dask_token,
        }

    return {
        "custom layer loads in a fresh process": fresh,
        "protocol 0 works": protocol_0,
        "protocol 5 out-of-band weights": out_of_band,
        "Mean metric of [1, 2] after pickling": metric_state,
        "standalone optimizer after pickling": optimizer_state,
        "deepcopy (Dense+Dropout) trains bit-identically": training_continues,
        **dask,
    }


def main() -> int:
    rows = []
    for name, check in checks().items():
        keras_pickle.uninstall()
        keras_result = attempt(check)
        keras_pickle.install()
        ours = attempt(check)
        rows.append((name, keras_result, ours))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    header = ("check", f"Keras {keras.__version__} built-in", f"keras_pickle {keras_pickle.__version__}")
    widths = [max(w, len(h)) for w, h in zip(widths, header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
