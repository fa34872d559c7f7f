"""Coverage-guided fuzzing of keras_pickle.loads and keras_pickle.inspect with atheris.

Optional, and not collected by pytest (tests/safe_mode/test_fuzz.py is the suite's fuzzer)::

    pip install atheris
    python tests/safe_mode/fuzz_atheris.py -max_total_time=300 -artifact_prefix=/tmp/atheris_

Seeds are the payloads of a tiny model with a custom layer (protocols 0, 2 and
5, with and without checksum), written to a corpus directory (the first
argument that is a directory, else a temporary one). Any exception but a
``KerasPickleError`` is a finding: atheris prints it with the input and stops.
A checksummed seed that still loads after mutation must be the original model.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for zoo

import atheris  # noqa: E402

with atheris.instrument_imports(include=["keras_pickle"]):
    import keras_pickle

import keras  # noqa: E402
import zoo  # noqa: E402

keras_pickle.install()
keras.utils.set_random_seed(0)
MODEL = keras.Sequential([keras.Input((3,)), zoo.Scale(2.0), keras.layers.Dense(2)])
WEIGHTS = [keras.ops.convert_to_numpy(v).tobytes() for v in MODEL.variables]
SEEDS = {
    f"p{protocol}{'_checksum' if checksum else ''}": keras_pickle.dumps(MODEL, protocol=protocol, checksum=checksum)
    for protocol in (0, 2, 5)
    for checksum in (False, True)
}


def test_one_input(data: bytes) -> None:
    try:
        restored = keras_pickle.loads(data)
    except keras_pickle.KerasPickleError:
        pass
    else:
        if b"xxh3_64" in data and isinstance(restored, keras.Model):
            values = [keras.ops.convert_to_numpy(v).tobytes() for v in restored.variables]
            if values != WEIGHTS:
                raise AssertionError("a checksummed payload loaded with different weights")
    try:
        keras_pickle.inspect(data, verify=True)
    except keras_pickle.KerasPickleError:
        pass


def main() -> None:
    argv = list(sys.argv)
    corpus = next((a for a in argv[1:] if os.path.isdir(a)), None)
    if corpus is None:
        corpus = tempfile.mkdtemp(prefix="keras_pickle_corpus_")
        argv.append(corpus)
    for name, data in SEEDS.items():
        with open(os.path.join(corpus, name), "wb") as f:
            f.write(data)
    if not any(a.startswith("-rss_limit_mb") for a in argv):
        argv.append("-rss_limit_mb=8192")
    # libFuzzer reports the number of runs ("Done N runs") and ends the process.
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
