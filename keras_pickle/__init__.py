"""keras_pickle: pickle, copy and ship Keras 3 models faithfully (RFC 286).

Call :func:`install` once; from then on ``pickle``, ``copy``, and the tools
built on them (joblib, cloudpickle, multiprocessing) carry Keras models and
layers with their complete state and custom objects, and refuse objects whose
state would be lost.
"""

from ._api import checksums as checksums
from ._api import dump as dump
from ._api import dumps as dumps
from ._api import load as load
from ._api import loads as loads
from ._check import CheckReport as CheckReport
from ._check import check as check
from ._format import FORMAT_VERSION as FORMAT_VERSION
from ._inspect import PayloadInfo as PayloadInfo
from ._inspect import inspect as inspect
from ._mixins import CallbackPickleMixin as CallbackPickleMixin
from ._mixins import LayerPickleMixin as LayerPickleMixin
from ._mixins import LossPickleMixin as LossPickleMixin
from ._mixins import MetricPickleMixin as MetricPickleMixin
from ._mixins import OptimizerPickleMixin as OptimizerPickleMixin
from ._mixins import install as install
from ._mixins import is_installed as is_installed
from ._mixins import uninstall as uninstall
from .errors import ChecksumMismatchError as ChecksumMismatchError
from .errors import CustomObjectError as CustomObjectError
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

__version__ = "0.2.0"
