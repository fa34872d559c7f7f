"""What third-party engines need beyond ``pickle`` and ``copy``.

joblib/loky, ``multiprocessing``, cloudpickle and Keras's own scikit-learn
wrappers need nothing more than :func:`keras_pickle.install`. scikeras does:
on import it replaces ``keras.Model.__reduce__`` / ``__deepcopy__`` and the
``__reduce__`` of Loss, Metric and Optimizer. ``install()`` therefore watches
for that import (a ``sys.meta_path`` finder that runs a hook right after the
module has executed) and re-applies keras_pickle's hooks at once, whichever of
the two is imported first; see :mod:`._imports` and :mod:`._scikeras`.
"""

from __future__ import annotations

from ._imports import activate as activate
from ._imports import deactivate as deactivate
