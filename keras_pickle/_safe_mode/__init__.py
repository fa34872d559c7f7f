"""Safe mode's policy: what a payload may name or make Keras build, and why, in one place. No Keras import.

* :mod:`.tables`: the vocabulary (``vocabulary/*.json``): every class and function Keras's packages
  define, with its role or the reason it is refused.
* :mod:`.roles`: where a config lets the payload choose a call's arguments; what Keras decodes or runs
  from a config's values.
* :mod:`.rules`: the other rules as data, each entry with its reason: the globals the stream may call,
  the Keras base classes other classes may derive from, the layers refused under any name, the layers
  that read a file or merge a module their config names, what tf-keras's op layers may call.
* :mod:`.decision`: the one decision, :func:`~.decision.refusal` (may a payload name this object, in this
  role?), and :class:`~.decision.GlobalsPolicy`, the rules' classes as this process has them.
* :mod:`.config_judge`: the decision applied to every node of a decoded config, under every spelling.
* :mod:`.resolution`: how a name resolves, computed without running or importing anything.
* :mod:`.calls`: the callables of the stream, each held to what numpy's own pickles do.
* :mod:`.opens`: the guard on the file system while a payload is rebuilt (defence in depth).

Who asks it: the restricted unpickler (:mod:`keras_pickle._reader.unpickler`), the reconstructor's vetting
of a body (:mod:`keras_pickle._rebuild.vetting`, with each dialect's lookups:
:mod:`keras_pickle._keras3.safe_mode`, :mod:`keras_pickle._tfkeras.safe_mode`), and ``inspect``
(:mod:`keras_pickle._inspect.verdict`). docs/security.md describes what it promises.
"""

from .config_judge import config_refusals as config_refusals
from .config_judge import judge_config as judge_config
from .config_judge import judge_names as judge_names
from .decision import GlobalsPolicy as GlobalsPolicy
from .decision import expected_call as expected_call
from .decision import policy_here as policy_here
from .decision import refusal as refusal
from .rules import CODECS_ENCODE as CODECS_ENCODE
