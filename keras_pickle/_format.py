"""``keras_pickle._format.restore``: the reconstructor's stable path, named by every payload.

Thin on purpose. The wire format lives in :mod:`keras_pickle._wire`, the
reconstructor in :mod:`keras_pickle._protocol.reconstruct`; this module publishes it
under the path that payloads written by every keras_pickle version name, and
imports :mod:`keras_pickle._protocol.install` so that loading a payload installs
keras_pickle in the loading process (a worker then sends results back the
same way). Never rename or remove it.
"""

from ._protocol import install as _install  # noqa: F401  (registers install-on-first-load with the reconstructor)
from ._protocol.reconstruct import part_of as part_of
from ._protocol.reconstruct import restore as restore
from ._rebuild.load_by_value import by_value as by_value
from ._rebuild.registered import defined_here as defined_here
from ._rebuild.registered import registered as registered
from ._wire.schema import FORMAT_VERSION as FORMAT_VERSION
