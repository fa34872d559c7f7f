"""What third-party engines need beyond ``pickle`` and ``copy``.

joblib/loky, ``multiprocessing``, cloudpickle, Ray and Keras's own
scikit-learn wrappers need nothing more than :func:`keras_pickle.install`.
Two libraries need more, and ``install()`` watches for their import (a
``sys.meta_path`` finder that runs a hook right after the module has
executed; :mod:`._imports`), whichever is imported first:

* scikeras replaces ``keras.Model.__reduce__`` / ``__deepcopy__`` and the
  ``__reduce__`` of Loss, Metric and Optimizer on import; the hooks are
  re-applied right after it (:mod:`._scikeras`).
* Dask's ``distributed`` registers a Keras 2 serializer that fails on every
  Keras 3 model, and Dask tokenizes models by pickling and unpickling them;
  both are replaced (:mod:`._dask`). :class:`.dask.InstallOnWorkers` (:mod:`.dask`) installs
  keras_pickle on workers that create models themselves.

:mod:`.mlflow` is the MLflow flavor (``keras_pickle.integrations.mlflow.log_model`` / ``load_model``).
"""

from __future__ import annotations

from ._imports import activate as activate
from ._imports import deactivate as deactivate
