"""``keras_pickle._allow.restore_with_state`` / ``restore_callback``: stable paths named by payloads.

Objects pickled under ``install(allow=...)`` call one of these two
reconstructors; their dotted paths are part of the format. The machinery lives
in :mod:`keras_pickle._protocol.opt_in`; like :mod:`keras_pickle._format`, this module
only publishes the reconstructors and imports :mod:`keras_pickle._protocol.install`, so
that loading one installs keras_pickle. Never rename or remove it.
"""

from ._protocol import install as _install  # noqa: F401  (registers install-on-first-load with the reconstructor)
from ._protocol.opt_in import restore_callback as restore_callback
from ._protocol.opt_in import restore_with_state as restore_with_state
