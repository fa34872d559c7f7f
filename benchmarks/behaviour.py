"""What survives pickling: Keras's built-in ``__reduce__`` vs keras_pickle, side by side.

Each check runs in this one process, first with keras_pickle uninstalled (Keras's own path), then
installed, and prints one markdown row per check; a check that needs a process without the custom
class (a worker's situation) loads the payload in a fresh interpreter::

    python -m benchmarks behaviour
"""

from __future__ import annotations

import copy
import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile

import keras
import numpy as np

import keras_pickle
from benchmarks import common
from benchmarks.models import custom_layer_model


def fresh_process_load(payload: bytes) -> str:
    """Load ``payload`` in a new interpreter; 'yes' or the error's last line."""
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        f.write(payload)
    code = f"import pickle; pickle.loads(open({f.name!r}, 'rb').read()); print('yes')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    os.unlink(f.name)
    if result.returncode == 0:
        return "yes"
    lines = [line for line in result.stderr.splitlines() if "Could not locate" in line or "Error" in line]
    located = [line for line in lines if "Could not locate" in line]
    return "no: " + ((located or lines or ["failed"])[-1].split(". ")[0][-70:])


def same_variables(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.variables, b.variables))


def checks() -> dict:
    def protocol_0():
        pickle.loads(pickle.dumps(custom_layer_model(), protocol=0))
        return "yes"

    def out_of_band():
        data, buffers = common.dumps(custom_layer_model())
        return f"{len(buffers)} buffers, {len(data) / 1e3:.1f} kB in band"

    def metric_state():
        metric = keras.metrics.Mean()
        metric.update_state([1.0, 2.0])
        return f"{float(pickle.loads(pickle.dumps(metric)).result())} (expected 1.5)"

    def optimizer_state():
        optimizer = custom_layer_model().optimizer
        restored = pickle.loads(pickle.dumps(optimizer))
        return f"iterations {int(restored.iterations)} of {int(optimizer.iterations)}, built={restored.built}"

    def training_continues():
        model = custom_layer_model(custom=False)
        twin = copy.deepcopy(model)
        x = np.random.default_rng(1).normal(size=(16, 4)).astype("float32")
        for m in (model, twin):
            m.fit(x, np.ones((16, 8), "float32"), shuffle=False, verbose=0)
        return "yes" if same_variables(model, twin) else "no: weights differ (Dropout seed state lost)"

    def dask_ships():
        from distributed.protocol import deserialize, serialize

        model = custom_layer_model()
        header, frames = serialize(model, on_error="raise")  # what client.submit / scatter do
        same = same_variables(model, deserialize(header, frames))
        return f"yes, {len(frames) - 1} zero-copy weight frames" if same else "no: weights differ"

    def dask_token():
        from dask.base import tokenize

        model = custom_layer_model()
        same = tokenize(model, ensure_deterministic=True) == tokenize(copy.deepcopy(model), ensure_deterministic=True)
        return "yes" if same else "no: a copy gets another token"

    found = {
        "custom layer loads in a fresh process": lambda: fresh_process_load(pickle.dumps(custom_layer_model())),
        "protocol 0 works": protocol_0,
        "protocol 5 out-of-band weights": out_of_band,
        "Mean metric of [1, 2] after pickling": metric_state,
        "standalone optimizer after pickling": optimizer_state,
        "deepcopy (Dense+Dropout) trains bit-identically": training_continues,
    }
    if importlib.util.find_spec("distributed") is not None:
        found["Dask sends the model to a worker"] = dask_ships
        found["Dask tokenize(model) deterministic, same for a copy"] = dask_token
    return found


def attempt(check) -> str:
    try:
        return check()
    except keras_pickle.PickleRefusedError:
        return "refused: PickleRefusedError says why and what to do"
    except Exception as e:
        return f"no: {type(e).__name__}: {str(e).splitlines()[0][:60]}"


def main(argv: list[str] | None = None) -> int:
    rows = []
    for name, check in checks().items():
        outcomes = []
        for impl in common.IMPLS:
            common.use(impl)
            outcomes.append(attempt(check))
        rows.append([name, *outcomes])
    header = ["check", f"Keras {keras.__version__} built-in", f"keras_pickle {keras_pickle.__version__}"]
    common.table("What survives pickling", header, rows)
    return 0
