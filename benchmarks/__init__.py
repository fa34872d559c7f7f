"""keras_pickle's benchmarks: ``python -m benchmarks NAME [--help]``, from the checkout's root.

Each runs Keras's own pickling and keras_pickle's side by side and prints ratios (never a timed
assertion: tests/benchmarks/test_bench.py runs them at their smallest size). What produces the
figures the docs quote:

* ``bench``: README's speed and memory tables, docs/bench-results.json, docs/bench.png, the floors and
  the "bound" column in docs/guide.md (also ``keras-pickle bench``); with ``KERAS_BACKEND`` set and
  ``--only dense100mb``, README's table per backend, its in-band floors and zero-copy counts.
* ``behaviour``: README's "Why not Keras's built-in pickling?" table (``--tf-keras``: its tf-keras table).
* ``checksum``: docs/guide.md's checksum table.
* ``joblib_parallel``: README's joblib table.
* ``model_zoo``: docs/zoo.md and README's count of real models.
* ``startup``: the start-up times in README and docs/guide.md.
* ``tf_keras_pickling``: README's tf-keras speed table.

:mod:`benchmarks.common` is the one helper module (timing, checks, child processes, reports, options)
and :mod:`benchmarks.models` the one model collection (tests/kerasio.py imports its keras.io classes).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before any benchmark imports TensorFlow
