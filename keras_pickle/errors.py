"""The one exception family of keras_pickle.

Every error keras_pickle raises derives from :class:`KerasPickleError`.
Errors raised while pickling also derive from :class:`pickle.PicklingError`,
errors raised while loading also derive from :class:`pickle.UnpicklingError`,
so existing ``except pickle.PicklingError`` clauses keep working.
"""

from __future__ import annotations

import pickle

__all__ = [
    "KerasPickleError",
    "KerasPicklingError",
    "KerasUnpicklingError",
    "PickleRefusedError",
    "UnrecoverableConfigError",
    "CustomObjectError",
    "NotAPayloadError",
    "FormatVersionError",
    "UnsafePayloadError",
    "LambdaLayerError",
    "StateMismatchError",
    "BackendConversionError",
    "ChecksumMismatchError",
    "ResourceLimitError",
    "VersionSkewError",
    "CustomObjectLoadError",
    "DialectError",
]


class KerasPickleError(Exception):
    """Base class of every keras_pickle error.

    ``original_error`` holds the exception that caused this one, if any.
    """

    def __init__(self, message: str, *, original_error: BaseException | None = None):
        super().__init__(message)
        self.original_error = original_error


class KerasPicklingError(KerasPickleError, pickle.PicklingError):
    """An object could not be pickled."""


CORRUPT = "Corrupt keras_pickle payload: "
"""How a check's verdict on a payload's structure starts its message; what it found follows."""
NOT_A_PAYLOAD = "Not a keras_pickle payload: "
"""How the message for data that reads as no keras_pickle payload starts; what the data is follows."""
REFUSED_GLOBAL = "Safe mode refused global "
"""How safe mode's refusal of a global the stream names starts its message; the global and why follow."""
LEADS = (CORRUPT, NOT_A_PAYLOAD, REFUSED_GLOBAL)
"""The verdicts a loading error's message may start with (its ``lead``)."""


class KerasUnpicklingError(KerasPickleError, pickle.UnpicklingError):
    """A payload could not be loaded.

    ``lead`` is the verdict the message starts with, one of :data:`LEADS`, else None: given by the
    raiser, or where it gives none, the one its message starts with. :attr:`detail` is the rest.
    """

    def __init__(self, message: str, *, original_error: BaseException | None = None, lead: str | None = None):
        super().__init__(message, original_error=original_error)
        if lead is None:
            lead = next((known for known in LEADS if str(message).startswith(known)), None)
        self.lead = lead

    @property
    def detail(self) -> str:
        """What the message says after its ``lead``, without a final period: what was found (the whole
        message where it has no lead). It follows the message where a caller rewrites it."""
        message = str(self.args[0]) if self.args else ""
        return message.removeprefix(self.lead or "").rstrip(".")


class PickleRefusedError(KerasPicklingError):
    """Pickling was refused because the object's state would not survive it.

    ``obj_type`` is the refused object's class.
    """

    def __init__(self, message: str, *, obj_type: type):
        super().__init__(message)
        self.obj_type = obj_type


class UnrecoverableConfigError(KerasPicklingError):
    """The object's constructor arguments cannot be recovered from its config.

    ``class_name`` names the class that needs a ``get_config()``.
    """

    def __init__(self, message: str, *, class_name: str):
        super().__init__(message)
        self.class_name = class_name


class CustomObjectError(KerasPicklingError):
    """A custom class or function named in the config could not be found.

    ``name`` and ``module`` are what the config recorded.
    """

    def __init__(self, message: str, *, name: str, module: str | None):
        super().__init__(message)
        self.name = name
        self.module = module


class NotAPayloadError(KerasUnpicklingError):
    """The data is not a keras_pickle payload. ``found`` describes what it is."""

    def __init__(self, message: str, *, found: str, original_error: BaseException | None = None):
        super().__init__(message, original_error=original_error)
        self.found = found


class FormatVersionError(KerasUnpicklingError):
    """The payload was written in a format this keras_pickle cannot read."""

    def __init__(self, message: str, *, found_version: object, supported_version: int):
        super().__init__(message)
        self.found_version = found_version
        self.supported_version = supported_version


class UnsafePayloadError(KerasUnpicklingError):
    """Safe mode refused something in the payload before it could run.

    ``what`` names the refused global, opcode or layer.
    """

    def __init__(self, message: str, *, what: str):
        super().__init__(message)
        self.what = what

    @property
    def refused(self) -> str:
        """What safe mode refused: the message's first sentence, without the advice that follows it."""
        message = str(self.args[0]) if self.args else ""
        return message.partition(". ")[0].rstrip(".")


class LambdaLayerError(UnsafePayloadError):
    """Safe mode refused a ``Lambda`` layer (its code would run on load)."""


class StateMismatchError(KerasUnpicklingError):
    """The saved variables do not fit the object rebuilt from the config.

    ``path`` names the first variable that does not fit, when known.
    """

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class BackendConversionError(StateMismatchError):
    """A saved value cannot be held, unchanged, by the loading backend's variable.

    A payload written under another backend holds a value the loading
    backend's dtype for that variable cannot represent (an int64 iteration
    count past 2**31 - 1, for the int32 JAX and PyTorch give it; a seed
    state that does not fit in 32 bits), or a 64-bit value that JAX without
    ``JAX_ENABLE_X64`` would silently truncate. ``path`` names the variable,
    ``backend`` the loading backend.
    """

    def __init__(self, message: str, *, path: str | None = None, backend: str | None = None):
        super().__init__(message, path=path)
        self.backend = backend


class ChecksumMismatchError(KerasUnpicklingError):
    """The payload's content does not match the checksum in its header: it was damaged after it was written.

    ``expected`` is the checksum the payload carries, ``computed`` the checksum of its content as
    it is now (None when the damage left it too malformed to compute one).
    """

    def __init__(
        self,
        message: str,
        *,
        expected: str | None = None,
        computed: str | None = None,
        original_error: BaseException | None = None,
    ):
        super().__init__(message, original_error=original_error)
        self.expected = expected
        self.computed = computed


class ResourceLimitError(KerasUnpicklingError):
    """A payload asks for more than a resource limit of keras_pickle._format allows.

    ``limit_name`` names the limit (``"MAX_WEIGHT_BYTES"``...), ``limit`` is
    its value and ``value`` what the payload asked for.
    """

    def __init__(self, message: str, *, limit_name: str, limit: int, value: int):
        super().__init__(message)
        self.limit_name = limit_name
        self.limit = limit
        self.value = value


class VersionSkewError(KerasUnpicklingError):
    """The payload uses something the loading Keras lacks (a newer Keras wrote it).

    ``written_by`` and ``loading_on`` are the two Keras versions; ``where`` names the object
    (``"MultiHeadAttention 'mha'"``) and ``key`` the config key it sets to a value the loading
    Keras cannot honour.
    """

    def __init__(self, message: str, *, written_by: str, loading_on: str, where: str, key: str):
        super().__init__(message)
        self.written_by = written_by
        self.loading_on = loading_on
        self.where = where
        self.key = key


class CustomObjectLoadError(KerasUnpicklingError):
    """A class or function a payload ships by value (cloudpickle) could not be unpickled.

    ``name`` is its qualified name when known, ``missing_module`` the module the loading
    process lacks when that is the cause.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str | None,
        missing_module: str | None,
        original_error: BaseException | None = None,
    ):
        super().__init__(message, original_error=original_error)
        self.name = name
        self.missing_module = missing_module


class DialectError(KerasUnpicklingError):
    """The payload holds a model of a Keras dialect this process cannot rebuild (a tf-keras model where
    tf-keras is not installed); ``written``: that dialect, ``here``: the dialects this process has."""

    def __init__(self, message: str, *, written: str, here: tuple[str, ...]):
        super().__init__(message)
        self.written = written
        self.here = here
