"""How many times one ``dumps`` (and one ``loads``) walks the model, and what per-call overhead costs.

A walk is a call that visits every layer of the model: Keras's ``Layer._flatten_layers`` and
``Layer.variables`` (which walks the layers itself), counted on the model being pickled and on
its layers (not on optimizers or metrics), and keras_pickle's own layer walkers
(:data:`WALKERS`). Then the 3-layer
MLP with Adam, dumps + loads, Keras's own pickling (``keras_pickle.uninstall()``) against
keras_pickle's, best of ``--repeat``, in one process:

    python benchmarks/walks.py [--repeat 50]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib
import os
import pickle
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras.src.layers.layer import Layer  # noqa: E402

import keras_pickle  # noqa: E402

WALKERS = [
    ("keras_pickle._keras3.names", "_walk_layers"),
    ("keras_pickle._capture.custom_objects", "_live_index"),
]
"""keras_pickle's functions that walk a model's layers themselves (those that exist are counted)."""


def mlp() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(32), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).random((32, 16), dtype=np.float32)
    model.fit(x, x[:, :1], epochs=1, verbose=0)
    return model


@contextlib.contextmanager
def counting_walks(model: keras.Model):
    """Within: ``counts[name]`` is how often ``model`` (or one of its layers) was walked, by entry point."""
    counts: collections.Counter = collections.Counter()
    watched = {id(layer) for layer in model._flatten_layers(include_self=True, recursive=True)}
    flatten, variables = Layer._flatten_layers, Layer.variables

    def counted_flatten(self, *args, **kwargs):
        if id(self) in watched:
            counts[f"_flatten_layers of {'the model' if self is model else 'a layer'}"] += 1
        return flatten(self, *args, **kwargs)

    def counted_variables(self):
        if self is model:
            counts["model.variables"] += 1
        return variables.fget(self)

    def counted_walker(name, function):
        def walker(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return walker

    patched = []
    for module_name, name in WALKERS:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(module_name)
            if hasattr(module, name):
                patched.append((module, name, getattr(module, name)))
                setattr(module, name, counted_walker(f"{module_name}.{name}", getattr(module, name)))
    Layer._flatten_layers = counted_flatten
    Layer.variables = property(counted_variables)
    try:
        yield counts
    finally:
        Layer._flatten_layers, Layer.variables = flatten, variables
        for module, name, function in patched:
            setattr(module, name, function)


def best(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    keras_pickle.install()
    model = mlp()
    with counting_walks(model) as counts:
        data = pickle.dumps(model)
    print(f"walks of the model per dumps: {sum(counts.values())} {dict(counts)}")
    loaded = pickle.loads(data)
    with counting_walks(loaded) as counts:
        pickle.dumps(loaded)
    print(f"walks of a loaded model per dumps: {sum(counts.values())}")

    def round_trip() -> None:
        pickle.loads(pickle.dumps(model, protocol=5))

    ours = best(round_trip, args.repeat)
    keras_pickle.uninstall()
    model = mlp()
    theirs = best(round_trip, args.repeat)
    print(
        f"3-layer MLP + Adam, dumps + loads: Keras {theirs * 1e3:.1f} ms, keras_pickle {ours * 1e3:.2f} ms, "
        f"ratio {theirs / ours:.1f}x (best of {args.repeat}, Keras {keras.__version__}, {keras.config.backend()})"
    )


if __name__ == "__main__":
    main()
