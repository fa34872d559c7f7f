"""Tables, goals and the chart of benchmarks/bench.py (everything here reads its results dict)."""

from __future__ import annotations

from pathlib import Path

from _bench_core import loglog_slope

KERAS, KP = "keras", "keras_pickle"

FLOOR_DUMPS_MAX = 1.3  # keras_pickle's dumps / the floor
FLOOR_LOADS_MAX = 0.5  # keras_pickle's loads or deepcopy / the floor
LINEAR_MAX_SLOPE = 1.2  # log-log slope over the three largest sweep points (1 = linear, 2 = quadratic)
# (label, workload, op, minimum of Keras's time / keras_pickle's)
SPEED_GOALS = [
    ("3-layer MLP dumps+loads >= 10x Keras", "mlp3", "dumps+loads", 10.0),
    ("dense100mb dumps >= 5x Keras", "dense100mb", "dumps", 5.0),
    ("dense100mb loads >= 3x Keras", "dense100mb", "loads", 3.0),
    ("dense100mb deepcopy >= 3x Keras", "dense100mb", "deepcopy", 3.0),
    ("deep150 loads >= 10x Keras", "deep150", "loads", 10.0),
    ("resnet50 dumps+loads >= 2x Keras", "resnet50", "dumps+loads", 2.0),
]
MEMORY_GOALS = [("dumps", 0.25), ("loads", 1.5)]  # peak extra memory of dense100mb, x state bytes


def mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def fmt_s(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def fmt_ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1000:.1f}"


def fmt_x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def print_table(title: str, columns: list[str], rows: list[list[str]], notes: tuple[str, ...] = ()) -> None:
    """A table, then ``notes`` (what the columns mean), one per line."""
    _print_table(title, columns, rows)
    for note in notes:
        print(f"  {note}")


def _print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
        print(f"\n{title}")
        print(" | ".join(c.ljust(w) for c, w in zip(columns, widths)))
        print("-+-".join("-" * w for w in widths))
        for r in rows:
            print(" | ".join(v.ljust(w) for v, w in zip(r, widths)))
        return
    table = Table(title=title)
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i < 1 else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=max(150, Console().width)).print(table)


# --------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------


def print_all(results: dict, repeat: int) -> None:
    floors = results["floors"]
    if floors["dumps"]:
        print_table(
            f"Dumps vs the floor, s (best of {repeat})",
            [
                "model",
                "state",
                "floor in band",
                "kp.dumps",
                "ratio",
                "pickle.dumps",
                "ratio",
                "floor oob",
                "kp oob",
                "ratio",
            ],
            [
                [
                    r["model"],
                    mb(r["state_bytes"]),
                    fmt_s(r["floor_inband_s"]),
                    fmt_s(r.get("keras_pickle_dumps_inband_s")),
                    fmt_x(r.get("dumps_inband_ratio")),
                    fmt_s(r["keras_pickle_inband_s"]),
                    fmt_x(r["inband_ratio"]),
                    fmt_s(r["floor_oob_s"]),
                    fmt_s(r["keras_pickle_oob_s"]),
                    fmt_x(r["oob_ratio"]),
                ]
                for r in floors["dumps"]
            ],
            (
                f"ratio = keras_pickle / floor (goal <= {FLOOR_DUMPS_MAX}x; in band: keras_pickle.dumps); "
                "kp.dumps = keras_pickle.dumps(model, protocol=5); pickle.dumps = pickle.dumps(model, protocol=5), "
                "keras_pickle installed (its output grows by reallocation); kp oob = the latter with a buffer_callback",
                "floor in band = json.dumps(keras.saving.serialize_keras_object(model)) + b''.join(every state "
                "variable's bytes, read without a copy): one copy of the state",
                "floor oob = the config JSON alone; both floors with keras_pickle uninstalled",
            ),
        )
    if results["dumps_phases"]:
        print_phases(results["dumps_phases"])
    if floors["loads"]:
        print_floor_loads(floors["loads"], repeat)
    if results["timings"]:
        print_table(
            f"Keras's own pickling vs keras_pickle, s (best of {repeat})",
            ["workload", "op", "keras", "keras_pickle", "ratio"],
            [
                [r["workload"], r["op"], fmt_s(r.get("keras_s")), fmt_s(r.get("keras_pickle_s")), _ratio_cell(r)]
                for r in results["timings"]
            ],
            (
                "ratio = keras / keras_pickle; protocol 5 with a buffer_callback; keras = Keras's own "
                "KerasSaveable.__reduce__ (keras_pickle uninstalled)",
                f"the 3-layer MLP: best of {10 * repeat}; its dumps+loads is one round trip timed as one, "
                "resnet50's the sum of the best dumps and the best loads",
            ),
        )
        print(
            "model sizes: "
            + "; ".join(
                f"{n}: {i['params']:,} params, {i['n_layers']} layers, state {mb(i['state_bytes'])}"
                for n, i in results["models"].items()
            )
        )
    for section in (results["timings"], floors["dumps"], floors["loads"], results["dumps_phases"]):
        for r in section:
            for note in r.get("notes", []):
                print(f"note [{r.get('workload', r.get('model'))} {r.get('op', '')}]: {note}")
    if results["sweep"]:
        print_sweep(results["sweep"])
    if results["memory"]:
        print_memory(results["memory"])


def _ratio_cell(r: dict) -> str:
    return fmt_x(r["ratio"]) if "ratio" in r else ("FAILED" if "error" in r else "—")


def print_phases(phases: list[dict]) -> None:
    def cell(r: dict, key: str) -> str:
        value = r.get(key)
        if value is None:
            return "—"
        return f"{value * 1000:.1f} ({100 * value / r['total_s']:.0f}%)" if r.get("total_s") else fmt_ms(value)

    print_table(
        "Where keras_pickle's dumps (out of band) spends its time, ms (share of the total)",
        [
            "model",
            "total",
            "config_of",
            "custom objects",
            "state capture",
            "pickle payload",
            "other",
            "Keras serialize",
        ],
        [
            [
                r["model"],
                fmt_ms(r["total_s"]),
                cell(r, "config_of_s"),
                cell(r, "custom_objects_s"),
                cell(r, "state_capture_s"),
                cell(r, "pickle_payload_s"),
                cell(r, "other_s"),
                fmt_ms(r["keras_serialize_s"]),
            ]
            for r in phases
        ],
        (
            "each phase called on its own (keras_pickle._capture.config.config_of, custom_objects.collect, "
            "state.capture, pickle.dumps of the payload payload.layer_payload built), best of N",
            "other = total - the four phases: dump-time checks, compile capture, config JSON, array encoding, header",
            "Keras serialize = json.dumps(keras.saving.serialize_keras_object(model)), the out-of-band floor",
        ),
    )


def print_floor_loads(rows: list[dict], repeat: int) -> None:
    table = []
    for r in rows:
        table.append(
            [
                r["model"],
                str(r["n_layers"]),
                fmt_s(r["floor_s"]),
                fmt_s(r["keras_pickle_loads_s"]),
                fmt_x(r["loads_ratio"]),
                fmt_s(r["keras_pickle_deepcopy_s"]),
                fmt_x(r["deepcopy_ratio"]),
                fmt_x(r.get("construction_bound_ratio")),
            ]
        )
        if r.get("linear_floor_s") is not None:
            table.append(
                [
                    f"{r['model']} vs linear floor",
                    str(r["n_layers"]),
                    fmt_s(r["linear_floor_s"]),
                    fmt_s(r["keras_pickle_loads_s"]),
                    fmt_x(r["loads_ratio_linear"]),
                    fmt_s(r["keras_pickle_deepcopy_s"]),
                    fmt_x(r["deepcopy_ratio_linear"]),
                    "",
                ]
            )
    print_table(
        f"Loads and deepcopy vs the floor, s (best of {repeat})",
        ["model", "layers", "floor", "kp loads", "ratio", "kp deepcopy", "ratio", "bound"],
        table,
        (
            f"ratio = keras_pickle / floor (goal <= {FLOOR_LOADS_MAX}x); kp loads = pickle.loads of keras_pickle's "
            "out-of-band payload",
            "floor = keras.saving.deserialize_keras_object(json.loads(config_json)) + set_weights(saved), "
            "keras_pickle uninstalled",
            "linear floor = keras.Sequential([deserialized layers]) + set_weights(saved): one graph build "
            "(Sequential.from_config rebuilds after every layer)",
            "bound = Keras constructing and building the config's layers with no initializer run "
            "(keras.StatelessScope), / floor: the least any rebuild from a config pays",
        ),
    )


def print_sweep(sweep: dict) -> None:
    rows = []
    for axis in ("params", "depth"):
        for p in sweep.get(axis, []):
            for op in ("dumps", "loads"):
                if op in p:
                    rows.append(
                        [
                            f"{axis}={p[axis]:,}",
                            f"{p['params']:,}",
                            mb(p["state_bytes"]),
                            op,
                            fmt_s(p[op]["keras_s"]),
                            fmt_s(p[op]["keras_pickle_s"]),
                            fmt_x(p[op]["ratio"]),
                        ]
                    )
    print_table(
        "Sweep, s (best of N; a run over 15 s is not repeated)",
        ["point", "params", "state", "op", "keras", "keras_pickle", "ratio"],
        rows,
        ("ratio = keras / keras_pickle; protocol 5 with a buffer_callback",),
    )


def print_memory(memory: list[dict]) -> None:
    print_table(
        "Peak extra resident memory (child processes)",
        ["model", "impl", "state", "dumps peak", "dumps x", "loads peak", "loads x"],
        [
            [
                m["label"],
                m["impl"],
                mb(m["state_bytes"]),
                mb(m["dumps_peak_extra"]),
                fmt_x(m["dumps_peak_extra_x"]),
                mb(m["loads_peak_extra"]),
                fmt_x(m["loads_peak_extra_x"]),
            ]
            for m in sorted(memory, key=_memory_order)
        ],
        ("VmHWM - VmRSS around the operation; x = / state bytes; protocol 5 with a buffer_callback",),
    )


def _memory_order(m: dict) -> tuple:
    model = m["model"]
    return (m.get("axis") or "", model.get("params", 0), model.get("depth", 0), m["impl"])


# --------------------------------------------------------------------------
# Goals
# --------------------------------------------------------------------------


def _goal(goal: str, value: float | None, unit: str, *, at_most: float | None = None, at_least: float | None = None):
    if value is None:
        passed = None
    elif at_most is not None:
        passed = value <= at_most
    else:
        passed = value >= at_least
    return {
        "goal": goal,
        "value": value,
        "unit": unit,
        "target": at_least if at_most is None else at_most,
        "pass": passed,
    }


def evaluate_goals(results: dict, quick: bool) -> list[dict]:
    """Every goal, its measured value and whether it passed; ``quick`` (tiny models): shown, not judged."""
    goals = _floor_goals(results["floors"]) + _speed_goals(results["timings"])
    goals += _memory_goals(results["memory"]) + _linearity_goals(results["sweep"], results["memory"])
    if quick:
        for g in goals:
            g["pass"] = None
    return goals


def _floor_goals(floors: dict) -> list[dict]:
    goals = []
    for r in floors["dumps"]:
        for band, label in (("dumps_inband", "in band"), ("oob", "out of band")):
            goals.append(
                _goal(
                    f"{r['model']} dumps {label} <= {FLOOR_DUMPS_MAX}x floor",
                    r.get(f"{band}_ratio"),
                    "x floor",
                    at_most=FLOOR_DUMPS_MAX,
                )
            )
        info = {"goal": f"{r['model']} plain pickle.dumps in band (not a goal)", "value": r["inband_ratio"]}
        goals.append({**info, "unit": "x floor", "pass": None, "info": True})
    for r in floors["loads"]:
        for op in ("loads", "deepcopy"):
            goals.append(
                _goal(
                    f"{r['model']} {op} <= {FLOOR_LOADS_MAX}x floor",
                    r[f"{op}_ratio"],
                    "x floor",
                    at_most=FLOOR_LOADS_MAX,
                )
            )
        if r.get("construction_bound_ratio") is not None:
            info = {"goal": f"{r['model']} construction bound (not a goal)", "value": r["construction_bound_ratio"]}
            goals.append({**info, "unit": "x floor", "pass": None, "info": True})
        if r.get("linear_floor_s") is not None:
            for op in ("loads", "deepcopy"):
                info = {"goal": f"{r['model']} {op} vs linear floor (not a goal)", "value": r[f"{op}_ratio_linear"]}
                goals.append({**info, "unit": "x linear floor", "pass": None, "info": True})
    return goals


def _speed_goals(timings: list[dict]) -> list[dict]:
    goals = []
    for label, workload, op, minimum in SPEED_GOALS:
        r = next((r for r in timings if r["workload"] == workload and r["op"] == op), None)
        goals.append(_goal(label, r.get("ratio") if r else None, "x faster", at_least=minimum))
    return goals


def _memory_goals(memory: list[dict]) -> list[dict]:
    kp = next((m for m in memory if m.get("label") == "dense100mb" and m["impl"] == KP), None)
    return [
        _goal(
            f"dense100mb peak extra memory, {op} <= {maximum}x state",
            kp[f"{op}_peak_extra_x"] if kp else None,
            "x state bytes",
            at_most=maximum,
        )
        for op, maximum in MEMORY_GOALS
    ]


def _linearity_goals(sweep: dict, memory: list[dict]) -> list[dict]:
    goals = []
    for axis, what in (("params", "state size"), ("depth", "depth")):
        points = sweep.get(axis, [])[-3:]
        for op in ("dumps", "loads"):
            xy = [
                (p["state_bytes"] if axis == "params" else p["depth"], p[op]["keras_pickle_s"])
                for p in points
                if op in p
            ]
            label = f"keras_pickle {op} time vs {what}: log-log slope <= {LINEAR_MAX_SLOPE}"
            goals.append(
                _goal(label, loglog_slope(xy) if len(xy) == 3 else None, "(1 = linear)", at_most=LINEAR_MAX_SLOPE)
            )
    wide = sorted(
        (m["state_bytes"], m["loads_peak_extra"]) for m in memory if m["impl"] == KP and m.get("axis") == "params"
    )
    label = f"keras_pickle loads peak memory vs state size: log-log slope <= {LINEAR_MAX_SLOPE}"
    goals.append(
        _goal(label, loglog_slope(wide[-3:]) if len(wide) >= 3 else None, "(1 = linear)", at_most=LINEAR_MAX_SLOPE)
    )
    return goals


def print_goals(goals: list[dict], quick: bool) -> None:
    def status(g: dict) -> str:
        if g.get("info"):
            return "info"
        if g["pass"] is None:
            return "not judged (--quick)" if quick and g["value"] is not None else "not measured"
        return "PASS" if g["pass"] else "MISS"

    def measured(g: dict) -> str:
        if g["value"] is None:
            return "—"
        text = f"{g['value']:.2f}"
        if g.get("target") is not None and text == f"{g['target']:.2f}":  # 0.5004 would read as 0.50 MISS
            text = f"{g['value']:.4f}"
        return f"{text} {g['unit']}"

    print_table("Goals", ["goal", "measured", "status"], [[g["goal"], measured(g), status(g)] for g in goals])


# --------------------------------------------------------------------------
# Chart
# --------------------------------------------------------------------------

COLORS = {KERAS: "tab:red", KP: "tab:blue"}
STYLES = {"dumps": "-o", "loads": "--s"}


def draw_chart(results: dict, path: Path, title: str) -> None:
    """2 x 2: time vs state size, time vs depth (log-log); peak extra memory vs state size, vs depth
    (child processes)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib); no chart drawn.")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep, memory = results["sweep"], results["memory"]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    for ax, axis in ((axes[0, 0], "params"), (axes[0, 1], "depth")):
        for op in ("dumps", "loads"):
            for impl, key in ((KERAS, "keras_s"), (KP, "keras_pickle_s")):
                xy = [(_x(p, axis), p[op][key]) for p in sweep.get(axis, []) if op in p]
                if xy:
                    ax.plot(*zip(*xy), STYLES[op], color=COLORS[impl], label=f"{impl} {op}")
        _axes(ax, axis, "best time (s)", f"time vs {_xlabel(axis)} (log-log)", logy=True)
    # Memory vs state size as a multiple of the state (flat = linear growth); vs depth in MiB (slope 1 = linear).
    for ax, axis in ((axes[1, 0], "params"), (axes[1, 1], "depth")):
        for op in ("dumps", "loads"):
            for impl in (KERAS, KP):
                key = f"{op}_peak_extra_x" if axis == "params" else f"{op}_peak_extra"
                scale = 1 if axis == "params" else 2**20
                xy = sorted(
                    (_x(m, axis), m[key] / scale) for m in memory if m["impl"] == impl and m.get("axis") == axis
                )
                if xy:
                    ax.plot(*zip(*xy), STYLES[op], color=COLORS[impl], label=f"{impl} {op}")
        if axis == "params":
            for op, goal in MEMORY_GOALS:
                ax.axhline(goal, color="gray", linestyle=":", linewidth=1)
                ax.annotate(
                    f"goal {op} <= {goal}x", (0.01, goal), xycoords=("axes fraction", "data"), fontsize="x-small"
                )
            _axes(ax, axis, "peak extra RSS / state bytes", f"peak extra memory vs {_xlabel(axis)}")
            ax.set_ylim(bottom=0)
        else:
            _axes(ax, axis, "peak extra RSS (MiB)", f"peak extra memory vs {_xlabel(axis)} (log-log)", logy=True)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"chart written to {path}")


def _x(point: dict, axis: str) -> float:
    """A sweep point's or a memory result's x: state MiB or depth."""
    if axis == "params":
        return point["state_bytes"] / 2**20
    return point["depth"] if "depth" in point else point["model"]["depth"]


def _xlabel(axis: str) -> str:
    return "state size (MiB, float32 weights)" if axis == "params" else "depth (Dense(32) layers)"


def _axes(ax, axis: str, ylabel: str, title: str, *, logy: bool = False) -> None:
    """Log x with a tick at every measured point; log y (times) ticked at 1, 2 and 5 per decade."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:.0f}" if v >= 10 else f"{v:.3g}")
    points = [line for line in ax.get_lines() if not line.get_label().startswith("_")]  # not the goal lines
    xs = sorted({x for line in points for x in line.get_xdata() if x > 0})
    ax.set_xscale("log")
    if xs:
        ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(NullFormatter())
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(_xlabel(axis))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
