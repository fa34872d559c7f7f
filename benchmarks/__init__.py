"""keras_pickle's benchmarks: ``python -m benchmarks NAME [--help]``, from the checkout's root.

Each runs Keras's own pickling and keras_pickle's side by side and prints ratios (never a timed
assertion: tests/benchmarks/test_bench.py runs them at their smallest size). What produces the
figures the docs quote:

* ``bench``: docs/performance.md's speed and memory tables (the README's one table is a part of them),
  docs/bench-results.json, docs/bench.png, the floors and the "bound" column in docs/guide.md (also
  ``keras-pickle bench``); with ``KERAS_BACKEND`` set and ``--only dense100mb``, docs/performance.md's
  table per backend, its in-band floors and zero-copy counts.
* ``behaviour``: docs/performance.md's "What Keras's built-in pickling loses" table (``--tf-keras``: its
  tf-keras table).
* ``checksum``: docs/guide.md's checksum table.
* ``file_guard``: what safe mode's file guard costs per audited event (docs/security.md).
* ``floors``: docs/performance.md's table of ratios to the floors, every backend and operation.
* ``joblib_parallel``: docs/performance.md's joblib table.
* ``model_zoo``: docs/zoo.md and the guide's count of real models.
* ``startup``: the start-up times in docs/guide.md.
* ``tf_keras_pickling``: docs/performance.md's tf-keras speed table.

:mod:`benchmarks.common` is the one helper module (timing, checks, child processes, reports, options)
and :mod:`benchmarks.models` the one model collection (tests/kerasio.py imports its keras.io classes).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before any benchmark imports TensorFlow
