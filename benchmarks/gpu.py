"""Models on an accelerator: Keras's own pickling, keras_pickle, and the floors, side by side.

For each backend (JAX, PyTorch; each in a child process of its own, ``KERAS_BACKEND`` set), a
model of ``--layers`` x Dense(``--width``) + Adam, trained one step so that every slot exists,
every variable on the accelerator Keras chose (the GPU where there is one). Best of ``--repeat``
in one process:

* the floors, on the same bytes: device -> host into pinned memory (PyTorch:
  ``pin_memory`` + ``copy_(non_blocking=True)``; JAX: ``jax.device_get``), host -> device from
  there, and device -> device (a copy of every variable on its device);
* Keras's own pickling (``keras_pickle.uninstall()``): dumps and loads, protocol 5 in band;
* keras_pickle: dumps in band and out of band (``buffer_callback``), loads of each, and
  ``copy.deepcopy``;
* each result checked: every variable equal to the original's, and on the original's device.

Ratios are to the floor of the same direction (dumps: device -> host; loads: host -> device;
deepcopy: device -> device). On a machine without an accelerator the same script runs on the CPU
(the floors are then memory copies), which is what CI can check::

    python benchmarks/gpu.py [--backend jax|torch ...] [--layers 4] [--width 8192] [--repeat 2] [--json P]
    python benchmarks/gpu.py --quick      # 2 x Dense(512): seconds, on any machine
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import pickle
import platform
import subprocess
import sys
import time
from pathlib import Path

BACKENDS = ("jax", "torch")


def best(repeat: int, function) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        result = None
        gc.collect()
        start = time.perf_counter()
        result = function()
        _synchronize(result)
        times.append(time.perf_counter() - start)
    return min(times), result


def _synchronize(result) -> None:
    """Wait for asynchronous device work behind ``result`` (JAX arrays, CUDA streams)."""
    backend = os.environ.get("KERAS_BACKEND")
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    elif backend == "jax":
        import jax

        jax.block_until_ready(result if isinstance(result, (list, tuple)) else ())


def build(layers: int, width: int):
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width) for _ in range(layers)])
    model.compile(keras.optimizers.Adam(1e-4), "mse")
    x = np.random.default_rng(0).random((8, width), dtype=np.float32)
    model.fit(x, x, epochs=1, batch_size=8, verbose=0)
    return model


def every_variable(model) -> list:
    return list(model.variables) + list(model.optimizer.variables)


def floors(model, repeat: int) -> dict:
    """Seconds to move every variable's bytes device -> host (pinned), host -> device, device -> device."""
    backend = os.environ["KERAS_BACKEND"]
    values = [v.value for v in every_variable(model)]
    if backend == "torch":
        import torch

        pinned = torch.cuda.is_available()
        hosts = [torch.empty(t.shape, dtype=t.dtype, pin_memory=pinned) for t in values]
        device_to_host, _ = best(repeat, lambda: [h.copy_(t, non_blocking=pinned) for h, t in zip(hosts, values)])
        host_to_device, _ = best(repeat, lambda: [h.to(t.device, non_blocking=pinned) for h, t in zip(hosts, values)])
        device_to_device, _ = best(repeat, lambda: [t.clone() for t in values])
    else:
        import jax
        import jax.numpy as jnp

        device_to_host, hosts = best(repeat, lambda: jax.device_get(values))
        devices = [next(iter(t.devices())) for t in values]
        host_to_device, _ = best(repeat, lambda: [jax.device_put(h, d) for h, d in zip(hosts, devices)])
        device_to_device, _ = best(repeat, lambda: [jnp.copy(t) for t in values])
    return {"device_to_host": device_to_host, "host_to_device": host_to_device, "device_to_device": device_to_device}


def device_of(variable) -> str:
    value = variable.value
    device = getattr(value, "device", None)
    if callable(device):  # a JAX array's device() in older JAX
        device = device()
    if device is None and hasattr(value, "devices"):
        device = next(iter(value.devices()))
    return str(device)


def check(original, other) -> str:
    """'ok', or what differs: a value, or the device a variable lives on."""
    import keras
    import numpy as np

    a, b = every_variable(original), every_variable(other)
    if len(a) != len(b):
        return f"{len(b)} variables, not {len(a)}"
    for x, y in zip(a, b):
        if device_of(x) != device_of(y):
            return f"{y.path} on {device_of(y)}, not {device_of(x)}"
        if not np.array_equal(keras.ops.convert_to_numpy(x.value), keras.ops.convert_to_numpy(y.value)):
            return f"{y.path} differs"
    return "ok"


def child(args: argparse.Namespace) -> dict:
    import keras

    import keras_pickle

    model = build(args.layers, args.width)
    state = sum(keras.ops.convert_to_numpy(v.value).nbytes for v in every_variable(model))
    out = {
        "backend": os.environ["KERAS_BACKEND"],
        "device": device_of(model.variables[0]),
        "state_bytes": state,
        "floors": floors(model, args.repeat),
    }
    rows = {}

    def round_trip(name: str, dumps, loads_kwargs) -> str:
        rows[f"{name} dumps"], data = best(args.repeat, dumps)
        rows[f"{name} loads"], loaded = best(args.repeat, lambda: pickle.loads(data, **loads_kwargs()))
        return check(model, loaded)

    keras_pickle.uninstall()
    out["keras_result"] = round_trip("keras", lambda: pickle.dumps(model, protocol=5), dict)
    keras_pickle.install()
    out["in_band_result"] = round_trip("in band", lambda: pickle.dumps(model, protocol=5), dict)
    buffers: list = []

    def dumps_out_of_band():
        buffers.clear()
        return pickle.dumps(model, protocol=5, buffer_callback=buffers.append)

    out["out_of_band_result"] = round_trip("out of band", dumps_out_of_band, lambda: {"buffers": buffers})
    rows["deepcopy"], twin = best(args.repeat, lambda: copy.deepcopy(model))
    out["deepcopy_result"] = check(model, twin)
    out["seconds"] = rows
    return out


FLOOR_OF = {"dumps": "device_to_host", "loads": "host_to_device", "deepcopy": "device_to_device"}


def report(results: list[dict]) -> None:
    print(f"{platform.node()}, Python {platform.python_version()}")
    for r in results:
        f = r["floors"]
        print(
            f"\n{r['backend']} on {r['device']}: {r['state_bytes'] / 2**30:.2f} GiB of state; floors: device->host "
            f"{f['device_to_host']:.4f} s, host->device {f['host_to_device']:.4f} s, device->device "
            f"{f['device_to_device']:.4f} s"
        )
        print(f"  {'op':20} {'seconds':>9} {'x floor':>9}")
        for op, seconds in r["seconds"].items():
            floor = f[FLOOR_OF[next(k for k in FLOOR_OF if k in op)]]
            print(f"  {op:20} {seconds:9.4f} {seconds / floor:9.1f}")
        results_line = ", ".join(f"{k.removesuffix('_result')}: {v}" for k, v in r.items() if k.endswith("_result"))
        print(f"  results: {results_line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="2 x Dense(512)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.layers, args.width = 2, 512
    if args.child:
        print(json.dumps(child(args)))
        return
    results = []
    for backend in args.backend or BACKENDS:
        argv = [sys.executable, __file__, "--child", f"--layers={args.layers}", f"--width={args.width}"]
        argv.append(f"--repeat={args.repeat}")
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        run = subprocess.run(argv, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            print(f"{backend}: failed\n{run.stderr[-3000:]}", file=sys.stderr)
            continue
        results.append(json.loads(run.stdout.strip().splitlines()[-1]))
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
