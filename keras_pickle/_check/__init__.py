"""``keras_pickle.check(obj)``: is this object pickle-safe, and if not, why? Imports Keras.

* :mod:`.checker`: ``check()``, which follows pickle's own rules without pickling anything.
* :mod:`.layers`: how a Keras layer or model would fail, judged from its config and custom objects.
* :mod:`.report`: the ``CheckReport`` and its ``Problem`` entries.
"""

from .checker import check as check
from .report import CheckReport as CheckReport
from .report import Problem as Problem
