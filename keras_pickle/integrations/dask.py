"""A ``distributed`` worker plugin that installs keras_pickle on every worker.

A worker that *receives* a keras_pickle payload installs keras_pickle when it
loads it. A task that builds a model on the worker and returns it needs
keras_pickle installed there first::

    client.register_plugin(keras_pickle.integrations.dask.InstallOnWorkers())

It applies to the workers present and to every worker that joins later.
Importing this module requires ``distributed``.
"""

from __future__ import annotations

from collections.abc import Iterable

from distributed.diagnostics.plugin import WorkerPlugin

from .._protocol.install import install


class InstallOnWorkers(WorkerPlugin):
    """Run :func:`keras_pickle.install` (with the same ``allow``) on each worker."""

    name = "keras-pickle-install"

    def __init__(self, allow: Iterable[str] | None = None):
        self.allow = None if allow is None else tuple(allow)

    def setup(self, worker) -> None:
        install(allow=self.allow)
