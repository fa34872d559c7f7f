"""tf-keras (Keras 2): its own pickling (a SavedModel tarred in memory) against keras_pickle's, in one process.

Per model (``models.TF_KERAS``: Dense layers, Adam, one step), interleaved (``common.race``): dumps and loads
(protocol 5, in band), the first call in the process (tf-keras traces functions there) and the best of
``--repeat``, every loaded model checked to hold every weight and slot; and, each in a fresh child, the peak
extra RSS of dumps and loads / the state bytes (``common.memory_of``). What each keeps: ``behaviour --tf-keras``::

    python -m benchmarks tf_keras_pickling [--repeat 5] [--models small,100mb] [--no-memory]
"""

from __future__ import annotations

import os
import pickle

from benchmarks import common
from benchmarks.common import IMPLS, Contender

NAMES = dict(zip(IMPLS, ("tf-keras own", "keras_pickle")))


def measure(name: str, repeat: int, memory: bool) -> list[list[str]]:
    from benchmarks import models

    spec = {"kind": "tf_keras", "name": name}
    model, written, notes = models.build(spec), {}, []
    same = lambda loaded, _: common.mismatch(model, loaded)  # noqa: E731
    contenders = []
    for i in IMPLS:
        contenders.append(Contender(f"{i} dumps", i, lambda i=i: written.update({i: pickle.dumps(model, protocol=5)})))
        contenders.append(Contender(f"{i} loads", i, lambda i=i: pickle.loads(written[i]), same))
    times = common.race(contenders, repeat, notes)
    label = f"{name} ({common.nbytes(common.state_variables(model)) / 1e6:.1f} MB of state)"
    rows = []
    for op, pick in (("first", lambda t: t[0]), (f"best of {repeat}", min)):
        ms = {impl: [pick(times[f"{impl} {o}"]) * 1e3 for o in ("dumps", "loads")] for impl in IMPLS}
        cells = [" / ".join(f"{v:.1f}" for v in ms[impl]) + " ms" for impl in IMPLS]
        rows.append([label, f"dumps / loads, {op}", *cells, " / ".join(f"{a / b:.1f}×" for a, b in zip(*ms.values()))])
    rows.append([label, "bytes", *(f"{len(written[impl]):,}" for impl in IMPLS), ""])
    if memory:  # each implementation in a fresh child
        found = [common.memory([{"model": spec, "impl": impl, "in_band": True}])[0] for impl in IMPLS]
        peaks = "{dumps_peak_extra_x:.2f}× / {loads_peak_extra_x:.2f}×"
        cells = [m if isinstance(m, str) else peaks.format(**m) for m in found]
        rows.append([label, "peak extra memory, dumps / loads (x the state)", *cells, ""])
    return rows + [[label, "note", note, "", ""] for note in notes]


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # before TensorFlow is imported: see common.peak_memory
    parser = common.parser(__doc__, repeat=5, quick=False)
    parser.add_argument("--models", default="small,100mb")
    parser.add_argument("--no-memory", action="store_true")
    args = parser.parse_args(argv)
    rows = [row for name in args.models.split(",") for row in measure(name, args.repeat, not args.no_memory)]
    import tf_keras

    import keras_pickle

    title = f"tf-keras {tf_keras.__version__} vs keras_pickle {keras_pickle.__version__}, protocol 5 in band"
    common.table(title, ["model", "op", *NAMES.values(), "speed-up"], rows)
    return 0
