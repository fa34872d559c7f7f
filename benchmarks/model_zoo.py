"""Real models through Keras's own pickling and keras_pickle, each loaded in a fresh process.

Every case (builders in ``benchmarks.models``) is built while keras_pickle is installed and trained one step
on a seeded batch, so optimizer slots exist: every ``keras.applications`` constructor (``weights=None``, eager);
tiny KerasHub backbones and tasks, fresh and after use; keras.io idioms (``tests/kerasio.py``'s VAE and DCGAN,
TensorFlow only, a stateful LSTM, adapted preprocessing, int8 and LoRA Dense); and the second sweep
(``tests/sweep_models.py``). Per implementation and model:

* dumps: ``pickle.dumps(model, protocol=5)`` here, one timed run (``joblib.dump`` for the sklearn Pipeline);
* loads: ``pickle.loads`` in a fresh child that never calls ``install()``, one timed run after a warm-up load;
* state: every variable (the model's, then each built optimizer's) equals the original's, bit for bit;
* preds: outputs on the batch bit-identical to the original's;
* next: one more step on the batch gives the original's variables.

A failure is recorded, never raised; exit status 1 if any keras_pickle case fails a check::

    nice -n 10 python -m benchmarks model_zoo [--quick] [--only NAME ...] [--max-params N] [--md P]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import inspect
import io
import pickle
import re
import shlex
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import joblib
import keras
import numpy as np

import keras_pickle
from benchmarks import common, models
from benchmarks.common import IMPLS, KP

CHECKS = ("loads", "state", "predictions", "next_step")
QUICK = ("MobileNetV3Small", "ResNet50", "EfficientNetB0", "BertBackbone", "VAE", "GAN")
BATCH_BYTES = 3 << 30  # payload bytes written before children load them: bounds disk and memory
MAX_PARAMS = 250_000_000  # ConvNeXtXLarge (348M): Keras's own loads would need ~17 GB


@dataclasses.dataclass
class Case:
    make: Callable[[], tuple[Any, Any, Any]]  # -> (model ready to pickle, x, y)
    group: str
    predict: Callable = lambda model, x: model(x, training=False)
    step: Callable = models.fit_step
    models: Callable = lambda obj: [obj]  # the Keras models the object holds
    joblib: bool = False  # carried by joblib.dump / joblib.load
    tensorflow_only: bool = False  # trains with tf.GradientTape


def cases(max_params: int = MAX_PARAMS) -> dict[str, Case]:
    apps = vars(keras.applications).items()
    names = sorted(n for n, f in apps if inspect.isfunction(f) and "weights" in inspect.signature(f).parameters)
    found = {n: Case(lambda n=n: models.application(n, max_params), "keras.applications") for n in names}
    tiny = {"vocabulary_size": 64, "num_layers": 2, "hidden_dim": 16, "intermediate_dim": 32}
    heads = {"num_query_heads": 2, "num_key_value_heads": 1, **tiny}
    vit = {"image_shape": (32, 32, 3), "patch_size": 8, "num_layers": 2, "num_heads": 2, "hidden_dim": 16}
    hub = {"BertBackbone": {"num_heads": 2, **tiny}, "GPT2Backbone": {"num_heads": 2, **tiny}}
    hub.update(GemmaBackbone={"head_dim": 8, **heads}, LlamaBackbone=heads, ViTBackbone={"mlp_dim": 32, **vit})
    found.update({c: Case(lambda c=c, kw=kw: models.backbone(c, **kw), "keras_hub") for c, kw in hub.items()})

    def predict(model, x):  # tasks preprocess their inputs
        return model.predict(x, batch_size=models.BATCH, verbose=0)

    def on_tensors(model, x):
        import tensorflow as tf

        return model(keras.tree.map_structure(tf.constant, x), training=False)

    def generate_and_judge(model, x):
        return model.generator(keras.ops.ones((models.BATCH, model.latent_dim))), model.discriminator(x)

    def kerasio(name: str):  # the tests' keras.io VAE and GAN (tests/kerasio.py), trained one step
        module = models.from_tests("kerasio")
        model, x = getattr(module, name)(), module.data(models.BATCH)
        models.fit_step(model, x, None)
        return model, x, None

    tasks = {
        "BertTextClassifier": lambda: models.bert_classifier(used=False),
        "BertTextClassifier (used)": lambda: models.bert_classifier(used=True),
        "GPT2CausalLM": lambda: models.gpt2_causal_lm(used=False),
        "GPT2CausalLM (used)": lambda: models.gpt2_causal_lm(used=True),
        "GPT2CausalLM (used, TopKSampler)": lambda: models.gpt2_causal_lm(True, top_k=True),
    }
    found.update({name: Case(make, "keras_hub", predict) for name, make in tasks.items()})
    sweep, kio = models.from_tests("sweep_models"), "keras.io"
    found["VAE"] = Case(lambda: kerasio("vae"), kio, lambda m, x: m.decoder(m.encoder(x)[0]), tensorflow_only=True)
    found["GAN"] = Case(lambda: kerasio("gan"), kio, generate_and_judge, tensorflow_only=True)
    found["stateful LSTM"] = Case(models.stateful_lstm, kio)
    found["adapted preprocessing"] = Case(models.adapted_preprocessing, kio, on_tensors, models.dataset_step)
    found.update({"int8 Dense": Case(sweep.make_int8, kio), "LoRA Dense": Case(models.lora_dense, kio)})
    second = {n: Case(c.make, "second sweep", c.predict, c.step, c.models, c.joblib) for n, c in sweep.CASES.items()}
    return found | second


# Measuring: the same observations here (of the original) and in a child (of a loaded copy)


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in map(np.ascontiguousarray, arrays):
        h.update(f"{a.dtype}{a.shape}".encode() + a.tobytes())
    return h.hexdigest()[:20]


def variables(obj, case: Case) -> tuple[list[str], list[str]]:
    """Paths and digests of model.variables, then of each built optimizer the model holds (the GAN's two),
    for each Keras model ``obj`` holds."""
    found = []
    Optimizer = keras.optimizers.Optimizer
    for model in case.models(obj):
        held = [model.optimizer, *(v for _, v in sorted(vars(model).items()) if isinstance(v, Optimizer))]
        optimizers = {id(o): o for o in held if o is not None and o.built}
        found += list(model.variables) + [v for o in optimizers.values() for v in o.variables]
    return [v.path for v in found], [digest(keras.ops.convert_to_numpy(v.value)) for v in found]


def failure(stage: str, e: BaseException) -> str:
    message = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split())  # no colours; Keras wraps mid-sentence
    return f"{stage}: {type(e).__name__}: {message[:300]}"


def observe(case: Case, model, x, y) -> dict:
    """Variable digests, then the predictions' digest, then one more step and the digests after it."""
    out: dict[str, Any] = dict(zip(("paths", "before"), variables(model, case)))
    try:
        out["pred"] = digest(*(keras.ops.convert_to_numpy(t) for t in keras.tree.flatten(case.predict(model, x))))
        case.step(model, x, y)
        out["paths_after"], out["after"] = variables(model, case)
    except Exception as e:
        out["error"] = failure("next step" if "pred" in out else "predict", e)
    return out


def payload(tmp: Path, name: str, kind: str) -> Path:
    """Where the pickle of one model (kind: an implementation) or of its batch (kind "data") is written."""
    return tmp / f"{''.join(c if c.isalnum() else '_' for c in name)}.{kind}.pkl"


def child(impl: str, tmp: Path, names: list[str]) -> None:
    """In a fresh process: load each payload of one implementation, observe it, emit what was seen."""
    every = cases()
    pickle.loads((tmp / f"warmup.{impl}.pkl").read_bytes())  # first-load imports are not timed
    for name in names:
        case, data = every[name], payload(tmp, name, impl).read_bytes()
        x, y = pickle.loads(payload(tmp, name, "data").read_bytes())
        gc.collect()
        assert impl == KP or not keras_pickle.is_installed()
        try:
            start = time.perf_counter()
            model = joblib.load(io.BytesIO(data)) if case.joblib else pickle.loads(data)
            result = {"loads_s": time.perf_counter() - start}
        except Exception as e:
            result = {"error": failure("loads", e)}
        else:
            result.update(observe(case, model, x, y))
            del model
        common.emit({"name": name, **result})
        keras.backend.clear_session()


def load_in_children(impl: str, names: list[str], tmp: Path) -> dict[str, dict]:
    """One child for ``names``; if it dies, the model it was on fails and a new child takes the rest."""
    results: dict[str, dict] = {}
    remaining = list(names)
    while remaining:
        found, error = common.child("model_zoo", "--child", impl, str(tmp), *remaining, tests=True)
        results.update((row.pop("name"), row) for row in found)
        remaining = [n for n in remaining if n not in results]
        if remaining:
            last = ([line for line in (error or "").splitlines() if line.strip()] or ["no output"])[-1]
            results[remaining.pop(0)] = {"error": f"loads: {last[:300]}"}
    return results


def measure(name: str, case: Case, tmp: Path) -> dict:
    record: dict[str, Any] = {"name": name, "group": case.group}
    common.use(KP)  # constructed while installed: keras_pickle records constructor arguments
    keras.utils.set_random_seed(0)
    try:
        model, x, y = case.make()
    except models.Skipped as e:
        return {**record, "skipped": str(e)}
    except Exception as e:
        return {**record, "error": failure("build", e)}
    record["params"] = int(sum(np.prod(v.shape) for m in case.models(model) for v in m.weights))
    payload(tmp, name, "data").write_bytes(pickle.dumps((x, y)))
    for impl in IMPLS:
        common.use(impl)
        gc.collect()
        try:
            start, buffer = time.perf_counter(), io.BytesIO()
            if case.joblib:
                joblib.dump(model, buffer)
            data = buffer.getvalue() if case.joblib else pickle.dumps(model, protocol=5)
            record[impl] = {"dumps_s": time.perf_counter() - start, "bytes": len(data)}
            payload(tmp, name, impl).write_bytes(data)
        except Exception as e:
            record[impl] = {"error": failure("dumps", e)}
    common.use(KP)
    record["reference"] = observe(case, model, x, y)
    del model
    keras.backend.clear_session()
    gc.collect()
    return record


def compare(expected: list[str] | None, got: list[str] | None, paths: list[str]) -> bool | str | None:
    if expected is None or got is None:
        return None
    if len(got) != len(expected):
        return f"{len(got)} variables, expected {len(expected)}"
    bad = [p for p, a, b in zip(paths, expected, got) if a != b]
    return f"{len(bad)} of {len(expected)} variables differ, first {bad[0]}" if bad else True


def verdict(record: dict, impl: str, loaded: dict) -> dict:
    """Each check: True, a string saying what went wrong, or None (not reached)."""
    ref, side = record["reference"], record[impl]
    v = {"dumps_s": side.get("dumps_s"), "loads_s": loaded.get("loads_s"), "bytes": side.get("bytes")}
    v["error"] = side.get("error") or loaded.get("error")
    v["loads"] = True if "loads_s" in loaded else v["error"]
    v["state"] = compare(ref["before"], loaded.get("before"), ref["paths"])
    v["predictions"] = None if "pred" not in loaded else loaded["pred"] == ref.get("pred") or "outputs differ"
    v["next_step"] = compare(ref.get("after"), loaded.get("after"), ref.get("paths_after", []))
    return v


def run(selected: dict[str, Case], tmp: Path, started: float) -> list[dict]:
    """Measure each case; whenever BATCH_BYTES of payloads are written, load them in children."""
    records, pending = [], []
    for i, (name, case) in enumerate(selected.items()):
        records.append(record := measure(name, case, tmp))
        sizes = [record[impl].get("bytes", 0) for impl in IMPLS if impl in record]
        status = record.get("skipped") or record.get("error") or f"{record['params']:,} params, payloads {sizes} B"
        print(f"{time.perf_counter() - started:7.1f}s  dumped {name}: {status}", flush=True)
        pending += [record] if "reference" in record else []
        written = sum(r[impl].get("bytes", 0) for r in pending for impl in IMPLS)
        if pending and (written > BATCH_BYTES or i == len(selected) - 1):
            print(f"{time.perf_counter() - started:7.1f}s  loading {len(pending)} model(s) in fresh processes")
            for impl in IMPLS:
                loaded = load_in_children(impl, [r["name"] for r in pending if "dumps_s" in r[impl]], tmp)
                for r in pending:
                    r.setdefault("verdicts", {})[impl] = verdict(r, impl, loaded.get(r["name"], {}))
            for path in tmp.glob("*.pkl"):
                if not path.name.startswith("warmup."):
                    path.unlink()
            pending = []
    return records


# Report and main

HEADER = ["model", "params", *(f"{i} {c}" for i in ("Keras", "kp") for c in ("loads", "state", "preds", "next", "s"))]
HEADER.append("ratio")


def passed(record: dict, impl: str) -> bool:
    return all(record.get("verdicts", {}).get(impl, {}).get(check) is True for check in CHECKS)


def rows(records: list[dict]) -> list[list[str]]:
    def seconds(v):
        return None if v["dumps_s"] is None or v["loads_s"] is None else v["dumps_s"] + v["loads_s"]

    out = []
    for r in records:
        if "verdicts" not in r:
            out.append([r["name"], "skipped" if "skipped" in r else "failed"] + ["–"] * (len(HEADER) - 2))
            continue
        cells = [r["name"], f"{r['params']:,}"]
        for v in map(r["verdicts"].get, IMPLS):
            cells += ["✓" if v[c] is True else "–" if v[c] is None else "✗" for c in CHECKS]
            cells.append("–" if seconds(v) is None else f"{seconds(v):.2f}")
        keras_s, kp_s = (seconds(r["verdicts"][i]) for i in IMPLS)
        out.append(cells + [f"{keras_s / kp_s:.1f}×" if keras_s and kp_s else "–"])
    return out


def problems(records: list[dict]) -> list[str]:
    """One line per model and implementation with a failed check: what went wrong."""
    out = [f"{r['name']}: skipped, {r['skipped']}" for r in records if "skipped" in r]
    for r in records:
        if "error" in r or "error" in r.get("reference", {}):
            out.append(f"{r['name']} (this script): {r.get('error') or r['reference']['error']}")
        for impl, v in r.get("verdicts", {}).items():
            details = [f"{c}: {v[c]}" for c in CHECKS[1:] if isinstance(v[c], str)]
            if v["error"] or details:
                out.append(f"{r['name']} ({impl}): " + "; ".join(filter(None, [v["error"], *details])))
    return out


MARKDOWN = """# The zoo: real models through Keras's own pickling and keras_pickle

Generated by `{command}` on {when} ({versions}), {minutes:.0f} minutes.

Each model is pickled in one process and loaded in a fresh one (`benchmarks/model_zoo.py` says exactly what is
measured). loads: unpickled; state: every variable (model and optimizers) bit-exact; preds: outputs
bit-identical; next: one more training step gives bit-identical variables; s: dumps + loads seconds;
ratio: Keras s / keras_pickle (kp) s. ✓ yes, ✗ no, – not reached.

{table}

## What failed

{failures}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="just these models (names as in the table)")
    parser.add_argument("--quick", action="store_true", help="a representative handful: " + ", ".join(QUICK))
    parser.add_argument("--max-params", type=int, default=MAX_PARAMS, help="skip larger applications")
    parser.add_argument("--md", type=Path, help="markdown table (default: docs/zoo.md, or benchmarks/results/)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import keras_hub
    import tensorflow as tf  # the keras.io VAE and GAN train with tf.GradientTape

    warnings.filterwarnings("ignore")  # Keras's advice on building and retracing, not results
    tf.get_logger().setLevel("ERROR")
    if args.child:
        child(args.child[0], Path(args.child[1]), args.child[2:])
        return 0
    other_backend = keras.backend.backend() != "tensorflow"  # the VAE and GAN are TensorFlow's only
    every = {n: c for n, c in cases(args.max_params).items() if not (other_backend and c.tensorflow_only)}
    wanted = args.only or (QUICK if args.quick else list(every))
    if set(wanted) - set(every):
        raise SystemExit(f"unknown model(s) {sorted(set(wanted) - set(every))}; known: {list(every)}")
    started, tmp = time.perf_counter(), Path(tempfile.mkdtemp(prefix="keras-pickle-zoo-"))
    try:
        warm = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
        models.trained(warm, np.ones((4, 4), "float32"), np.ones((4, 4), "float32"), loss="mse")
        for impl in IMPLS:
            common.use(impl)
            (tmp / f"warmup.{impl}.pkl").write_bytes(pickle.dumps(warm, protocol=5))
        records = run({n: c for n, c in every.items() if n in wanted}, tmp, started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table, failures = common.markdown(HEADER, rows(records)), problems(records)
    print("\n" + table + "\n\n" + "\n".join(f"  {line}" for line in failures))
    info = {"keras": keras.__version__, "keras_hub": keras_hub.__version__, "tensorflow": tf.__version__}
    info.update(keras_pickle=keras_pickle.__version__, backend=keras.backend.backend())
    bad = [r["name"] for r in records if "skipped" not in r and not passed(r, KP)]
    minutes, command = (time.perf_counter() - started) / 60, ["python", "-m", "benchmarks", "model_zoo", *(argv or [])]
    when, versions = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), ", ".join(f"{k} {v}" for k, v in info.items())
    summary = {"command": command, "when": when, "versions": info, "records": records}
    common.write_json(common.RESULTS / "zoo.json", summary)
    md = args.md or (common.RESULTS / "zoo.md" if args.quick or args.only else common.ROOT / "docs" / "zoo.md")
    md.parent.mkdir(parents=True, exist_ok=True)
    failed = "\n".join(f"- {line}" for line in failures or ["nothing"])
    fields = {"command": shlex.join(command), "when": when, "versions": versions, "minutes": minutes}
    md.write_text(MARKDOWN.format(**fields, table=table, failures=failed))
    print(f"\n{minutes:.1f} minutes; keras_pickle failed {len(bad)} of {len(records)}: {bad}\nresults: {md}")
    return 1 if bad else 0
