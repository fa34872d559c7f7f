"""What safe mode's file guard costs per audited event, with 10^3 and 10^5 strings in the payload.

While a payload is rebuilt, every audited file, directory, process or network event is checked against the
strings its configs hold (docs/security.md: "Nothing the payload names is touched"). A model whose one layer
holds ``N`` path-like strings in its config and, when Keras builds it, raises ``--events`` audited events on
paths none of them names (``open``, ``os.listdir`` and ``os.rename``, raised with ``sys.audit``: the guard's
cost, not the file system's), timing them itself. ``keras_pickle.loads`` with the guard (``safe_mode=True``)
and without (``safe_mode=False``), and Keras's built-in pickling, for scale: each load's time and its events'
(the guard indexes the strings at the first event: that is in the load's time, not the events'). Interleaved
(``common.race``), best of ``--repeat``; each load checked to hold the strings. The last line divides the
per-event cost at the most strings by that at the fewest (1.0: the check does not depend on how many strings
a payload names)::

    python -m benchmarks.file_guard [--strings 1000 100000] [--events 10000] [--repeat 3] [--quick]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import keras

import keras_pickle
from benchmarks import common
from benchmarks.common import KERAS, KP, Contender

FOLDER = tempfile.gettempdir()
"""The directory whose files the layer's events name (a fresh one while the benchmark runs)."""
SPENT: list[float] = []
"""The seconds each :class:`Labelled` built took over its events (after the first, which indexes the strings)."""


@keras.saving.register_keras_serializable(package="file_guard_benchmark")
class Labelled(keras.layers.Layer):
    """The identity; holds ``labels`` and, when built, raises ``events`` audited events on files of
    :data:`FOLDER` (which its config does not name: nothing is refused), timed in :data:`SPENT`."""

    def __init__(self, labels=(), events=0, **kwargs):
        super().__init__(**kwargs)
        self.labels, self.events = list(labels), events
        for i in range(events):
            if i == 1:
                start = time.perf_counter()
            path = os.path.join(FOLDER, f"part-{i % 100}.csv")
            if i % 3 == 0:
                sys.audit("open", path, "r", 0)
            elif i % 3 == 1:
                sys.audit("os.listdir", FOLDER)
            else:
                sys.audit("os.rename", path, path + ".tmp", -1, -1)
        if events > 1:
            SPENT.append(time.perf_counter() - start)

    def call(self, x):
        return x

    def get_config(self):
        return {**super().get_config(), "labels": self.labels, "events": self.events}


def labels(n: int) -> list[str]:
    """``n`` distinct strings, as a payload holding file names would: absolute, relative, nested."""
    kinds = ("/srv/datasets/shard-{}/labels.txt", "data/train/{}.tfrecord", "/mnt/cache/{}", "vocab-{}.txt")
    return [kinds[i % len(kinds)].format(i) for i in range(n)]


def model(n: int, events: int):
    return keras.Sequential([keras.Input((1,)), Labelled(labels(n), events, name="labelled")])


def contenders(n: int, events: int, spent: dict[str, list[float]]) -> tuple[list[Contender], float]:
    """keras_pickle's loads with and without the guard, and Keras's built-in loads, each of whose events' time
    goes to ``spent``. Also the payload's size (MiB)."""
    data = keras_pickle.dumps(model(n, events))
    common.use(KERAS)
    builtin = common.dumps(model(n, events))
    common.use(KP)

    def holds_the_strings(loaded, first: bool) -> str | None:
        held = len(loaded.get_layer("labelled").labels)
        return None if held == n else f"{held} strings loaded instead of {n}"

    def timing_its_events(name: str, load):
        def run():
            SPENT.clear()
            loaded = load()
            spent[name].append(SPENT.pop())
            return loaded

        return Contender(name, KERAS if name == "keras" else KP, run, holds_the_strings)

    out = [
        timing_its_events(str(safe), lambda safe=safe: keras_pickle.loads(data, safe_mode=safe))
        for safe in (True, False)
    ]
    out.append(timing_its_events("keras", lambda: common.loads(builtin)))
    return out, len(data) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--strings", nargs="+", type=int, default=[1000, 100_000], help="strings in the payload")
    parser.add_argument("--events", type=int, default=10_000, help="audited events while it is rebuilt")
    args = parser.parse_args(argv)
    strings, events = ([10, 100], 10) if args.quick else (sorted(args.strings), max(args.events, 2))
    print(f"backend {keras.backend.backend()}, keras {keras.__version__}, keras_pickle {keras_pickle.__version__}")
    rows, per_event = [], {}
    global FOLDER
    with tempfile.TemporaryDirectory(prefix="file_guard_benchmark_") as FOLDER:
        keras_pickle.loads(keras_pickle.dumps(model(10, 10)))  # the code paths, once, before anything is timed
        for n in strings:
            spent = {"True": [], "False": [], "keras": []}
            race, mib = contenders(n, events, spent)
            best = {key: min(times) for key, times in common.race(race, args.repeat).items()}
            inside = {key: min(times) for key, times in spent.items()}
            per_event[n] = inside["True"] / (events - 1)
            loads = [f"{best[key]:.3f}" for key in ("keras", "False", "True")]
            each = [f"{inside[key] / (events - 1) * 1e6:.2f}" for key in ("False", "True")]
            rows.append([f"{n:,}", f"{mib:.1f}", *loads, f"{inside['False']:.3f}", f"{inside['True']:.3f}", *each])
    header = ["strings", "payload MiB", "loads: keras built-in", "safe_mode=False", "safe_mode=True"]
    header += [f"{events - 1:,} events: guard off", "guard on", "µs per event: guard off", "guard on"]
    fewest, most = strings[0], strings[-1]
    notes = (f"per-event cost with {most:,} strings ÷ with {fewest:,}: {per_event[most] / per_event[fewest]:.2f}x",)
    common.table(f"loads with {events:,} audited events, seconds, best of {args.repeat}", header, rows, notes)
    return 0


if __name__ == "__main__":  # run as benchmarks.file_guard, so that Labelled pickles by reference wherever it runs
    from benchmarks import file_guard

    sys.exit(file_guard.main(sys.argv[1:]))
