"""keras_pickle against Keras 3's own pickling and against "the floor", side by side, in one process.

Best of N, contenders interleaved (``common.race``); every result checked outside the timed region (variables
every run, outputs on a fixed batch the first): a wrong keras_pickle result raises, another is noted.

1. Dumps vs the floor: ``pickle.dumps(model, protocol=5)`` and ``keras_pickle.dumps``, in band against the
   config JSON plus one copy of the state bytes (``common.in_band_floor``), out of band against the config
   JSON alone (goal <= 1.3x); and how many out-of-band buffers are copies.
2. Loads and deepcopy vs Keras's ``deserialize_keras_object`` + ``set_weights``, and the "bound": Keras
   building the config's layers with no initializer run (goal <= 0.5x).
3. Keras's own pickling (a .keras zip) vs keras_pickle, protocol 5 with a ``buffer_callback``.
4. Sweeps: 4 wide Dense layers up to 1 GiB of state, n x Dense(32) up to 500 layers (a run over 15 s is not
   repeated); keras_pickle's log-log slope over the last three points.
5. Memory: peak extra RSS of dumps and loads of dense100mb and every sweep point, per implementation, in
   child processes (``common.memory_of``).

:data:`PLANS` says which model gets 1, 2 and which ops of 3. ``--quick``: tiny models of each kind. Variables
stay where ``KERAS_BACKEND``'s backend puts them (checked). A full run writes docs/bench-results.json and
docs/bench.png (2 x 2), any other benchmarks/results/::

    python -m benchmarks bench [--quick] [--repeat N] [--only MODEL ...] [--no-sweep] [--no-memory]
    KERAS_BACKEND=jax python -m benchmarks bench --only dense100mb --no-sweep --no-memory   # one backend's figures
"""

from __future__ import annotations

import copy
import gc
import json
import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
from keras.src.backend.common import global_state  # Keras's own: see construct_layers

import keras_pickle
from benchmarks import common, models
from benchmarks.common import IMPLS, KERAS, KP, Contender, mb, race, ratio

ROW = "10 loads in a row"
PLANS = {  # model: (dumps vs the floor, loads vs the floor, ops vs Keras's own pickling)
    "mlp3": (True, False, ("dumps", "loads", "dumps+loads")),
    "mobilenetv3small": (True, True, ()),
    "efficientnetb0": (False, True, ()),
    "resnet50": (True, True, ("dumps", "loads")),
    "deep150": (False, True, ("dumps", "loads")),
    "dense100mb": (True, False, ("dumps in band", "dumps", "loads", ROW, "deepcopy")),
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


def floor_dumps(subject: Subject, repeat: int) -> dict:
    """1. keras_pickle's dumps against the floors."""
    model, notes = subject.model, []
    state = common.nbytes(common.state_variables(model))

    def one_copy(result, first):
        if len(result[1]) != state:
            raise AssertionError(f"the floor copied {len(result[1])} bytes, not the state's {state}")

    def kp_dumps():
        return keras_pickle.dumps(model, protocol=5), []

    ours = subject.payload_check(KP)
    runs = [  # (key, impl, run, check, the floor it is a ratio of, the ratio's key)
        ("floor_inband", KERAS, lambda: common.in_band_floor(model), one_copy, None, None),
        ("keras_pickle_inband", KP, lambda: common.dumps(model, in_band=True), ours, "floor_inband", "inband"),
        ("keras_pickle_dumps_inband", KP, kp_dumps, ours, "floor_inband", "dumps_inband"),
        ("floor_oob", KERAS, lambda: common.config_json(model), None, None, None),
        ("keras_pickle_oob", KP, lambda: common.dumps(model), ours, "floor_oob", "oob"),
    ]
    times = race([Contender(*run[:4]) for run in runs], repeat, notes)
    row = {"model": subject.name, "state_bytes": state, "all_s": times, "notes": notes}
    row.update({f"{key}_s": min(t) for key, t in times.items()})
    row.update({f"{name}_ratio": ratio(row[f"{key}_s"], row[f"{floor}_s"]) for key, *_, floor, name in runs if floor})
    buffers = [np.frombuffer(buffer.raw(), np.uint8) for buffer in common.dumps(model)[1]]
    if sum(buffer.nbytes for buffer in buffers) != state:
        notes.append(f"keras_pickle does not hand out the state's {state} bytes out of band")
    # Zero-copy: the buffers that share memory with the live variables (read as common.raw_bytes does)
    live = common.state_variables(model) + [v for m in model.metrics for v in m.variables]
    values = [common.raw_bytes(v) for v in live]
    row["buffers"] = len(buffers)
    row["copied_buffers"] = sum(not any(np.may_share_memory(b, v) for v in values) for b in buffers)
    return row


def construct_layers(config: dict) -> list:
    """Keras constructing and building every layer a config lists, no initializer run: the least any rebuild
    from a config pays. Keras's global list of deferred variables (no public reset) is put back after each run."""
    uninitialized = global_state.get_global_attribute("uninitialized_variables")
    try:
        with keras.StatelessScope(initialize_variables=False):
            return [keras.saving.deserialize_keras_object(c) for c in config["config"]["layers"]]
    finally:
        global_state.set_global_attribute("uninitialized_variables", uninitialized)


def floor_loads(subject: Subject, repeat: int) -> dict:
    """2. keras_pickle's loads and deepcopy against Keras's from_config + set_weights."""
    model, notes = subject.model, []
    common.use(KERAS)
    config, saved = common.config_json(model), model.get_weights()
    common.use(KP)
    payload, listed = common.dumps(model), len(json.loads(config)["config"].get("layers", []))

    def floor():
        rebuilt = keras.saving.deserialize_keras_object(json.loads(config))
        rebuilt.set_weights(saved)
        return rebuilt

    def all_layers(result, first):
        if len(result) != listed or not all(isinstance(layer, keras.Operation) for layer in result):
            raise AssertionError(f"the bound built {len(result)} layers, the config lists {listed}")

    floor_check, ours = subject.check(weights_only=True), subject.check()
    contenders = [Contender("floor", KERAS, floor, floor_check)]
    if listed:
        contenders.append(Contender("bound", KERAS, lambda: construct_layers(json.loads(config)), all_layers))
    contenders.append(Contender("loads", KP, lambda: common.loads(payload), ours))
    contenders.append(Contender("deepcopy", KP, lambda: copy.deepcopy(model), ours))
    b = {name: min(t) for name, t in race(contenders, repeat, notes).items()}
    row = {"model": subject.name, "n_layers": len(model.layers), "floor_s": b["floor"], "notes": notes}
    row["construction_bound_ratio"] = ratio(b.get("bound"), b["floor"])
    for op in ("loads", "deepcopy"):
        row[f"keras_pickle_{op}_s"], row[f"{op}_ratio"] = b[op], ratio(b[op], b["floor"])
    return row


def vs_keras(subject: Subject, op: str, repeat: int, **extra) -> dict:
    """3. Best-of-``repeat`` times of ``op`` with Keras's own pickling and with keras_pickle, interleaved."""
    model, notes = subject.model, []

    def contender(impl: str) -> Contender:
        in_band, what = op.endswith(" in band"), op.removesuffix(" in band")
        if what == "dumps":
            run = lambda: common.dumps(model, in_band=in_band)  # noqa: E731
            return Contender(impl, impl, run, subject.payload_check(impl))
        if what in ("loads", ROW):  # ten loads: each result dropped as the next starts, as in a worker
            common.use(impl)
            payload = common.dumps(model, in_band=in_band)
            subject.payload_check(impl)(payload, False)
            return Contender(impl, impl, lambda: loads_in_a_row(payload, 10 if op == ROW else 1), subject.check())
        run = {"deepcopy": lambda: copy.deepcopy(model), "dumps+loads": lambda: common.loads(common.dumps(model))}[op]
        return Contender(impl, impl, run, subject.check())

    times = race([contender(KERAS), contender(KP)], repeat, notes)
    return timing_row(subject.name, op, min(times[KERAS]), min(times[KP]), notes=notes, all_s=times, **extra)


def loads_in_a_row(payload: tuple[bytes, list], n: int):
    for _ in range(n - 1):
        common.loads(payload)  # dropped as the next one starts
    return common.loads(payload)


def timing_row(workload: str, op: str, keras_s: float, keras_pickle_s: float, **extra) -> dict:
    times = {"keras_s": keras_s, "keras_pickle_s": keras_pickle_s, "ratio": ratio(keras_s, keras_pickle_s)}
    return {"workload": workload, "op": op, **times, **extra}


# Running it: a failure is reported and the run goes on

STARTED = time.perf_counter()
RESULTS: dict = {"models": {}, "floors": {"dumps": [], "loads": []}, "timings": [], "memory": [], "errors": []}


def say(message: str) -> None:
    print(f"{time.perf_counter() - STARTED:7.1f}s  {message}", flush=True)


def attempt(what: str, fn, into: list) -> None:
    say(what)
    try:
        into.append(fn())
    except Exception as e:
        RESULTS["errors"].append({"workload": what, "error": repr(e), "traceback": traceback.format_exc()})
        say(f"{what} FAILED: {e!r}\n{RESULTS['errors'][-1]['traceback']}")


def measure(name: str, spec: dict, repeat: int) -> None:
    """Everything :data:`PLANS` lists for one model (a sweep point: dumps and loads), on one build of it."""
    common.use(KP)
    subject, floors, axis = Subject(name, models.build(spec)), RESULTS["floors"], spec.get("axis")
    dumps_floor, loads_floor, ops = PLANS.get(name, (False, False, ("dumps", "loads")))
    info = RESULTS["models"][name] = common.describe(subject.model)
    say(f"[{name}] {info['params']:,} params, {info['n_layers']} layers, {mb(info['state_bytes'])} state")
    if dumps_floor:
        attempt(f"[{name}] floor_dumps x{repeat}", lambda: floor_dumps(subject, repeat), floors["dumps"])
    if loads_floor:
        attempt(f"[{name}] floor_loads x{repeat}", lambda: floor_loads(subject, repeat), floors["loads"])
    for op in ops:
        run = lambda op=op: vs_keras(subject, op, repeat, **info, **{"axis": axis} if axis else {})  # noqa: E731
        attempt(f"[{name}] {op} vs Keras x{repeat}", run, RESULTS["timings"])
    by_op = {r["op"]: r for r in RESULTS["timings"] if r["workload"] == name}
    if name == "resnet50" and {"dumps", "loads"} <= set(by_op):  # dumps+loads as the sum of the best of each
        keras_s, kp_s = (by_op["dumps"][k] + by_op["loads"][k] for k in ("keras_s", "keras_pickle_s"))
        RESULTS["timings"].append(timing_row(name, "dumps+loads", keras_s, kp_s, notes=["sum of the best of each"]))


def drop_models() -> None:
    common.use(KP)
    keras.backend.clear_session()
    gc.collect()


def run_memory(specs: dict[str, dict], quick: bool) -> None:
    """Each model of ``specs``, both implementations, each in a child process, two at a time, the slowest
    first (Keras's own reload of a deep Sequential is quadratic); ``--quick``: one child for all."""
    jobs = [{"model": s, "label": n, "axis": s.get("axis"), "impl": i} for n, s in specs.items() for i in IMPLS]
    jobs.sort(key=lambda job: (job["impl"] == KP, -job["model"].get("depth", 0), -job["model"].get("params", 0)))
    groups = [jobs] if quick else [[job] for job in jobs]
    say(f"[memory] {len(jobs)} measurements in child processes")
    with ThreadPoolExecutor(2) as pool:
        for group, results in zip(groups, pool.map(common.memory, groups)):
            for job, m in zip(group, results):
                label = f"[memory {job['label']} {job['impl']}]"
                if isinstance(m, str):
                    RESULTS["errors"].append({"workload": label, "error": m})
                    say(f"{label} FAILED: {m}")
                else:
                    RESULTS["memory"].append(m)
                    peaks = ", ".join(f"{op} {m[f'{op}_peak_extra_x']:.2f}x" for op in ("dumps", "loads"))
                    say(f"{label} peak extra memory: {peaks} the state")


def main(argv: list[str] | None = None) -> int:
    args = common.bench_args(argv)
    if not tuple(models.BENCH) == tuple(PLANS) == common.BENCH_MODELS:
        raise RuntimeError(f"common.BENCH_MODELS {common.BENCH_MODELS} differ from models.BENCH {tuple(models.BENCH)}")
    if args.memory_child:
        for spec in json.loads(args.memory_child):
            common.emit(common.memory_of(spec))
            drop_models()
        return 0
    say(f"keras_pickle {keras_pickle.__version__} from {os.path.dirname(keras_pickle.__file__)}")
    specs = {name: {"kind": name, "quick": args.quick} for name in args.only or PLANS}
    points = [] if args.no_sweep else [(a, n) for a, ns in (QUICK_SWEEP if args.quick else SWEEP).items() for n in ns]
    sweep = {f"{a}={n}": {"axis": a, "kind": "wide" if a == "params" else "depth", a: n} for a, n in points}
    for name, spec in {**specs, **sweep}.items():
        measure(name, spec, args.repeat * (10 if name == "mlp3" else 1))  # mlp3: milliseconds per run
        drop_models()
    if not args.no_memory:
        run_memory({**{k: v for k, v in specs.items() if k == "dense100mb"}, **sweep}, args.quick)
    RESULTS["slopes"] = slopes(RESULTS)
    report(RESULTS, args.repeat)
    wall = time.perf_counter() - STARTED
    common.write_json(args.json, {"meta": common.meta(quick=args.quick, repeat=args.repeat, wall_s=wall), **RESULTS})
    if sweep:
        title = f"Keras {keras.__version__} pickling vs keras_pickle {keras_pickle.__version__} "
        draw_chart(RESULTS, args.png, title + f"({keras.backend.backend()} backend, {os.cpu_count()} CPUs)")
    print(f"wall time {wall:.0f} s")
    return 1 if RESULTS["errors"] else 0


# Tables and chart


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


def slopes(results: dict) -> dict:
    """keras_pickle's growth over the three largest sweep points (log-log slope, 1 = linear; goal <= 1.2)."""
    out = {}
    for axis, x in (("params", "state_bytes"), ("depth", "n_layers")):
        for op in ("dumps", "loads"):
            rows = [r for r in results["timings"] if r.get("axis") == axis and r["op"] == op][-3:]
            out[f"{op} time vs {axis}"] = common.loglog_slope([(r[x], r["keras_pickle_s"]) for r in rows])
    memory = [m for m in results["memory"] if (m["axis"], m["impl"]) == ("params", KP)]
    points = sorted((m["state_bytes"], m["loads_peak_extra"]) for m in memory)
    out["loads peak memory vs params"] = common.loglog_slope(points[-3:])
    return out


DUMPS_TABLE = (  # the floor tables' columns (header=key, ...), then their notes
    "model=model, state=state_bytes, floor in band=floor_inband_s, kp.dumps=keras_pickle_dumps_inband_s, "
    "ratio=dumps_inband_ratio, pickle.dumps=keras_pickle_inband_s, ratio=inband_ratio, "
    "floor oob=floor_oob_s, kp oob=keras_pickle_oob_s, ratio=oob_ratio, buffers=buffers, copies=copied_buffers",
    "ratio = keras_pickle / floor (goal <= 1.3x); kp.dumps: keras_pickle.dumps(model, protocol=5); "
    "pickle.dumps: pickle.dumps(model, protocol=5), installed; kp oob: with a buffer_callback",
    "floor in band: Keras's config JSON + one copy of the state bytes; floor oob: the config JSON alone",
    "buffers: handed out of band; copies: those that do not share memory with the live variables",
)
LOADS_TABLE = (
    "model=model, layers=n_layers, floor=floor_s, kp loads=keras_pickle_loads_s, ratio=loads_ratio, "
    "kp deepcopy=keras_pickle_deepcopy_s, ratio=deepcopy_ratio, bound=construction_bound_ratio",
    "ratio = keras_pickle / floor (goal <= 0.5x); floor: Keras's deserialize_keras_object + set_weights",
    "bound: Keras constructing and building the config's layers with no initializer run, / floor",
)


def report(results: dict, repeat: int) -> None:
    floors, best_of = results["floors"], f"s (best of {repeat})"
    show(f"Dumps vs the floor, {best_of}", floors["dumps"], *DUMPS_TABLE)
    show(f"Loads and deepcopy vs the floor, {best_of}", floors["loads"], *LOADS_TABLE)
    for title, sweep in (("Keras's own pickling vs keras_pickle", False), ("Sweep", True)):
        columns = "workload=workload, state=state_bytes, op=op, keras=keras_s, keras_pickle=keras_pickle_s, ratio=ratio"
        rows = [r for r in results["timings"] if ("axis" in r) == sweep]
        show(f"{title}, {best_of}", rows, columns, "ratio = keras / keras_pickle; protocol 5 with a buffer_callback")
    columns = "model=label, impl=impl, state=state_bytes, dumps peak=dumps_peak_extra, dumps x=dumps_peak_extra_x, "
    columns += "loads peak=loads_peak_extra, loads x=loads_peak_extra_x"
    memory = sorted(results["memory"], key=lambda m: (m["axis"] or "", m["state_bytes"], m["n_layers"], m["impl"]))
    show("Peak extra resident memory (child processes)", memory, columns, "VmHWM - VmRSS; x: / state")
    for r in results["timings"] + floors["dumps"] + floors["loads"]:
        for note in r.get("notes", []):
            print(f"note [{r.get('workload', r.get('model'))} {r.get('op', '')}]: {note}")
    for what, slope in results["slopes"].items():
        slope = "—" if slope is None else f"{slope:.2f}"
        print(f"keras_pickle {what}: log-log slope {slope} (1 = linear; goal <= 1.2)")
    for e in results["errors"]:
        print(f"\nERROR in {e['workload']}: {e['error']}\n{e.get('traceback', '')}")


def draw_chart(results: dict, path, title: str) -> None:
    """2 x 2, log x: time vs state size and vs depth (log y); peak extra memory (child processes) vs state
    size, as a multiple of the state (flat: linear growth), and vs depth in MiB (log y)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib); no chart drawn.")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    panels = {  # sweep axis: (x key, x scale, x label, memory key, memory scale, memory label)
        "params": ("state_bytes", 2**20, "state size (MiB)", "_peak_extra_x", 1, "peak extra RSS / state bytes"),
        "depth": ("n_layers", 1, "depth (Dense(32) layers)", "_peak_extra", 2**20, "peak extra RSS (MiB)"),
    }
    for col, (axis, (x, x_scale, xlabel, key, scale, ylabel)) in enumerate(panels.items()):
        for op, impl in [(op, impl) for op in ("dumps", "loads") for impl in IMPLS]:
            times = [(r[x], r[f"{impl}_s"]) for r in results["timings"] if (r.get("axis"), r["op"]) == (axis, op)]
            memory = [(m[x], m[op + key] / scale) for m in results["memory"] if (m["axis"], m["impl"]) == (axis, impl)]
            style, color = "-o" if op == "dumps" else "--s", "tab:red" if impl == KERAS else "tab:blue"
            for ax, xy in ((axes[0, col], times), (axes[1, col], sorted(memory))):
                if xy:
                    ax.plot([p[0] / x_scale for p in xy], [p[1] for p in xy], style, color=color, label=f"{impl} {op}")
        for row, ax in enumerate(axes[:, col]):
            logy = row == 0 or axis == "depth"
            ax.set(xscale="log", yscale="log" if logy else "linear", xlabel=xlabel)
            ax.set(ylabel=ylabel if row else "best time (s)")
            what = "time" if row == 0 else "peak extra memory"
            ax.set_title(f"{what} vs {xlabel.split(' (')[0]}" + (" (log-log)" if logy else ""))
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_lines():
                ax.legend(fontsize="small")
    axes[1, 0].set_ylim(bottom=0)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"chart written to {path}")
