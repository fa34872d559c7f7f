"""The globals a keras_pickle payload may name: safe mode's policy, and the inspector's report of it.

A global is judged on the object it resolves to, never on its spelling: the
reader resolves ``module`` + ``qualified name`` exactly as the module defines
them (:func:`defined_as_named`), then :func:`refusal` decides on the object's
type and defining module. What needs Keras to decide (its base classes, its
refused layer kinds, which of its functions are pure) comes in a
:class:`GlobalsPolicy` from the caller: this module imports no Keras.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable
from typing import Any

from .._wire.schema import RECONSTRUCTORS

NUMPY_RECONSTRUCTION = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }
)
"""What numpy's own pickles of arrays, scalars and dtypes call."""

CODECS_ENCODE = ("_codecs", "encode")
"""How protocols 0-2 spell ``bytes``: ``_codecs.encode(text, "latin1")``."""

CALLABLE_GLOBALS = frozenset(RECONSTRUCTORS) | NUMPY_RECONSTRUCTION | {CODECS_ENCODE}
"""Globals safe mode lets the stream call (each checks its arguments)."""

EXPECTED_CALL_PREFIXES = (
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer",
    "numpy.dtype",
    "__setstate__ of the result of numpy.",
    *(f"{module}.{name}" for module, name in RECONSTRUCTORS),
)
"""Descriptions of the calls a payload's stream makes: numpy's and keras_pickle's reconstructors (each
checks its arguments when it runs)."""


def is_stdlib(module: str) -> bool:
    return module.split(".", 1)[0] in sys.stdlib_module_names or module == "builtins"


def refused_outright(module: str, name: str) -> bool:
    """Whether safe mode refuses this global whatever is imported: a standard-library callable it does not list."""
    return (module, name) not in CALLABLE_GLOBALS and is_stdlib(module)


def expected_call(description: str) -> bool:
    """Whether a call, as the inspector describes it, is one that numpy's pickles make."""
    return description.startswith(EXPECTED_CALL_PREFIXES)


LIBRARY_PACKAGES = frozenset(
    {
        # Keras and keras_pickle themselves, their backends and their numerics.
        "keras", "keras_pickle", "tf_keras", "tensorflow", "tensorboard", "jax", "jaxlib", "flax", "optax",
        "torch", "torchvision", "numpy", "scipy", "ml_dtypes", "optree", "h5py", "absl", "google",
        # Model libraries and engines keras_pickle meets: their functions are not custom objects.
        "keras_hub", "keras_nlp", "keras_cv", "sklearn", "scikeras", "pandas", "cloudpickle", "joblib",
        "dask", "distributed", "ray", "pyspark", "mlflow", "optuna", "huggingface_hub", "transformers",
        "safetensors", "matplotlib", "PIL",
        # Tools whose functions touch files, processes or the network.
        "requests", "urllib3", "httpx", "aiohttp", "grpc", "zmq", "tornado", "fsspec", "boto3", "botocore",
        "paramiko", "fabric", "sh", "psutil", "IPython", "ipykernel", "pip", "setuptools", "pkg_resources",
        "_pytest", "pytest", "hypothesis", "yaml", "rich", "xxhash", "tqdm", "packaging",
    }
)  # fmt: skip
"""Top-level packages whose plain functions a payload may name only when Keras vouches for them
(:attr:`GlobalsPolicy.vouched_function`): a Keras built-in activation, loss, metric or op, or a
function registered with Keras for deserialization. Everything else in them (Keras's ``config``
setters, ``set_random_seed``, ``numpy.save``, ``tf.io.write_file``, an HTTP client...) changes
process state or touches files, and no model's config needs it."""


KERAS_PACKAGES = ("keras", "tf_keras")
"""The packages Keras itself lives in: no payload's custom object stands for what they define."""


DESERIALIZERS = frozenset({"get", "serialize", "deserialize"})
"""Names in a Keras function namespace that look objects up or build them: never vouched for."""


def exported_functions(package: Any, namespaces: tuple[str, ...]) -> frozenset[int]:
    """``id()`` of every plain function ``package`` (Keras or tf-keras, passed in: nothing is imported
    here) exports in ``namespaces`` (``"activations"``, ``"losses"``...), :data:`DESERIALIZERS` aside."""
    return frozenset(
        id(value)
        for namespace in namespaces
        for name, value in vars(getattr(package, namespace)).items()
        if isinstance(value, types.FunctionType) and name not in DESERIALIZERS
    )


def package_of(module: str) -> str:
    return module.split(".", 1)[0]


@dataclasses.dataclass(frozen=True)
class GlobalsPolicy:
    """What safe mode lets a payload name beyond :data:`CALLABLE_GLOBALS`, as inert references.

    ``allowed_bases``: classes whose subclasses may be named. ``refused_bases``: classes whose
    subclasses may never be named, even where ``allowed_bases`` admit them (Keras's Lambda layer and
    the layers that embed another format). ``vouched_function(f)``: whether a plain function defined
    in a :data:`LIBRARY_PACKAGES` package is one Keras deserializes as part of a model.
    """

    allowed_bases: tuple[type, ...]
    refused_bases: tuple[type, ...] = ()
    vouched_function: Callable[[Any], bool] = lambda function: False


def refusal(obj: Any, policy: GlobalsPolicy) -> str | None:
    """Why safe mode refuses to hand ``obj`` (a resolved global) to the stream; ``None`` if it may.

    Decided on what ``obj`` is: its type, its bases and the module that defines it.
    """
    defining = getattr(obj, "__module__", None)
    if not isinstance(defining, str) or is_stdlib(defining):
        return f"it is defined in the standard library ({defining}), which a keras_pickle payload never names"
    if isinstance(obj, type):
        if policy.refused_bases and issubclass(obj, policy.refused_bases):
            return "it is (a subclass of) a Keras layer that runs code or another format stored in its config"
        if not issubclass(obj, policy.allowed_bases):
            return "it is a class that is not a Keras class"
        return None
    if isinstance(obj, types.FunctionType):
        if package_of(defining) in LIBRARY_PACKAGES and not policy.vouched_function(obj):
            return (
                f"it is a function of {package_of(defining)} that is neither a Keras built-in activation, loss, "
                "metric or op nor registered with Keras: such functions change process state or touch files, "
                "and no model's config needs them"
            )
        return None
    return f"it is a {type(obj).__name__}, neither a Keras class nor a plain Python function"
