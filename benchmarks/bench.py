"""Benchmark keras_pickle against Keras 3's own pickling and against "the floor", side by side, in one process.

What is measured
----------------
Every figure is the best of N runs (``time.perf_counter``), the contenders
interleaved (a, b, c, a, b, c, ...) with keras_pickle installed or uninstalled
before every single run (``_bench_core.race``). Nothing is asserted about
times: ratios are printed, and a "goals" table at the end says PASS or MISS.
Every result keras_pickle returns is checked outside the timed region: its
variables (model and optimizer, ``np.array_equal``) after every run, and its
outputs on a fixed batch after the first (a payload is loaded first); a wrong
result raises instead of being timed. Keras's and the floors' results are
checked the same way and a difference is noted, not fatal.

1. **Dumps vs the floor** (3-layer MLP, ``MobileNetV3Small(input_shape=(96,
   96, 3), weights=None)``, ``ResNet50(weights=None)``, dense100mb).
   keras_pickle's ``pickle.dumps(model, protocol=5)`` (in band) and with a
   ``buffer_callback`` (out of band), against what Keras itself needs to
   describe the model, keras_pickle uninstalled:

   * in band: ``json.dumps(keras.saving.serialize_keras_object(model))``
     plus exactly one copy of the state bytes, ``b"".join`` of every state
     variable's raw bytes (weights and optimizer slots: what keras_pickle
     pickles) into one bytes object, as an in-band pickle must produce. Each
     variable is read without a copy (TensorFlow: ``np.asarray`` of a resource
     variable's read shares its buffer), so the join is the only copy.
   * out of band: the config JSON alone (the buffers are handed out as is).

   Goal: keras_pickle <= 1.3x the floor. With it, a per-phase profile of
   keras_pickle's out-of-band dumps: ``_config.config_of`` (config
   serialization), ``_custom_objects.collect`` (custom objects),
   ``_capture_state.capture`` (state), pickling the payload those make, and the rest
   (total minus the four); each phase called on its own.

2. **Loads and deepcopy vs the floor** (ResNet50, MobileNetV3Small,
   ``EfficientNetB0(weights=None)``, deep150): keras_pickle's ``pickle.loads``
   (out-of-band payload) and ``copy.deepcopy`` (which also reads the config
   and the state, which the floor is given), against Keras's own rebuild,
   ``keras.saving.deserialize_keras_object(json.loads(config_json))`` then
   ``set_weights(saved)``, always with keras_pickle *uninstalled* (install()
   patches Keras internals, a cached ``inspect`` among them, which would speed
   the floor up too). For the Sequential also the "linear floor",
   ``keras.Sequential(deserialized layers) + set_weights``: Keras's
   ``Sequential.from_config`` rebuilds the graph after every layer it adds
   (quadratic in depth). Goal: keras_pickle <= 0.5x the floor.

3. **Keras's own pickling vs keras_pickle** (protocol 5 with a
   ``buffer_callback``; Keras's own is ``KerasSaveable.__reduce__``, a
   ``.keras`` zip written into a ``BytesIO``, after
   ``keras_pickle.uninstall()``): the 3-layer MLP (compiled, Adam, one ``fit``
   step; dumps, loads and the round trip timed as one; goal >= 10x),
   ``dense100mb`` (6 x Dense(2048) + Adam, 288 MiB of state: dumps, loads,
   ten loads in a row timed as one, deepcopy), ``deep150`` (dumps, loads) and
   ResNet50 (dumps, loads, their sum). Every other run is preceded by a
   collection; the ten loads are not, as in a worker loading model after model.

4. **Sweeps**: dumps and loads of 4 wide Dense layers up to 1 GiB of state,
   and of n x Dense(32) up to 500 layers, both implementations; a run longer
   than 15 s is not repeated (Keras's own reload of a deep Sequential).

5. **Memory**: peak extra resident memory of dumps and loads of dense100mb and
   of every sweep point, per implementation, each in a child process
   (``_bench_memory``; TensorFlow runs there with ``TF_ENABLE_ONEDNN_OPTS=0``,
   whose CPU allocator would otherwise hide allocations in memory it keeps).

**Goals** (the table at the end; ``_bench_report``): dumps <= 1.3x the floor,
loads and deepcopy <= 0.5x the floor, the 3-layer MLP's dumps+loads >= 10x
faster than Keras's own, the earlier goals against Keras's own (dense100mb
dumps >= 5x, loads and deepcopy >= 3x, deep150 loads >= 10x, ResNet50
dumps+loads >= 2x, dense100mb peak extra memory <= 0.25x of the state for
dumps and <= 1.5x for loads), and linear growth: a log-log slope <= 1.2 of
keras_pickle's times over the three largest points of each sweep, and of its
loads memory over the state sizes.

The 3-layer MLP takes milliseconds: its figures are the best of 10 x N.
``--quick`` swaps in tiny models of each kind (a smoke test: values shown,
goals not judged). Results go to a JSON file (default docs/bench-results.json,
benchmarks/results/ with ``--quick``) and a 2x2 chart (docs/bench.png).

Usage::

    python benchmarks/bench.py [--quick] [--repeat N] [--only MODEL ...]
                               [--no-sweep] [--no-memory] [--json P] [--png P]
                               [--profile]

``--profile`` also runs cProfile over keras_pickle's loads of the selected
models and prints the top functions by cumulative time.
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
import traceback
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the helper modules, also when loaded by `keras-pickle bench`
    sys.path.insert(0, str(HERE))

import _bench_args  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from _bench_core import (  # noqa: E402
    Contender,
    Subject,
    best,
    checks,
    dumps,
    dumps_in_band,
    is_ours,
    loads,
    race,
    ratio,
    set_installed,
    variables_mismatch,
)
from _bench_memory import IMPLS, KERAS, KP, memory_child, memory_jobs, run_memory_children  # noqa: E402, F401
from _bench_models import LOADS_IN_A_ROW, PLANS, build, dense100mb, describe, nbytes, state_variables, sweep_specs  # noqa: E402, F401
from _bench_report import draw_chart, evaluate_goals, mb, print_all, print_goals  # noqa: E402
from keras.src.backend.common import global_state  # noqa: E402

import keras_pickle  # noqa: E402
from keras_pickle._capture import config as _config  # noqa: E402
from keras_pickle._capture import custom_objects as _custom_objects  # noqa: E402
from keras_pickle._capture import payload as _capture_payload  # noqa: E402
from keras_pickle._capture import state as _capture_state  # noqa: E402

DOCS = HERE.parent / "docs"
SMALL_MODELS = {"mlp3"}  # milliseconds per run: best of 10 x --repeat

# benchmarks/backends.py and benchmarks/checksum.py use bench.py's models and checks too: dense100mb,
# state_variables, nbytes, describe, dumps, loads, IMPLS, KERAS, KP, _source_revision and these three.


def activate(impl: str) -> None:
    """Make plain pickle and copy use ``impl`` (KERAS: keras_pickle uninstalled; KP: installed)."""
    set_installed(impl == KP)


def check_payload(impl: str, payload: tuple[bytes, list]) -> None:
    if is_ours(payload) != (impl == KP):
        raise AssertionError(f"{impl} produced {'a' if is_ours(payload) else 'no'} keras_pickle payload: wrong path")


def verify(impl: str, original, result, notes: list[str]) -> None:
    """keras_pickle's ``result`` must hold exactly ``original``'s variables; a difference in Keras's is noted."""
    problem = variables_mismatch(original, result)
    if problem is None:
        return
    if impl == KP:
        raise AssertionError(f"keras_pickle returned a wrong result: {problem}")
    note = f"Keras's result differs from the original: {problem}"
    if note not in notes:
        notes.append(note)


# --------------------------------------------------------------------------
# 1. Dumps vs the floor, and where keras_pickle's dumps spends its time
# --------------------------------------------------------------------------


def raw_bytes(variable) -> np.ndarray:
    """A variable's value as flat bytes, read without a copy where the backend allows it."""
    value = variable.value
    backend = keras.backend.backend()
    if backend == "tensorflow":
        value = value.value()  # one read of the resource variable: the tensor shares its buffer
    elif backend == "torch":
        value = value.detach().cpu()
    return np.asarray(value).reshape(-1).view(np.uint8)


def keras_config_json(model) -> str:
    return json.dumps(keras.saving.serialize_keras_object(model))


def floor_dumps(subject: Subject, repeat: int) -> dict:
    model, notes = subject.model, []
    variables = state_variables(model)

    def floor_in_band():
        return keras_config_json(model), b"".join([raw_bytes(v) for v in variables])

    def check_floor(result) -> None:
        if len(result[1]) != nbytes(variables):
            raise AssertionError(f"the floor copied {len(result[1])} bytes, not the state's {nbytes(variables)}")

    ours = checks(subject, notes, strict=True, payload=True, ours=True)
    times = race(
        [
            Contender("floor in band", False, floor_in_band, check=check_floor),
            Contender("keras_pickle in band", True, lambda: dumps_in_band(model), **ours),
            Contender("keras_pickle.dumps in band", True, lambda: (keras_pickle.dumps(model, protocol=5), []), **ours),
            Contender("floor out of band", False, lambda: keras_config_json(model)),
            Contender("keras_pickle out of band", True, lambda: dumps(model), **ours),
        ],
        repeat,
    )
    out_of_band = sum(memoryview(b).nbytes for b in dumps(model)[1])
    if out_of_band != nbytes(variables):
        notes.append(f"keras_pickle hands out {out_of_band} bytes out of band, the floor copies {nbytes(variables)}")
    b = {name: best(t) for name, t in times.items()}
    return {
        "model": subject.name,
        "state_bytes": nbytes(variables),
        "floor_inband_s": b["floor in band"],
        "keras_pickle_inband_s": b["keras_pickle in band"],
        "inband_ratio": ratio(b["keras_pickle in band"], b["floor in band"]),
        "keras_pickle_dumps_inband_s": b["keras_pickle.dumps in band"],
        "dumps_inband_ratio": ratio(b["keras_pickle.dumps in band"], b["floor in band"]),
        "floor_oob_s": b["floor out of band"],
        "keras_pickle_oob_s": b["keras_pickle out of band"],
        "oob_ratio": ratio(b["keras_pickle out of band"], b["floor out of band"]),
        "all_s": times,
        "notes": notes,
    }


def dumps_phases(subject: Subject, repeat: int) -> dict:
    """keras_pickle's out-of-band dumps and its phases, each called on its own (installed)."""
    model = subject.model
    set_installed(True)
    config = _config.config_of(model)
    payload = _capture_payload.layer_payload(model, 5)  # (header, body): what __reduce_ex__ hands pickle
    times = race(
        [
            Contender("total", True, lambda: dumps(model), check=lambda payload: check_payload(KP, payload)),
            Contender("config_of", True, lambda: _config.config_of(model)),
            Contender("custom objects", True, lambda: _custom_objects.collect(config, [model])),
            Contender("state capture", True, lambda: _capture_state.capture(model)),
            Contender("pickle payload", True, lambda: pickle.dumps(payload, protocol=5, buffer_callback=[].append)),
            Contender("keras serialize", False, lambda: keras_config_json(model)),
        ],
        repeat,
    )
    b = {name: best(t) for name, t in times.items()}
    phases = b["config_of"] + b["custom objects"] + b["state capture"] + b["pickle payload"]
    return {
        "model": subject.name,
        "total_s": b["total"],
        "config_of_s": b["config_of"],
        "custom_objects_s": b["custom objects"],
        "state_capture_s": b["state capture"],
        "pickle_payload_s": b["pickle payload"],
        "other_s": b["total"] - phases,
        "keras_serialize_s": b["keras serialize"],
        "all_s": times,
    }


# --------------------------------------------------------------------------
# 2. Loads and deepcopy vs the floor
# --------------------------------------------------------------------------


def construct_layers(config: dict) -> list:
    """Keras constructing and building every layer a Functional or Sequential config lists, no initializer run.

    The layers' variables are created in a ``keras.StatelessScope(initialize_variables=False)``, so
    what is timed is Keras's own work per layer (its constructor, ``build_from_config``, each
    ``add_weight``), without a graph, an initial value or a saved one: the least that any rebuild
    from a config pays, keras_pickle's loads and deepcopy included.
    """
    uninitialized = global_state.get_global_attribute("uninitialized_variables")
    try:
        with keras.StatelessScope(initialize_variables=False):
            return [keras.saving.deserialize_keras_object(c) for c in config["config"]["layers"]]
    finally:  # the scope registers every variable it defers: do not let the bench accumulate them
        global_state.set_global_attribute("uninitialized_variables", uninitialized)


def check_layer_count(expected: int) -> Callable[[list], None]:
    def check(layers: list) -> None:
        if len(layers) != expected or not all(isinstance(layer, keras.Operation) for layer in layers):
            raise AssertionError(f"the bound built {len(layers)} layers, the config lists {expected}")

    return check


def floor_loads(subject: Subject, repeat: int) -> dict:
    model, notes = subject.model, []
    set_installed(False)
    config_json = keras_config_json(model)
    saved = model.get_weights()
    set_installed(True)
    payload = dumps(model)

    def floor():
        rebuilt = keras.saving.deserialize_keras_object(json.loads(config_json))
        rebuilt.set_weights(saved)
        return rebuilt

    def linear_floor():
        config = json.loads(config_json)["config"]
        layers = [keras.saving.deserialize_keras_object(c) for c in config["layers"]]
        rebuilt = keras.Sequential(layers, name=config["name"])
        rebuilt.set_weights(saved)
        return rebuilt

    def construction_bound():
        return construct_layers(json.loads(config_json))

    floor_checks = checks(subject, notes, strict=False, weights_only=True)
    ours = checks(subject, notes, strict=True)
    contenders = [Contender("floor", False, floor, **floor_checks)]
    if isinstance(model, keras.Sequential):
        contenders.append(Contender("linear floor", False, linear_floor, **floor_checks))
    inner = json.loads(config_json).get("config")
    if isinstance(inner, dict) and "layers" in inner:
        bound_check = check_layer_count(len(inner["layers"]))
        contenders.append(Contender("construction bound", False, construction_bound, check=bound_check))
    contenders += [
        Contender("keras_pickle loads", True, lambda: loads(payload), **ours),
        Contender("keras_pickle deepcopy", True, lambda: copy.deepcopy(model), **ours),
    ]
    times = race(contenders, repeat)
    b = {name: best(t) for name, t in times.items()}
    row = {
        "model": subject.name,
        "n_layers": len(model.layers),
        "floor_s": b["floor"],
        "keras_pickle_loads_s": b["keras_pickle loads"],
        "loads_ratio": ratio(b["keras_pickle loads"], b["floor"]),
        "keras_pickle_deepcopy_s": b["keras_pickle deepcopy"],
        "deepcopy_ratio": ratio(b["keras_pickle deepcopy"], b["floor"]),
        "linear_floor_s": b.get("linear floor"),
        "all_s": times,
        "notes": notes,
    }
    if "construction bound" in b:
        row["construction_bound_s"] = b["construction bound"]
        row["construction_bound_ratio"] = ratio(b["construction bound"], b["floor"])
    if "linear floor" in b:
        row["loads_ratio_linear"] = ratio(b["keras_pickle loads"], b["linear floor"])
        row["deepcopy_ratio_linear"] = ratio(b["keras_pickle deepcopy"], b["linear floor"])
    return row


# --------------------------------------------------------------------------
# 3. Keras's own pickling vs keras_pickle
# --------------------------------------------------------------------------


def vs_keras(subject: Subject, op: str, repeat: int, workload: str | None = None) -> dict:
    """Best-of-``repeat`` times of ``op`` with Keras's own pickling and with keras_pickle, interleaved."""
    model, notes = subject.model, []

    def contender(impl: str) -> Contender:
        installed = impl == KP
        if op == "dumps":
            checked = checks(subject, notes, strict=installed, payload=True, ours=installed)
            return Contender(impl, installed, lambda: dumps(model), **checked)
        checked = checks(subject, notes, strict=installed)
        if op in ("loads", LOADS_IN_A_ROW):
            set_installed(installed)
            payload = dumps(model)
            check_payload(impl, payload)
            load = loads if op == "loads" else loads_in_a_row
            return Contender(impl, installed, lambda: load(payload), **checked)
        if op == "deepcopy":
            return Contender(impl, installed, lambda: copy.deepcopy(model), **checked)
        if op == "dumps+loads":
            return Contender(impl, installed, lambda: loads(dumps(model)), **checked)
        raise ValueError(op)

    times = race([contender(KERAS), contender(KP)], repeat)
    return timing_row(workload or subject.name, op, times, notes=notes)


def loads_in_a_row(payload: tuple[bytes, list]) -> object:
    """Ten loads, each result dropped as the next starts, with no collection in between: what a worker
    loading model after model sees, allocator reuse and freeing included. Timed as one."""
    for _ in range(9):
        loads(payload)
    return loads(payload)


def timing_row(workload: str, op: str, times: dict[str, list[float]] | None = None, **extra) -> dict:
    r = {"workload": workload, "op": op, **extra}
    if times is not None:
        r["keras_s"], r["keras_pickle_s"] = best(times[KERAS]), best(times[KP])
        r["keras_all_s"], r["keras_pickle_all_s"] = times[KERAS], times[KP]
    if r.get("keras_s") is not None and r.get("keras_pickle_s"):
        r["ratio"] = r["keras_s"] / r["keras_pickle_s"]
    return r


def summed_row(rows: list[dict], workload: str) -> dict | None:
    """dumps+loads as the sum of the best dumps and the best loads."""
    by_op = {r["op"]: r for r in rows if r["workload"] == workload and "keras_s" in r}
    if "dumps" not in by_op or "loads" not in by_op:
        return None
    return timing_row(
        workload,
        "dumps+loads",
        keras_s=by_op["dumps"]["keras_s"] + by_op["loads"]["keras_s"],
        keras_pickle_s=by_op["dumps"]["keras_pickle_s"] + by_op["loads"]["keras_pickle_s"],
        notes=["sum of the best dumps and the best loads"],
    )


# --------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------


class Run:
    """The results being gathered, and how to report progress and failures."""

    def __init__(self, quick: bool, repeat: int):
        self.quick, self.repeat = quick, repeat
        self.started = time.perf_counter()
        self.results: dict = {
            "models": {},
            "floors": {"dumps": [], "loads": []},
            "dumps_phases": [],
            "timings": [],
            "sweep": {},
            "memory": [],
            "profile": {},
            "errors": [],
        }

    def say(self, message: str) -> None:
        print(f"{time.perf_counter() - self.started:7.1f}s  {message}", flush=True)

    def attempt(self, what: str, op: str, fn):
        """``fn()``, or None with the error recorded (the run goes on)."""
        self.say(f"[{what}] {op}")
        try:
            return fn()
        except Exception as e:
            self.results["errors"].append(
                {"workload": what, "op": op, "error": repr(e), "traceback": traceback.format_exc()}
            )
            self.say(f"[{what}] {op} FAILED: {e!r}\n{traceback.format_exc()}")
            return None


def measure_model(run: Run, name: str) -> None:
    """Everything :data:`PLANS` lists for one model, on one build of it."""
    plan, res = PLANS[name], run.results
    repeat = run.repeat * (10 if name in SMALL_MODELS else 1)
    set_installed(True)
    run.say(f"[{name}] building")
    subject = Subject.of(name, plan.build(run.quick))
    info = res["models"][name] = describe(subject.model)
    run.say(f"[{name}] {info['params']:,} params, {info['n_layers']} layers, {mb(info['state_bytes'])} state")
    if plan.floor_dumps:
        for rows, fn in ((res["floors"]["dumps"], floor_dumps), (res["dumps_phases"], dumps_phases)):
            row = run.attempt(name, f"{fn.__name__} x{repeat}", lambda fn=fn: fn(subject, repeat))
            if row is not None:
                rows.append(row)
    if plan.floor_loads:
        row = run.attempt(name, f"floor_loads x{repeat}", lambda: floor_loads(subject, repeat))
        if row is not None:
            res["floors"]["loads"].append(row)
    for op in plan.vs_keras:
        row = run.attempt(name, f"{op} vs Keras x{repeat}", lambda op=op: vs_keras(subject, op, repeat))
        res["timings"].append(row if row is not None else timing_row(name, op, error="failed"))
    if name == "resnet50":
        summed = summed_row(res["timings"], name)
        if summed:
            res["timings"].append(summed)


def drop_models() -> None:
    """After a model's measurements (its objects are gone with the function that held them)."""
    set_installed(True)
    keras.backend.clear_session()
    gc.collect()


def run_sweep(run: Run) -> None:
    run.results["sweep"] = {"params": [], "depth": []}
    for axis, spec in sweep_specs(run.quick):
        run.results["sweep"][axis].append(sweep_point(run, axis, spec))
        drop_models()


def sweep_point(run: Run, axis: str, spec: dict) -> dict:
    set_installed(True)
    subject = Subject.of(f"{axis}={spec[axis]}", build(spec))
    point = {**spec, **describe(subject.model)}
    run.say(f"[sweep {axis}={spec[axis]:,}] {point['params']:,} params, {mb(point['state_bytes'])} state")
    for op in ("dumps", "loads"):
        row = run.attempt(f"sweep {axis}={spec[axis]}", op, lambda op=op: vs_keras(subject, op, run.repeat, "sweep"))
        if row is not None:
            point[op] = row
    return point


def run_memory(run: Run, names: list[str], source: str, with_sweep: bool) -> None:
    jobs = memory_jobs(names, run.quick, sweep_specs(run.quick) if with_sweep else [])
    if not jobs:
        return
    # --quick is a smoke test: one child measures every tiny model.
    run.say(f"[memory] {len(jobs)} measurements in {'one child process' if run.quick else 'child processes'}")
    memory, errors = run_memory_children(str(Path(__file__).resolve()), jobs, run.say, shared=run.quick)
    run.results["memory"], run.results["errors"] = memory, run.results["errors"] + errors
    moved = {m["keras_pickle_source"] for m in memory} - {source}
    if moved:
        run.say(f"WARNING: keras_pickle changed during the run; memory children measured {', '.join(moved)}")


def profile_loads(names: list[str], quick: bool, top: int = 10) -> dict[str, list[dict]]:
    """cProfile of one keras_pickle loads per model; the top functions by cumulative time."""
    import cProfile
    import pstats

    out = {}
    for name in names:
        set_installed(True)
        model = PLANS[name].build(quick)
        payload = dumps(model)
        loads(payload)  # warm up
        gc.collect()
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        result = loads(payload)
        profiler.disable()
        wall = time.perf_counter() - start
        verify(KP, model, result, [])
        entries = sorted(pstats.Stats(profiler).stats.items(), key=lambda kv: kv[1][3], reverse=True)
        out[name] = [
            {"function": _short(func), "ncalls": nc, "tottime": tt, "cumtime": ct}
            for func, (_cc, nc, tt, ct, _callers) in entries[:top]
        ]
        print(f"\ncProfile of keras_pickle loads of {name} (wall {wall:.3f} s under the profiler), top {top}:")
        print(f"{'cumtime s':>10} {'tottime s':>10} {'ncalls':>8}  function")
        for e in out[name]:
            print(f"{e['cumtime']:>10.3f} {e['tottime']:>10.3f} {e['ncalls']:>8}  {e['function']}")
        del model, result, payload
        drop_models()
    return out


def _short(func: tuple) -> str:
    filename, line, name = func
    for marker in ("site-packages/", f"{HERE.parent}/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
    return f"{filename}:{line}({name})" if line else name


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``_bench_args``, which the CLI parses before it imports this module)."""
    if tuple(PLANS) != _bench_args.MODEL_NAMES:
        raise RuntimeError(f"_bench_args.MODEL_NAMES {_bench_args.MODEL_NAMES} differ from PLANS {tuple(PLANS)}")
    return _bench_args.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(json.loads(args.memory_child), _source_revision())), flush=True)
        return 0
    run = Run(args.quick, args.repeat)
    source = _source_revision()  # what was imported, before anyone edits it
    names = args.only or list(PLANS)
    run.say(f"keras_pickle {keras_pickle.__version__} from {Path(keras_pickle.__file__).parent} ({source})")
    for name in names:
        measure_model(run, name)
        drop_models()
    if not args.no_sweep:
        run_sweep(run)
    if not args.no_memory:
        run_memory(run, names, source, with_sweep=not args.no_sweep)
    if args.profile:
        run.results["profile"] = profile_loads(names, args.quick)

    set_installed(True)
    results = run.results
    print_all(results, args.repeat)
    results["goals"] = evaluate_goals(results, args.quick)
    print_goals(results["goals"], args.quick)
    for e in results["errors"]:
        print(f"\nERROR in {e['workload']} {e['op']}: {e['error']}\n{e.get('traceback', '')}")
    wall = time.perf_counter() - run.started
    results = {"meta": _meta(args, source, wall), **results}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"results written to {args.json}")
    if results["sweep"]:  # the chart plots the sweeps and their memory
        title = (
            f"Keras {keras.__version__} pickling vs keras_pickle {keras_pickle.__version__} "
            f"({keras.backend.backend()} backend, {os.cpu_count()} CPUs)"
        )
        draw_chart(results, args.png, title)
    print(f"wall time {wall:.0f} s")
    return 1 if results["errors"] else 0


def _meta(args: argparse.Namespace, source: str, wall: float) -> dict:
    return {
        "keras": keras.__version__,
        "keras_pickle": keras_pickle.__version__,
        "keras_pickle_source": source,
        "backend": keras.backend.backend(),
        "backend_version": _backend_version(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "repeat": args.repeat,
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": wall,
    }


def _source_revision() -> str:
    """Which keras_pickle source is measured: its git commit ("+dirty" for local
    changes) and a digest of its .py files, so that edits during a run show."""
    import hashlib

    package = Path(keras_pickle.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=package, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=package, capture_output=True, text=True)
        git = commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if commit.returncode == 0 else "no git"
    except OSError:
        git = "no git"
    return f"{git} sha256:{digest.hexdigest()[:12]}"


def _backend_version() -> str | None:
    try:
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            return tf.__version__
    except Exception:
        pass
    return None


if __name__ == "__main__":
    sys.exit(main())
