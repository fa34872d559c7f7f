"""keras_pickle: pickle, copy and ship Keras 3 models faithfully (RFC 286).

Call :func:`install` once; from then on ``pickle``, ``copy``, and the tools
built on them (joblib, cloudpickle, multiprocessing) carry Keras models and
layers with their complete state and custom objects, and refuse objects whose
state would be lost.

``import keras_pickle`` imports neither Keras nor a backend: the errors, the
limits and :func:`inspect` are here at once, and the names that work on Keras
objects (``install``, ``dumps``, ``check``, the mixins...) import Keras the
first time one of them is used. Loading a payload needs none of them: the
payload imports what it needs.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from . import limits as limits
from ._inspect import PayloadInfo as PayloadInfo
from ._inspect import inspect as inspect
from ._version import __version__ as __version__
from ._wire.schema import FORMAT_VERSION as FORMAT_VERSION
from .errors import BackendConversionError as BackendConversionError
from .errors import ChecksumMismatchError as ChecksumMismatchError
from .errors import CustomObjectError as CustomObjectError
from .errors import CustomObjectLoadError as CustomObjectLoadError
from .errors import DialectError as DialectError
from .errors import FormatVersionError as FormatVersionError
from .errors import KerasPickleError as KerasPickleError
from .errors import KerasPicklingError as KerasPicklingError
from .errors import KerasUnpicklingError as KerasUnpicklingError
from .errors import LambdaLayerError as LambdaLayerError
from .errors import NotAPayloadError as NotAPayloadError
from .errors import PickleRefusedError as PickleRefusedError
from .errors import ResourceLimitError as ResourceLimitError
from .errors import StateMismatchError as StateMismatchError
from .errors import UnrecoverableConfigError as UnrecoverableConfigError
from .errors import UnsafePayloadError as UnsafePayloadError
from .errors import VersionSkewError as VersionSkewError

if _TYPE_CHECKING:
    from ._api import checksums as checksums
    from ._api import convert as convert
    from ._api import dump as dump
    from ._api import dumps as dumps
    from ._api import load as load
    from ._api import loads as loads
    from ._check import CheckReport as CheckReport
    from ._check import check as check
    from ._protocol.install import install as install
    from ._protocol.install import is_installed as is_installed
    from ._protocol.install import uninstall as uninstall
    from ._protocol.mixins import CallbackPickleMixin as CallbackPickleMixin
    from ._protocol.mixins import LayerPickleMixin as LayerPickleMixin
    from ._protocol.mixins import LossPickleMixin as LossPickleMixin
    from ._protocol.mixins import MetricPickleMixin as MetricPickleMixin
    from ._protocol.mixins import OptimizerPickleMixin as OptimizerPickleMixin

__all__ = [
    "FORMAT_VERSION",
    "BackendConversionError",
    "CallbackPickleMixin",
    "CheckReport",
    "ChecksumMismatchError",
    "CustomObjectError",
    "CustomObjectLoadError",
    "DialectError",
    "FormatVersionError",
    "KerasPickleError",
    "KerasPicklingError",
    "KerasUnpicklingError",
    "LambdaLayerError",
    "LayerPickleMixin",
    "LossPickleMixin",
    "MetricPickleMixin",
    "NotAPayloadError",
    "OptimizerPickleMixin",
    "PayloadInfo",
    "PickleRefusedError",
    "ResourceLimitError",
    "StateMismatchError",
    "UnrecoverableConfigError",
    "UnsafePayloadError",
    "VersionSkewError",
    "__version__",
    "check",
    "checksums",
    "convert",
    "dump",
    "dumps",
    "inspect",
    "install",
    "is_installed",
    "limits",
    "load",
    "loads",
    "uninstall",
]
"""The public surface: everything else is private, whatever its name."""

# Public name -> the module that defines it; each imports Keras.
_KERAS_LEVEL = {
    "checksums": "._api",
    "convert": "._api",
    "dump": "._api",
    "dumps": "._api",
    "load": "._api",
    "loads": "._api",
    "CheckReport": "._check",
    "check": "._check",
    "install": "._protocol.install",
    "is_installed": "._protocol.install",
    "uninstall": "._protocol.install",
    "CallbackPickleMixin": "._protocol.mixins",
    "LayerPickleMixin": "._protocol.mixins",
    "LossPickleMixin": "._protocol.mixins",
    "MetricPickleMixin": "._protocol.mixins",
    "OptimizerPickleMixin": "._protocol.mixins",
}


def __getattr__(name: str) -> _Any:
    module = _KERAS_LEVEL.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_pickle' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_KERAS_LEVEL))
