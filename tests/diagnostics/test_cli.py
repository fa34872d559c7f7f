"""The ``keras-pickle`` command: the README's demo, and ``inspect`` in a fresh process."""

from __future__ import annotations

import bz2
import json
import os
import subprocess
import sys

import pytest
from helpers import PROBE_MODULE, REPO_DIR, run_python

import keras_pickle
from keras_pickle._inspect import verdict

# What TensorFlow 2.21 prints on import and first use (absl's pre-initialization lines ignore TF_CPP_MIN_LOG_LEVEL).
TF_LOG_LINES = ("absl::InitializeLog", "oneDNN custom operations", "cuda drivers", "cuInit", "cpu_feature_guard")


def unconfigured_env() -> dict:
    """The environment of a user who has not set TF_CPP_MIN_LOG_LEVEL."""
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return env


def tf_log_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if any(mark in line for mark in TF_LOG_LINES)]


def test_demo_brings_every_copy_back_identical_and_shows_keras_failing():
    code = "import sys; from keras_pickle.cli import main; sys.exit(main(['demo']))"
    result = subprocess.run(
        [sys.executable, "-c", code], env=unconfigured_env(), capture_output=True, text=True, timeout=500
    )
    assert result.returncode == 0, result.stderr[-6000:]
    out = result.stdout
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 3}
    assert "0 / 2" in rows["copies trained and returned"].split("│")[2]
    assert "2 / 2" in rows["copies trained and returned"].split("│")[3]
    assert "2 / 2" in rows["identical to local training"].split("│")[3]
    assert "Could not locate class 'Gate'" in out
    # Neither this process nor its two spawn workers let TensorFlow's C++ logging through.
    assert tf_log_lines(result.stderr) == [], result.stderr[-3000:]


@pytest.mark.skipif(os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow", reason="TensorFlow's logging")
def test_check_keeps_tensorflow_quiet_unless_verbose(tmp_path):
    (tmp_path / "kp_quiet_target.py").write_text("import json\nvalue = {'a': [1, 2]}\n")
    argv = [sys.executable, "-m", "keras_pickle", "check", "kp_quiet_target:value"]
    quiet = subprocess.run(argv, cwd=tmp_path, env=unconfigured_env(), capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert tf_log_lines(quiet.stderr) == [], quiet.stderr[-3000:]
    verbose = subprocess.run(
        [*argv, "--verbose"], cwd=tmp_path, env=unconfigured_env(), capture_output=True, text=True, timeout=300
    )
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert tf_log_lines(verbose.stderr), "--verbose shows TensorFlow's logging (this TensorFlow printed none)"


def report_fields(out: str) -> dict[str, str]:
    """``{"object": "...", "custom objects": "...", ...}`` from one ``keras-pickle inspect`` report."""
    return {line[:18].strip(): line[18:] for line in out.splitlines()[1:] if line.startswith("  ")}


def keras_pickle_command(*args: str, cwd) -> subprocess.CompletedProcess:
    """``python -m keras_pickle ARGS`` in a fresh interpreter whose working directory (first on sys.path) is ``cwd``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO_DIR)}
    argv = [sys.executable, "-m", "keras_pickle", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_inspect_in_a_fresh_process_imports_nothing_the_payload_names(tmp_path):
    module = f"kp_cli_probe_{os.getpid()}"
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(PROBE_MODULE.format(marker=str(marker)))
    run_python(
        f"""
        import joblib, keras, keras_pickle
        from {module} import ProbeLayer, probe_activation

        keras_pickle.install()
        model = keras.Sequential([keras.Input((3,)), ProbeLayer(), keras.layers.Dense(2, activation=probe_activation)])
        model.compile(optimizer="adam", loss="mse")
        with open("probe.pkl", "wb") as f:
            keras_pickle.dump(model, f, checksum=True)
        with keras_pickle.checksums():
            joblib.dump(model, "probe.joblib", compress=("bz2", 3))
        """,
        cwd=tmp_path,
        keras_imported=True,
    )
    assert marker.exists(), "the probe does not leave its mark"
    marker.unlink()
    assert (tmp_path / "probe.joblib").read_bytes().startswith(b"BZh")

    for name in ("probe.pkl", "probe.joblib"):
        result = keras_pickle_command("inspect", name, "--verify", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert out.startswith(f"keras_pickle payload, format version {keras_pickle.FORMAT_VERSION} "), out
        fields = report_fields(out)
        assert fields["object"] == "keras.src.models.sequential.Sequential (layer)"
        probes = {f"{module}.ProbeLayer", f"{module}.probe_activation"}
        assert set(fields["custom objects"].split(", ")) == set(fields["imports"].split(", ")) == probes
        assert fields["checksum"].startswith("verified (")
        assert not marker.exists(), f"inspecting {name} imported {module}"

    result = keras_pickle_command("inspect", "probe.joblib", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["model_class"] == "keras.src.models.sequential.Sequential"
    assert report["format_version"] == keras_pickle.FORMAT_VERSION
    assert report["n_params"] == 3 + 3 * 2 + 2
    assert [module, "ProbeLayer"] in report["imports"]
    assert not marker.exists()

    # Loading it with pickle in the same kind of process does import the module.
    run_python("import pickle; pickle.load(open('probe.pkl', 'rb'))", cwd=tmp_path, keras_imported=True)
    assert marker.exists(), "the payload does not name the probe module"


def test_inspect_in_a_fresh_process_refuses_a_decompression_bomb(tmp_path):
    # 6 Mi NONE opcodes (the inspector evaluates at most 2 Mi) in a few hundred bytes of bz2.
    compressor = bz2.BZ2Compressor(9)
    parts = [compressor.compress(b"\x80\x04")] + [compressor.compress(b"N" * (1 << 20)) for _ in range(6)]
    bomb = b"".join([*parts, compressor.flush()])
    assert len(bomb) < 1000
    (tmp_path / "bomb.pkl.bz2").write_bytes(bomb)
    result = keras_pickle_command("inspect", "bomb.pkl.bz2", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert "keras_pickle.limits.MAX_OPCODES" in result.stderr and "Traceback" not in result.stderr


# Every call in one fresh interpreter, in turn: the exit status, what was printed, and whether Keras or a
# backend had been imported by then. Nothing may import one before answering help or a usage error.
ANSWERS_BEFORE_IMPORTING = """
import contextlib, io, json, sys
from keras_pickle.cli import main

results = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = main(argv)
        except SystemExit as e:
            status = e.code
    heavy = sorted(m for m in ("keras", "tensorflow", "jax", "torch") if m in sys.modules)
    results.append({"argv": argv, "status": status, "out": out.getvalue(), "heavy": heavy})
print(json.dumps(results))
"""


def test_help_and_usage_errors_answer_before_keras_or_a_backend_is_imported(tmp_path):
    calls = {
        ("--help",): (0, "usage: keras-pickle [-h]"),
        ("--version",): (0, f"keras-pickle {keras_pickle.__version__}"),
        ("check", "--help"): (0, "usage: keras-pickle check"),
        ("check",): (2, "usage: keras-pickle check"),
        ("check", "no_such_module_kp:x"): (2, "cannot find no_such_module_kp:x"),
        ("check", "no-colon"): (2, "expected module:attribute"),
        ("inspect", "--help"): (0, "usage: keras-pickle inspect"),
        ("inspect", "--bogus", "model.pkl"): (2, "usage: keras-pickle inspect"),
        ("demo", "--bogus"): (2, "usage: keras-pickle demo"),
        ("bench", "--help"): (0, "usage: keras-pickle bench"),
        ("bench", "--bogus"): (2, "usage: keras-pickle bench"),
        ("bench", "--only", "no_such_model"): (2, "invalid choice"),
        ("bench", "--repeat", "0"): (2, "--repeat must be at least 1"),
    }
    out = run_python(ANSWERS_BEFORE_IMPORTING, json.dumps([list(argv) for argv in calls]), cwd=tmp_path)
    results = json.loads(out.strip().splitlines()[-1])
    assert len(results) == len(calls)
    for result in results:
        status, expected = calls[tuple(result["argv"])]
        assert result["status"] == status, result
        assert expected in result["out"], result
        assert result["heavy"] == [], result
    bogus = next(r for r in results if r["argv"][:2] == ["inspect", "--bogus"])
    assert "unrecognized arguments: --bogus" in bogus["out"] and "{demo,inspect,bench,check}" not in bogus["out"]


def test_inspect_json_help_points_at_what_ships_with_the_package():
    """--json's help names keras_pickle.PayloadInfo, whose pydoc lists every key: no source checkout needed."""
    import pydoc

    from keras_pickle._inspect.payload_info import JSON_KEYS
    from keras_pickle.cli import _parser

    _, commands = _parser()
    help_text = " ".join(commands["inspect"].format_help().split())
    assert "python -m pydoc keras_pickle.PayloadInfo" in help_text and "docs/" not in help_text
    shown = pydoc.render_doc(keras_pickle.PayloadInfo, renderer=pydoc.plaintext)
    assert [key for key in JSON_KEYS if key not in shown] == []


def test_inspect_of_config_only_payloads_warns_of_nothing():
    """An allowed metric, an unbuilt optimizer and a loss are config-only payloads: no layer_states to miss."""
    import keras

    from keras_pickle._inspect import inspect_all

    keras_pickle.install(allow=("metrics",))
    try:
        metric = keras.metrics.Mean()
        metric.update_state([1.0, 2.0])
        data = keras_pickle.dumps([metric, keras.optimizers.Adam(0.01), keras.losses.MeanSquaredError()])
    finally:
        keras_pickle.install(allow=())
    infos = inspect_all(data)
    assert [info.kind for info in infos] == ["metric", "optimizer", "loss"]
    assert [info.warnings for info in infos] == [(), (), ()]


def test_identical_warnings_are_printed_once_with_a_count_or_naming_each():
    from keras_pickle._inspect.payload_info import collapsed

    names = ["'a.B' is in a module this process has not imported", "'c.D' is in a module this process has not imported"]
    assert collapsed([*names, "the body has no config", "the body has no config", names[0]]) == [
        "each of 'a.B', 'c.D' is in a module this process has not imported",
        "(2 times) the body has no config",
    ]
    assert collapsed([names[0], names[0]]) == [f"{names[0]} (2 times)"]


WRITE_ESTIMATOR = """
import pickle, sys
import keras, numpy as np
import keras_pickle
from scikeras.wrappers import KerasClassifier

def build():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])

keras_pickle.install()
x = np.linspace(0, 1, 160, dtype="float32").reshape(40, 4)
estimator = KerasClassifier(build, loss="binary_crossentropy", epochs=1, verbose=0).fit(x, (x.sum(1) > 2).astype(int))
with open(sys.argv[1], "wb") as f:
    pickle.dump(estimator, f)
"""


def test_inspect_of_a_scikeras_estimator_names_the_unimported_modules_in_one_warning(tmp_path):
    pytest.importorskip("scikeras")
    run_python(WRITE_ESTIMATOR, str(tmp_path / "estimator.pkl"), keras_imported=True)
    result = keras_pickle_command("inspect", str(tmp_path / "estimator.pkl"), cwd=tmp_path)
    warnings = [line for line in result.stdout.splitlines() if line.startswith(f"  WARNING: {verdict.UNDECIDED}")]
    assert len(warnings) == 1, result.stdout  # what only the loading process can judge, named in one warning
    assert "'scikeras.wrappers.KerasClassifier'" in warnings[0], warnings[0]


def test_inspect_piped_into_a_reader_that_stops_ends_without_a_traceback(tmp_path):
    """keras-pickle inspect f | head: the reader closes the pipe early; the command stops quietly (SIGPIPE's 141)."""
    import keras

    path = tmp_path / "many.pkl"
    keras_pickle.dump([keras.layers.Dense(2) for _ in range(400)], path)  # about 300 kB of report
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO_DIR)}
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_pickle", "inspect", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout.read(100).startswith(b"payload 1 of 400")
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_every_key_of_inspect_json_is_documented_in_the_guide():
    from keras_pickle._inspect.payload_info import JSON_KEYS

    guide = (REPO_DIR / "docs" / "guide.md").read_text()
    start = guide.index("With `--json`, `inspect` prints")
    documented = guide[start : guide.index("`check --json`", start)]
    assert [key for key in JSON_KEYS if f"`{key}`" not in documented] == []
