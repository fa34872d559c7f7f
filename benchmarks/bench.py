"""Benchmark keras_pickle against Keras 3's own pickling and against "the floor", side by side, in one process.

Every figure is the best of N runs, the contenders interleaved with keras_pickle installed or
uninstalled before every single run (``common.race``). Nothing is asserted about times: ratios are
printed, and a "goals" table at the end says PASS or MISS. Every result keras_pickle returns is
checked outside the timed region (its variables, model and optimizer, after every run; its outputs
on a fixed batch after the first; a payload is loaded first); a wrong one raises. Keras's and the
floors' results are checked alike and a difference is noted.

1. Dumps vs the floor (mlp3, MobileNetV3Small(96 x 96), ResNet50, dense100mb): keras_pickle's
   ``pickle.dumps(model, protocol=5)`` and ``keras_pickle.dumps`` in band, and with a
   ``buffer_callback``, against what Keras itself needs, keras_pickle uninstalled: in band,
   the config JSON plus exactly one copy of the state bytes (``common.in_band_floor``); out of band,
   the config JSON alone. Goal <= 1.3x. With it, where keras_pickle's out-of-band dumps spends its
   time, each phase called on its own (:func:`dumps_phases`).
2. Loads and deepcopy vs the floor (MobileNetV3Small, EfficientNetB0, ResNet50, deep150):
   ``keras.saving.deserialize_keras_object(json.loads(config))`` then ``set_weights(saved)``, always
   with keras_pickle uninstalled (install() patches Keras internals that would speed the floor up);
   for the Sequential also the "linear floor" (``keras.Sequential(deserialized layers)``: Keras's
   ``Sequential.from_config`` rebuilds the graph after every layer), and the "bound": Keras
   constructing and building the config's layers with no initializer run. Goal <= 0.5x.
3. Keras's own pickling (``KerasSaveable.__reduce__``, a .keras zip) vs keras_pickle, protocol 5
   with a ``buffer_callback``: mlp3 (dumps, loads, the round trip as one; best of 10 x N),
   dense100mb (dumps, loads, ten loads in a row timed as one with no collection between, deepcopy),
   deep150 (dumps, loads), ResNet50 (dumps, loads, their sum).
4. Sweeps: dumps and loads of 4 wide Dense layers up to 1 GiB of state, and of n x Dense(32) up to
   500 layers; a run longer than 15 s is not repeated.
5. Memory: peak extra resident memory of dumps and loads of dense100mb and of every sweep point,
   per implementation, each in a child process (``common.peak_memory``).

``--quick`` swaps in tiny models of each kind (a smoke test: values shown, goals not judged).
Results go to a JSON file (default docs/bench-results.json) and a 2 x 2 chart (docs/bench.png)::

    python -m benchmarks bench [--quick] [--repeat N] [--only MODEL ...] [--no-sweep] [--no-memory] [--walks]
"""

from __future__ import annotations

import collections
import copy
import functools
import gc
import importlib
import json
import os
import pickle
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import keras
import numpy as np
from keras.src.backend.common import global_state

import keras_pickle
from benchmarks import common, models
from benchmarks._bench_args import MODEL_NAMES, parse_args
from benchmarks.common import IMPLS, KERAS, KP, Contender, best, mb, race, ratio

LOADS_IN_A_ROW = "10 loads in a row"
PLANS = {  # model: (dumps vs the floor and its phases, loads vs the floor, ops vs Keras's own pickling)
    "mlp3": (True, False, ("dumps", "loads", "dumps+loads")),
    "mobilenetv3small": (True, True, ()),
    "efficientnetb0": (False, True, ()),
    "resnet50": (True, True, ("dumps", "loads")),
    "deep150": (False, True, ("dumps", "loads")),
    "dense100mb": (True, False, ("dumps", "loads", LOADS_IN_A_ROW, "deepcopy")),
}
SWEEP = {"params": [1_000_000, 4_000_000, 16_000_000, 64_000_000, 2**30 // 4], "depth": [10, 30, 100, 300, 500]}
QUICK_SWEEP = {"params": [10_000, 30_000, 100_000], "depth": [3, 10, 30]}


def outputs(model, batch: np.ndarray) -> np.ndarray:
    return keras.ops.convert_to_numpy(model(batch, training=False))


class Subject:
    """A model under measurement, with a fixed input batch and its outputs before anything ran."""

    def __init__(self, name: str, model):
        self.name, self.model = name, model
        shape = tuple(model.inputs[0].shape[1:])
        self.batch = np.random.default_rng(1).uniform(0.0, 1.0, size=(2, *shape)).astype("float32")
        self.expected = outputs(model, self.batch)

    def check(self, *, weights_only: bool = False):
        """For a contender returning models: its variables every run, its outputs on the batch the first."""

        def check(result, first: bool) -> str | None:
            problem = common.mismatch(self.model, result, weights_only=weights_only)
            if problem is None and first:
                got = outputs(result, self.batch)
                if got.dtype != self.expected.dtype or not np.array_equal(got, self.expected):
                    problem = f"outputs on a batch of {len(self.batch)} differ"
            return problem and f"{self.name}: {problem}"

        return check

    def payload_check(self, impl: str):
        """For a contender returning payloads: ``impl``'s kind every run; keras_pickle's loaded and checked once."""
        loaded = self.check()

        def check(payload, first: bool) -> str | None:
            if common.is_ours(payload[0]) != (impl == KP):
                raise AssertionError(f"{impl} wrote the wrong kind of payload: the wrong path was timed")
            return loaded(common.loads(payload), True) if first and impl == KP else None

        return check


# --------------------------------------------------------------------------
# 1. Dumps vs the floor
# --------------------------------------------------------------------------


def floor_dumps(subject: Subject, repeat: int) -> dict:
    model, notes = subject.model, []
    state = common.nbytes(common.state_variables(model))

    def one_copy(result, first):
        if len(result[1]) != state:
            raise AssertionError(f"the floor copied {len(result[1])} bytes, not the state's {state}")

    ours = subject.payload_check(KP)
    contenders = [
        Contender("floor in band", KERAS, lambda: common.in_band_floor(model), one_copy),
        Contender("keras_pickle in band", KP, lambda: common.dumps(model, in_band=True), ours),
        Contender("keras_pickle.dumps in band", KP, lambda: (keras_pickle.dumps(model, protocol=5), []), ours),
        Contender("floor out of band", KERAS, lambda: common.config_json(model)),
        Contender("keras_pickle out of band", KP, lambda: common.dumps(model), ours),
    ]
    times = race(contenders, repeat, notes)
    b = {name: best(t) for name, t in times.items()}
    out_of_band = sum(memoryview(buffer).nbytes for buffer in common.dumps(model)[1])
    if out_of_band != state:
        notes.append(f"keras_pickle hands out {out_of_band} bytes out of band, the floor copies {state}")
    row = {"model": subject.name, "state_bytes": state, "floor_inband_s": b["floor in band"]}
    row.update(floor_oob_s=b["floor out of band"], all_s=times, notes=notes)
    for key, band in (("inband", "in band"), ("dumps_inband", "in band"), ("oob", "out of band")):
        ours = b[f"keras_pickle{'.dumps' if key == 'dumps_inband' else ''} {band}"]
        row[f"keras_pickle_{key}_s"], row[f"{key}_ratio"] = ours, ratio(ours, b[f"floor {band}"])
    return row


# --------------------------------------------------------------------------
# keras_pickle internals: the only place the benchmarks use them. The public API can neither run one
# phase of a dumps on its own nor say how often a dumps walks a model, which these two measure.
# --------------------------------------------------------------------------

WALKERS = (("keras_pickle._keras3.names", "_walk_layers"), ("keras_pickle._capture.custom_objects", "_live_index"))


def dumps_phases(subject: Subject, repeat: int) -> dict:
    """keras_pickle's out-of-band dumps and its phases, each called on its own."""
    from keras_pickle._capture import config, custom_objects, gather_state, payload

    model = subject.model
    common.use(KP)
    model_config, body = config.config_of(model), payload.layer_payload(model, 5)  # what __reduce_ex__ pickles
    phases = {
        "config_of": lambda: config.config_of(model),
        "custom objects": lambda: custom_objects.collect(model_config, [model]),
        "state capture": lambda: gather_state.capture(model),
        "pickle payload": lambda: pickle.dumps(body, protocol=5, buffer_callback=[].append),
    }
    contenders = [Contender("total", KP, lambda: common.dumps(model), subject.payload_check(KP))]
    contenders += [Contender(name, KP, run) for name, run in phases.items()]
    contenders.append(Contender("keras serialize", KERAS, lambda: common.config_json(model)))
    times = race(contenders, repeat)
    b = {name: best(t) for name, t in times.items()}
    row = {f"{name.replace(' ', '_')}_s": b[name] for name in phases}
    row.update(other_s=b["total"] - sum(b[n] for n in phases), keras_serialize_s=b["keras serialize"])
    return {"model": subject.name, "total_s": b["total"], **row, "all_s": times}


def count_walks(model, fn) -> dict[str, int]:
    """How often ``fn()`` walks ``model``'s layers: Keras's ``_flatten_layers`` of the model or of one of
    its layers, ``model.variables`` (which walks them itself), and keras_pickle's own walkers."""
    from keras.src.layers.layer import Layer

    counts: collections.Counter = collections.Counter()
    watched = {id(layer) for layer in model._flatten_layers(include_self=True, recursive=True)}
    flatten, variables = Layer._flatten_layers, Layer.variables

    def counted_flatten(self, *args, **kwargs):
        if id(self) in watched:
            counts[f"_flatten_layers of {'the model' if self is model else 'a layer'}"] += 1
        return flatten(self, *args, **kwargs)

    def counted_variables(self):
        counts["model.variables"] += self is model
        return variables.fget(self)

    def counted(label, function):
        def walker(*args, **kwargs):
            counts[label] += 1
            return function(*args, **kwargs)

        return walker

    patched = []
    for module_name, name in WALKERS:  # a walker renamed since is not counted: the output says which were
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, name):
            patched.append((module, name, getattr(module, name)))
            setattr(module, name, counted(f"{module_name}.{name}", getattr(module, name)))
    Layer._flatten_layers, Layer.variables = counted_flatten, property(counted_variables)
    try:
        fn()
    finally:
        Layer._flatten_layers, Layer.variables = flatten, variables
        for module, name, function in patched:
            setattr(module, name, function)
    return {"walkers counted": len(patched), **{k: v for k, v in counts.items() if v}}


def walks(names: list[str], quick: bool) -> dict:
    out: dict = {}
    for name in names:
        common.use(KP)
        model = models.BENCH[name](quick)
        for what, subject in (("dumps", model), ("dumps of a loaded copy", common.loads(common.dumps(model)))):
            counts = out.setdefault(name, {})[what] = count_walks(subject, functools.partial(common.dumps, subject))
            total = sum(v for k, v in counts.items() if k != "walkers counted")
            print(f"walks of {name} per {what}: {total} {counts}")
    return out


# --------------------------------------------------------------------------
# 2. Loads and deepcopy vs the floor
# --------------------------------------------------------------------------


def construct_layers(config: dict) -> list:
    """Keras constructing and building every layer a Functional or Sequential config lists, with no
    initializer run (``keras.StatelessScope(initialize_variables=False)``): Keras's own work per layer,
    without a graph, an initial value or a saved one; the least any rebuild from a config pays."""
    uninitialized = global_state.get_global_attribute("uninitialized_variables")
    try:
        with keras.StatelessScope(initialize_variables=False):
            return [keras.saving.deserialize_keras_object(c) for c in config["config"]["layers"]]
    finally:  # the scope registers every variable it defers: do not let the bench accumulate them
        global_state.set_global_attribute("uninitialized_variables", uninitialized)


def floor_loads(subject: Subject, repeat: int) -> dict:
    model, notes = subject.model, []
    common.use(KERAS)
    config_json, saved = common.config_json(model), model.get_weights()
    common.use(KP)
    payload = common.dumps(model)

    def floor():
        rebuilt = keras.saving.deserialize_keras_object(json.loads(config_json))
        rebuilt.set_weights(saved)
        return rebuilt

    def linear_floor():  # one graph build: Sequential.from_config rebuilds after every layer it adds
        config = json.loads(config_json)["config"]
        rebuilt = keras.Sequential([keras.saving.deserialize_keras_object(c) for c in config["layers"]])
        rebuilt.set_weights(saved)
        return rebuilt

    listed = len(json.loads(config_json)["config"].get("layers", []))

    def all_layers(result, first):
        if len(result) != listed or not all(isinstance(layer, keras.Operation) for layer in result):
            raise AssertionError(f"the bound built {len(result)} layers, the config lists {listed}")

    floor_check, ours = subject.check(weights_only=True), subject.check()
    contenders = [Contender("floor", KERAS, floor, floor_check)]
    if isinstance(model, keras.Sequential):
        contenders.append(Contender("linear floor", KERAS, linear_floor, floor_check))
    if listed:
        bound = Contender("construction bound", KERAS, lambda: construct_layers(json.loads(config_json)), all_layers)
        contenders.append(bound)
    contenders += [
        Contender("keras_pickle loads", KP, lambda: common.loads(payload), ours),
        Contender("keras_pickle deepcopy", KP, lambda: copy.deepcopy(model), ours),
    ]
    times = race(contenders, repeat, notes)
    b = {name: best(t) for name, t in times.items()}
    row = {"model": subject.name, "n_layers": len(model.layers), "floor_s": b["floor"]}
    for op in ("loads", "deepcopy"):
        row[f"keras_pickle_{op}_s"] = b[f"keras_pickle {op}"]
        row[f"{op}_ratio"] = ratio(b[f"keras_pickle {op}"], b["floor"])
        if "linear floor" in b:
            row[f"{op}_ratio_linear"] = ratio(b[f"keras_pickle {op}"], b["linear floor"])
    row.update(linear_floor_s=b.get("linear floor"), construction_bound_s=b.get("construction bound"))
    row["construction_bound_ratio"] = ratio(b.get("construction bound"), b["floor"])
    return {**row, "all_s": times, "notes": notes}


# --------------------------------------------------------------------------
# 3. Keras's own pickling vs keras_pickle
# --------------------------------------------------------------------------


def vs_keras(subject: Subject, op: str, repeat: int, workload: str | None = None) -> dict:
    """Best-of-``repeat`` times of ``op`` with Keras's own pickling and with keras_pickle, interleaved."""
    model, notes = subject.model, []

    def contender(impl: str) -> Contender:
        if op == "dumps":
            return Contender(impl, impl, lambda: common.dumps(model), subject.payload_check(impl))
        if op in ("loads", LOADS_IN_A_ROW):  # ten loads: each result dropped as the next starts, as in a worker
            common.use(impl)
            payload = common.dumps(model)
            subject.payload_check(impl)(payload, False)
            return Contender(impl, impl, lambda: loads_in_a_row(payload, 1 if op == "loads" else 10), subject.check())
        run = {"deepcopy": lambda: copy.deepcopy(model), "dumps+loads": lambda: common.loads(common.dumps(model))}[op]
        return Contender(impl, impl, run, subject.check())

    times = race([contender(KERAS), contender(KP)], repeat, notes)
    return timing_row(workload or subject.name, op, times, notes=notes)


def loads_in_a_row(payload: tuple[bytes, list], n: int):
    for _ in range(n - 1):
        common.loads(payload)  # dropped as the next one starts
    return common.loads(payload)


def timing_row(workload: str, op: str, times: dict | None = None, **extra) -> dict:
    r = {"workload": workload, "op": op, **extra}
    if times is not None:
        r.update(keras_s=best(times[KERAS]), keras_pickle_s=best(times[KP]))
        r.update(keras_all_s=times[KERAS], keras_pickle_all_s=times[KP])
    if r.get("keras_s") is not None and r.get("keras_pickle_s"):
        r["ratio"] = r["keras_s"] / r["keras_pickle_s"]
    return r


# --------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------


class Run:
    """The results being gathered, and how to report progress and failures (the run goes on)."""

    def __init__(self, quick: bool, repeat: int):
        self.quick, self.repeat, self.started = quick, repeat, time.perf_counter()
        self.results = {"models": {}, "floors": {"dumps": [], "loads": []}, "dumps_phases": [], "timings": []}
        self.results.update(sweep={}, memory=[], errors=[])

    def say(self, message: str) -> None:
        print(f"{time.perf_counter() - self.started:7.1f}s  {message}", flush=True)

    def attempt(self, what: str, op: str, fn, into: list | None = None):
        self.say(f"[{what}] {op}")
        try:
            result = fn()
        except Exception as e:
            error = {"workload": what, "op": op, "error": repr(e), "traceback": traceback.format_exc()}
            self.results["errors"].append(error)
            self.say(f"[{what}] {op} FAILED: {e!r}\n{error['traceback']}")
            return None
        if into is not None:
            into.append(result)
        return result


def measure_model(run: Run, name: str) -> None:
    """Everything :data:`PLANS` lists for one model, on one build of it."""
    (dumps_floor, loads_floor, ops), res = PLANS[name], run.results
    repeat = run.repeat * (10 if name == "mlp3" else 1)  # milliseconds per run
    common.use(KP)
    subject = Subject(name, models.BENCH[name](run.quick))
    info = res["models"][name] = common.describe(subject.model)
    run.say(f"[{name}] {info['params']:,} params, {info['n_layers']} layers, {mb(info['state_bytes'])} state")
    if dumps_floor:
        run.attempt(name, f"floor_dumps x{repeat}", lambda: floor_dumps(subject, repeat), res["floors"]["dumps"])
        run.attempt(name, f"dumps_phases x{repeat}", lambda: dumps_phases(subject, repeat), res["dumps_phases"])
    if loads_floor:
        run.attempt(name, f"floor_loads x{repeat}", lambda: floor_loads(subject, repeat), res["floors"]["loads"])
    for op in ops:
        row = run.attempt(name, f"{op} vs Keras x{repeat}", lambda op=op: vs_keras(subject, op, repeat))
        res["timings"].append(row or timing_row(name, op, error="failed"))
    by_op = {r["op"]: r for r in res["timings"] if r["workload"] == name and "keras_s" in r}
    if name == "resnet50" and {"dumps", "loads"} <= set(by_op):  # dumps+loads as the sum of the best of each
        keras_s, kp_s = (by_op["dumps"][k] + by_op["loads"][k] for k in ("keras_s", "keras_pickle_s"))
        notes = ["sum of the best dumps and the best loads"]
        res["timings"].append(timing_row(name, "dumps+loads", keras_s=keras_s, keras_pickle_s=kp_s, notes=notes))


def drop_models() -> None:
    common.use(KP)
    keras.backend.clear_session()
    gc.collect()


def sweep_specs(quick: bool) -> list[tuple[str, dict]]:
    points = (QUICK_SWEEP if quick else SWEEP).items()
    return [(axis, {"kind": "wide" if axis == "params" else "depth", axis: n}) for axis, ns in points for n in ns]


def run_sweep(run: Run) -> None:
    run.results["sweep"] = {"params": [], "depth": []}
    for axis, spec in sweep_specs(run.quick):
        run.results["sweep"][axis].append(sweep_point(run, axis, spec))
        drop_models()


def sweep_point(run: Run, axis: str, spec: dict) -> dict:
    common.use(KP)
    subject = Subject(f"{axis}={spec[axis]}", models.build(spec))
    point = {**spec, **common.describe(subject.model)}
    run.say(f"[sweep {axis}={spec[axis]:,}] {point['params']:,} params, {mb(point['state_bytes'])} state")
    for op in ("dumps", "loads"):
        row = run.attempt(subject.name, op, lambda op=op: vs_keras(subject, op, run.repeat, "sweep"))
        if row is not None:
            point[op] = row
    return point


def memory_of(spec: dict) -> dict:
    """In a child process: peak extra memory of dumps and loads of one model with one implementation."""
    impl = spec["impl"]
    common.use(impl)
    warm = models.build(models.tiny_spec(spec["model"]))
    common.loads(common.dumps(warm))  # the code paths, once
    del warm
    model = models.build(spec["model"])
    out = {"impl": impl, "model": spec["model"], **common.describe(model)}
    payload, out["dumps_peak_extra"], out["dumps_retained"] = common.peak_memory(lambda: common.dumps(model))
    if common.is_ours(payload[0]) != (impl == KP):
        raise AssertionError(f"{impl} produced the wrong kind of payload: the wrong path was measured")
    out["payload_inband_bytes"] = len(payload[0])
    out["payload_outofband_bytes"] = sum(memoryview(b).nbytes for b in payload[1])
    result, out["loads_peak_extra"], out["loads_retained"] = common.peak_memory(lambda: common.loads(payload))
    problem = common.mismatch(model, result)
    if problem and impl == KP:
        raise AssertionError(f"keras_pickle returned a wrong result: {problem}")
    out["loads_result_ok"] = problem is None
    for op in ("dumps", "loads"):
        out[f"{op}_peak_extra_x"] = out[f"{op}_peak_extra"] / out["state_bytes"]
    return {**out, "keras_pickle_source": common.source_revision()}


def run_memory(run: Run, names: list[str], with_sweep: bool) -> None:
    """dense100mb and every sweep point, both implementations, each in a child process, two at a time, the
    slowest first (Keras's own reload of a deep Sequential is quadratic); ``--quick``: one child for all."""
    jobs = [{"model": {"kind": "dense100mb", "quick": run.quick}, "label": "dense100mb"}] * ("dense100mb" in names)
    points = sweep_specs(run.quick) if with_sweep else []
    jobs += [{"model": spec, "label": f"{axis} {spec[axis]}", "axis": axis} for axis, spec in points]
    jobs = [{**job, "impl": impl} for job in jobs for impl in IMPLS]
    jobs.sort(key=lambda job: (job["impl"] == KERAS, job["model"].get("depth", 0), job["model"].get("params", 0)))
    groups = [jobs] if run.quick else [[job] for job in reversed(jobs)]
    run.say(f"[memory] {len(jobs)} measurements in child processes")
    with ThreadPoolExecutor(2) as pool:
        done = pool.map(
            lambda group: common.child("bench", "--memory-child", json.dumps(group), env=common.NO_ONEDNN), groups
        )
        for group, (results, error) in zip(groups, done):
            for job, result in zip(group, results + [None] * len(group)):
                label = f"memory {job['label']} {job['impl']}"
                if result is None:
                    run.results["errors"].append({"workload": label, "op": "memory", "error": error or "no result"})
                    run.say(f"[{label}] FAILED: {error}")
                    continue
                run.results["memory"].append(m := {**result, "label": job["label"], "axis": job.get("axis")})
                peaks = [
                    f"{op} {mb(m[f'{op}_peak_extra'])} ({m[f'{op}_peak_extra_x']:.2f}x)" for op in ("dumps", "loads")
                ]
                run.say(f"[{label}] {', '.join(peaks)} of {mb(m['state_bytes'])} state")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if tuple(models.BENCH) != MODEL_NAMES or tuple(PLANS) != MODEL_NAMES:
        raise RuntimeError(f"_bench_args.MODEL_NAMES {MODEL_NAMES} differ from models.BENCH {tuple(models.BENCH)}")
    if args.memory_child:
        for spec in json.loads(args.memory_child):
            common.emit(memory_of(spec))
            drop_models()
        return 0
    run = Run(args.quick, args.repeat)
    source, names = common.source_revision(), args.only or list(PLANS)  # what was imported, before anyone edits it
    run.say(f"keras_pickle {keras_pickle.__version__} from {Path(keras_pickle.__file__).parent} ({source})")
    for name in names:
        measure_model(run, name)
        drop_models()
    if not args.no_sweep:
        run_sweep(run)
    if not args.no_memory:
        run_memory(run, names, with_sweep=not args.no_sweep)
        moved = {m["keras_pickle_source"] for m in run.results["memory"]} - {source}
        if moved:
            run.say(f"WARNING: keras_pickle changed during the run; memory children measured {', '.join(moved)}")
    if args.walks:
        run.results["walks"] = walks(names, args.quick)
    results = run.results
    print_all(results, args.repeat)
    results["goals"] = goals(results, args.quick)
    print_goals(results["goals"], args.quick)
    for e in results["errors"]:
        print(f"\nERROR in {e['workload']} {e['op']}: {e['error']}\n{e.get('traceback', '')}")
    wall = time.perf_counter() - run.started
    results = {"meta": common.meta(quick=args.quick, repeat=args.repeat, wall_s=wall), **results}
    common.write_json(args.json, results)
    if results["sweep"]:
        title = f"Keras {keras.__version__} pickling vs keras_pickle {keras_pickle.__version__} "
        draw_chart(results, args.png, title + f"({keras.backend.backend()} backend, {os.cpu_count()} CPUs)")
    print(f"wall time {wall:.0f} s")
    return 1 if results["errors"] else 0


# --------------------------------------------------------------------------
# Tables, goals, chart
# --------------------------------------------------------------------------

FLOOR_DUMPS_MAX, FLOOR_LOADS_MAX, LINEAR_MAX_SLOPE = 1.3, 0.5, 1.2  # slope over the three largest sweep points
SPEED_GOALS = {"mlp3 dumps+loads": 10, "dense100mb dumps": 5, "dense100mb loads": 3, "dense100mb deepcopy": 3}
SPEED_GOALS.update({"deep150 loads": 10, "resnet50 dumps+loads": 2})  # minimum of Keras's time / keras_pickle's
MEMORY_GOALS = {"dumps": 0.25, "loads": 1.5}  # peak extra memory of dense100mb, x state bytes


def cell(row: dict, key: str) -> str:
    value = row.get(key)
    if value is None or isinstance(value, str):
        return "—" if value is None else value
    if key.endswith("bytes") or key.endswith("peak_extra"):
        return mb(value)
    if "ratio" in key or key.endswith("_x"):
        return f"{value:.2f}x"
    return f"{value:.4f}" if key.endswith("_s") else f"{value:,}"


def show(title: str, rows: list[dict], columns: str, *notes: str) -> None:
    """A table of ``rows`` (dicts); ``columns``: "header=key, header=key, ..."."""
    pairs = [column.split("=") for column in columns.split(", ")]
    if rows:
        common.table(title, [h for h, _ in pairs], [[cell(r, key) for _, key in pairs] for r in rows], notes)


def print_all(results: dict, repeat: int) -> None:
    floors, best_of = results["floors"], f"s (best of {repeat})"
    columns = "model=model, state=state_bytes, floor in band=floor_inband_s, kp.dumps=keras_pickle_dumps_inband_s, "
    columns += "ratio=dumps_inband_ratio, pickle.dumps=keras_pickle_inband_s, ratio=inband_ratio, "
    columns += "floor oob=floor_oob_s, kp oob=keras_pickle_oob_s, ratio=oob_ratio"
    show(
        f"Dumps vs the floor, {best_of}",
        floors["dumps"],
        columns,
        f"ratio = keras_pickle / floor (goal <= {FLOOR_DUMPS_MAX}x); kp.dumps: keras_pickle.dumps(model, protocol=5); "
        "pickle.dumps: pickle.dumps(model, protocol=5), installed; kp oob: with a buffer_callback",
        "floor in band: Keras's config JSON + one copy of the state bytes; floor oob: the config JSON alone",
    )
    phases = ("config_of", "custom_objects", "state_capture", "pickle_payload", "other")
    shares = [
        {p: f"{r[f'{p}_s']:.4f} ({r[f'{p}_s'] / r['total_s']:.0%})" for p in phases} for r in results["dumps_phases"]
    ]
    show(
        "Where keras_pickle's dumps (out of band) spends its time, s (share of the total)",
        [{**r, **share} for r, share in zip(results["dumps_phases"], shares)],
        "model=model, total=total_s, " + ", ".join(f"{p}={p}" for p in phases) + ", Keras serialize=keras_serialize_s",
        "each phase called on its own (keras_pickle._capture: config.config_of, custom_objects.collect, "
        "gather_state.capture, pickle.dumps of payload.layer_payload's); other = total - the four",
    )
    rows = []
    for r in floors["loads"]:
        rows.append(r)
        if r.get("linear_floor_s") is not None:
            linear = {"model": f"{r['model']} vs linear floor", "floor_s": r["linear_floor_s"]}
            linear.update({f"{op}_ratio": r[f"{op}_ratio_linear"] for op in ("loads", "deepcopy")})
            rows.append({**r, **linear, "construction_bound_ratio": ""})
    columns = "model=model, layers=n_layers, floor=floor_s, kp loads=keras_pickle_loads_s, ratio=loads_ratio, "
    columns += "kp deepcopy=keras_pickle_deepcopy_s, ratio=deepcopy_ratio, bound=construction_bound_ratio"
    show(
        f"Loads and deepcopy vs the floor, {best_of}",
        rows,
        columns,
        f"ratio = keras_pickle / floor (goal <= {FLOOR_LOADS_MAX}x); floor: Keras's deserialize_keras_object + "
        "set_weights; linear floor: keras.Sequential(deserialized layers) + set_weights",
        "bound: Keras constructing and building the config's layers with no initializer run, / floor",
    )
    show(
        f"Keras's own pickling vs keras_pickle, {best_of}",
        results["timings"],
        "workload=workload, op=op, keras=keras_s, keras_pickle=keras_pickle_s, ratio=ratio",
        "ratio = keras / keras_pickle; protocol 5 with a buffer_callback; keras: KerasSaveable.__reduce__",
        f"mlp3: best of {10 * repeat}, its dumps+loads one round trip; resnet50's: the sum of the best of each",
    )
    for name, i in results["models"].items():
        print(f"{name}: {i['params']:,} params, {i['n_layers']} layers, state {mb(i['state_bytes'])}")
    for r in results["timings"] + floors["dumps"] + floors["loads"]:
        for note in r.get("notes", []):
            print(f"note [{r.get('workload', r.get('model'))} {r.get('op', '')}]: {note}")
    sweep = results["sweep"]
    ops = ("dumps", "loads")
    rows = [{**p, **p[o], "at": f"{a}={p[a]:,}", "op": o} for a in sweep for p in sweep[a] for o in ops if o in p]
    columns = (
        "point=at, params=params, state=state_bytes, op=op, keras=keras_s, keras_pickle=keras_pickle_s, ratio=ratio"
    )
    show(
        "Sweep, s (best of N; a run over 15 s is not repeated)",
        rows,
        columns,
    )
    memory = sorted(results["memory"], key=lambda m: (m.get("axis") or "", m["state_bytes"], m["n_layers"], m["impl"]))
    columns = "model=label, impl=impl, state=state_bytes, dumps peak=dumps_peak_extra, dumps x=dumps_peak_extra_x, "
    columns += "loads peak=loads_peak_extra, loads x=loads_peak_extra_x"
    show("Peak extra resident memory (child processes)", memory, columns, "VmHWM - VmRSS around it; x: / state bytes")


def goals(results: dict, quick: bool) -> list[dict]:
    """Every goal, its measured value and whether it passed; ``quick`` (tiny models): shown, not judged.
    A goal with no target is information, not a goal."""
    out = []

    def add(label, value, unit, at_most=None, at_least=None):
        passed = None if value is None or quick else value <= at_most if at_most is not None else value >= at_least
        if at_most is None and at_least is None:
            out.append({"goal": f"{label} (not a goal)", "value": value, "unit": unit, "pass": None, "info": True})
        else:
            out.append({"goal": label, "value": value, "unit": unit, "target": at_most or at_least, "pass": passed})

    for r in results["floors"]["dumps"]:
        add(
            f"{r['model']} dumps in band <= {FLOOR_DUMPS_MAX}x floor",
            r["dumps_inband_ratio"],
            "x floor",
            FLOOR_DUMPS_MAX,
        )
        add(f"{r['model']} dumps out of band <= {FLOOR_DUMPS_MAX}x floor", r["oob_ratio"], "x floor", FLOOR_DUMPS_MAX)
        add(f"{r['model']} plain pickle.dumps in band", r["inband_ratio"], "x floor")
    for r in results["floors"]["loads"]:
        for op in ("loads", "deepcopy"):
            add(f"{r['model']} {op} <= {FLOOR_LOADS_MAX}x floor", r[f"{op}_ratio"], "x floor", FLOOR_LOADS_MAX)
        if r.get("construction_bound_ratio") is not None:
            add(f"{r['model']} construction bound", r["construction_bound_ratio"], "x floor")
        for op in ("loads", "deepcopy") if r.get("linear_floor_s") is not None else ():
            add(f"{r['model']} {op} vs linear floor", r[f"{op}_ratio_linear"], "x linear floor")
    for label, minimum in SPEED_GOALS.items():
        r = next((r for r in results["timings"] if f"{r['workload']} {r['op']}" == label), {})
        add(f"{label} >= {minimum}x Keras", r.get("ratio"), "x faster", at_least=minimum)
    kp = next((m for m in results["memory"] if m.get("label") == "dense100mb" and m["impl"] == KP), {})
    for op, maximum in MEMORY_GOALS.items():
        add(
            f"dense100mb peak extra memory, {op} <= {maximum}x state",
            kp.get(f"{op}_peak_extra_x"),
            "x state bytes",
            maximum,
        )
    slope = f"log-log slope <= {LINEAR_MAX_SLOPE}"
    for axis, what in (("params", "state size"), ("depth", "depth")):
        points = results["sweep"].get(axis, [])[-3:]
        for op in ("dumps", "loads"):
            xy = [
                (p["state_bytes"] if axis == "params" else p["depth"], p[op]["keras_pickle_s"])
                for p in points
                if op in p
            ]
            value = common.loglog_slope(xy) if len(xy) == 3 else None
            add(f"keras_pickle {op} time vs {what}: {slope}", value, "(1 = linear)", LINEAR_MAX_SLOPE)
    wide = sorted(
        (m["state_bytes"], m["loads_peak_extra"])
        for m in results["memory"]
        if m["impl"] == KP and m.get("axis") == "params"
    )
    value = common.loglog_slope(wide[-3:]) if len(wide) >= 3 else None
    add(f"keras_pickle loads peak memory vs state size: {slope}", value, "(1 = linear)", LINEAR_MAX_SLOPE)
    return out


def print_goals(goals: list[dict], quick: bool) -> None:
    rows = []
    for g in goals:
        measured = "—" if g["value"] is None else f"{g['value']:.2f}"
        if g.get("target") is not None and measured == f"{g['target']:.2f}":  # 0.5004 would read as 0.50 MISS
            measured = f"{g['value']:.4f}"
        status = "not measured" if g["value"] is None else "not judged (--quick)" if quick else "MISS"
        status = "info" if g.get("info") else "PASS" if g["pass"] else status
        rows.append([g["goal"], f"{measured} {g['unit']}" if g["value"] is not None else measured, status])
    common.table("Goals", ["goal", "measured", "status"], rows)


def x_of(point: dict, axis: str) -> float:
    """A sweep point's or a memory result's place on the chart: its state in MiB, or its depth."""
    return point["state_bytes"] / 2**20 if axis == "params" else point["n_layers"]


def draw_chart(results: dict, path: Path, title: str) -> None:
    """2 x 2, log x: time vs state size and vs depth (log y); peak extra memory (child processes) vs state size,
    as a multiple of the state (flat: linear growth), and vs depth in MiB (log y)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib); no chart drawn.")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    for col, axis in enumerate(("params", "depth")):
        for op, impl in [(op, impl) for op in ("dumps", "loads") for impl in IMPLS]:
            key = "keras_s" if impl == KERAS else "keras_pickle_s"
            times = [(x_of(p, axis), p[op][key]) for p in results["sweep"].get(axis, []) if op in p]
            key, scale = (f"{op}_peak_extra_x", 1) if axis == "params" else (f"{op}_peak_extra", 2**20)
            memory = [
                (x_of(m, axis), m[key] / scale) for m in results["memory"] if (m["impl"], m.get("axis")) == (impl, axis)
            ]
            for ax, xy in ((axes[0, col], times), (axes[1, col], sorted(memory))):
                if xy:
                    color = "tab:red" if impl == KERAS else "tab:blue"
                    ax.plot(*zip(*xy), "-o" if op == "dumps" else "--s", color=color, label=f"{impl} {op}")
        xlabel = "state size (MiB, float32 weights)" if axis == "params" else "depth (Dense(32) layers)"
        memory_label = "peak extra RSS / state bytes" if axis == "params" else "peak extra RSS (MiB)"
        for row, (ax, ylabel) in enumerate(zip(axes[:, col], ("best time (s)", memory_label))):
            logy = row == 0 or axis == "depth"
            name = f"{'time' if row == 0 else 'peak extra memory'} vs {xlabel.split(' (')[0]}"
            ax.set(xscale="log", yscale="log" if logy else "linear", xlabel=xlabel, ylabel=ylabel)
            ax.set_title(name + (" (log-log)" if logy else ""))
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_lines():
                ax.legend(fontsize="small")
    for op, target in MEMORY_GOALS.items():
        axes[1, 0].axhline(target, color="gray", linestyle=":", linewidth=1)
        axes[1, 0].annotate(f"goal {op} <= {target}x", (0.01, target), xycoords=("axes fraction", "data"), fontsize=7)
    axes[1, 0].set_ylim(bottom=0)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"chart written to {path}")
