"""``dumps`` / ``dump`` / ``loads`` / ``load``: pickle with keras_pickle's options."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

import keras

from . import _allow, _format, _options  # noqa: F401  (_allow, _format: see below)
from ._diagnosis import diagnose as _diagnose
from ._diagnosis import stream_root
from ._diagnosis.formats import looks_like_keras_native
from ._keras3 import native_pickle as _native_pickle
from ._protocol import install as _install
from ._protocol import mixins as _mixins
from ._reader import unpickler as _restricted
from ._reader.prescan import check_lengths, describe_bytes
from ._rebuild.vetting import globals_policy
from ._wire.joined_stream import JoinedStream
from ._wire.reprs import bounded_repr
from .errors import KerasPickleError, KerasPicklingError, KerasUnpicklingError, NotAPayloadError

# _allow and _format publish the reconstructors payloads name; safe mode resolves those from
# sys.modules only (it never imports), so loading needs them imported first.


def dumps(
    obj: Any,
    protocol: int | None = None,
    *,
    checksum: bool | None = None,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
) -> bytes:
    """Pickle ``obj`` (a Keras object or any structure holding some) to bytes.

    ``protocol`` defaults to :data:`pickle.HIGHEST_PROTOCOL`. With protocol 5
    and a ``buffer_callback``, every weight array is handed to the callback
    out of band instead of being copied into the stream. ``checksum=True``
    records an xxh3 checksum of the content, verified on load; ``False``
    records none. By default (``None``) the enclosing :func:`checksums` block
    decides, else every payload carries one unless a ``buffer_callback``
    takes the weights out of band (a live transport, where hashing would cost
    more than the dump itself: docs/guide.md, "Checksums and versions").
    """
    stream = JoinedStream()
    dump(obj, stream, protocol, checksum=checksum, buffer_callback=buffer_callback)
    return stream.getvalue()


def dump(
    obj: Any,
    file: IO[bytes] | str | os.PathLike,
    protocol: int | None = None,
    *,
    checksum: bool | None = None,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
) -> None:
    """Like :func:`dumps`, writing to a binary file object, or to the file at a path (``str`` or
    ``os.PathLike``, created or truncated), as :func:`load` reads them.

    Raises :class:`TypeError` naming ``file`` when it is neither (a text-mode file included), before
    anything is pickled.
    """
    if isinstance(file, (str, os.PathLike)):
        with open(file, "wb") as opened:
            dump(obj, opened, protocol, checksum=checksum, buffer_callback=buffer_callback)
        return
    if not callable(getattr(file, "write", None)) or isinstance(file, io.TextIOBase):
        text_mode = " (a text-mode file: open it with 'wb')" if isinstance(file, io.TextIOBase) else ""
        raise TypeError(
            "keras_pickle.dump takes a binary file object (with write) or a path as its file. Received: "
            f"file={bounded_repr(file)} of type {type(file).__name__}{text_mode}."
            + (" For bytes, use keras_pickle.dumps(obj)." if _is_bytes_like(file) else "")
        )
    _install.install()
    protocol = pickle.HIGHEST_PROTOCOL if protocol is None else protocol
    if checksum is None:  # the enclosing checksums() block's, if any; else the default
        checksum = _options.dump_options().checksum
    with _options.dumping(_options.DumpOptions(checksum=checksum, in_band=buffer_callback is None)):
        try:
            if isinstance(file, JoinedStream) and _mixins.reduced_here(obj):  # keras_pickle.dumps(model): each value
                pickler = file.pickler(protocol, buffer_callback)  # copied once, when the stream joins
            else:
                pickler = pickle.Pickler(file, protocol, buffer_callback=buffer_callback)
            pickler.dump(obj)
        except KerasPickleError:
            raise
        except Exception as e:
            raise KerasPicklingError(
                f"Cannot pickle {type(obj).__name__}: {type(e).__name__}: {e}", original_error=e
            ) from e


@contextlib.contextmanager
def checksums(enabled: bool = True) -> Iterator[None]:
    """Within: every keras_pickle payload written carries a checksum (``enabled=False``: none does).

    For writers that take no keras_pickle arguments: ``pickle.dump``,
    ``joblib.dump``, cloudpickle. Outside a block the default
    holds: a checksum wherever the weights are surely written into the
    stream (``dumps`` / ``dump`` without a ``buffer_callback``, any pickle of
    protocol 0 to 4), none where a protocol-5 pickle may hand them out of
    band (``dumps`` with a ``buffer_callback``, plain ``pickle.dumps`` at
    protocol 5). The setting is per thread and per asyncio task (a context
    variable); ``dumps(..., checksum=True or False)`` inside the block still
    decides for its own call. Loading verifies a checksum wherever there is one.
    """
    with _options.dumping(_options.DumpOptions(checksum=enabled)):
        yield


def loads(
    data: bytes,
    *,
    safe_mode: bool = True,
    custom_objects: Mapping[str, Any] | None = None,
    allow_by_value: bool = False,
    allow_callbacks: bool = False,
    allow_control_flow: bool = False,
    buffers: Iterable[Any] | None = None,
) -> Any:
    """Load a keras_pickle payload (or a structure holding some) from bytes.

    With ``safe_mode=True`` (the default) a restricted unpickler refuses
    anything but keras_pickle's reconstructor, numpy arrays and what safe
    mode's allow-list admits (docs/security.md): the classes Keras builds
    from a config and its computations on tensors, as safe mode's vocabulary
    lists them; subclasses of Keras's base classes; functions registered with
    ``keras.saving.register_keras_serializable`` where Keras calls them with
    its own arguments; and the objects the caller names in
    ``custom_objects`` (as for ``keras.saving.load_model``: names to classes
    or functions, which safe mode then allows and Keras may resolve). Lambda
    layers are refused; so is a class or function carried by value (one of
    the writer's main script that this process's main script does not define:
    its code is in the payload) unless ``allow_by_value=True`` says the
    payload's writer is trusted to run that code here; so are callbacks (they
    act on files) unless ``allow_callbacks=True``; so are Keras's control-flow
    ops (``switch``, ``cond``, ``while_loop``... in a Functional model: they
    call the functions their arguments name) unless
    ``allow_control_flow=True``, and even then each function they call must be
    one of Keras's pure tensor functions or named in ``custom_objects``.
    ``safe_mode=False`` unpickles like ``pickle.loads``.
    ``buffers`` are the out-of-band buffers of a protocol-5 ``dumps``.

    Raises :class:`~keras_pickle.KerasUnpicklingError` (or a subclass) for
    anything that is not a loadable keras_pickle payload, and :class:`TypeError`
    when ``data`` is not bytes-like (a file object goes to :func:`load`).
    """
    if isinstance(data, str) or not _is_bytes_like(data):
        hint = "keras_pickle.load(file_or_path)" if _is_file_or_path(data) else "keras_pickle.loads(bytes)"
        raise TypeError(
            f"keras_pickle.loads takes the payload as bytes (or any bytes-like buffer). Received: a "
            f"{type(data).__name__}. For a file object or a path, use {hint}."
        )
    view = memoryview(data)
    if view.nbytes == 0:
        raise NotAPayloadError("Not a keras_pickle payload: the data is empty.", found="empty data")
    # BytesIO shares a bytes object's memory instead of copying it.
    file = io.BytesIO(data if type(data) is bytes else view)
    options = _load_options(safe_mode, custom_objects, allow_by_value, allow_callbacks, allow_control_flow)
    return _load_one(file, options, buffers=buffers, describe=lambda: describe_bytes(view), data=data)


def load(
    file: IO[bytes] | str | os.PathLike,
    *,
    safe_mode: bool = True,
    custom_objects: Mapping[str, Any] | None = None,
    allow_by_value: bool = False,
    allow_callbacks: bool = False,
    allow_control_flow: bool = False,
    buffers: Iterable[Any] | None = None,
) -> Any:
    """Like :func:`loads`, reading one pickle from a binary file object, or from the file at a path
    (``str`` or ``os.PathLike``, as ``joblib.load`` and ``keras.saving.load_model`` take)."""
    options = _load_options(safe_mode, custom_objects, allow_by_value, allow_callbacks, allow_control_flow)
    # A keras_pickle module that calls load (the MLflow flavor) spells the advice in its own terms.
    internal = sys._getframe(1).f_globals.get("__name__", "").startswith("keras_pickle.")
    if isinstance(file, (str, os.PathLike)):
        with open(file, "rb") as opened, _advice_for_load(None if internal else "path"):
            return _load_one(opened, options, buffers=buffers, describe=lambda: f"the file {os.fspath(file)!r}")
    if not (callable(getattr(file, "read", None)) and callable(getattr(file, "readline", None))):
        raise TypeError(
            "keras_pickle.load takes a binary file object (with read and readline) or a path. Received: a "
            f"{type(file).__name__}." + (" For bytes, use keras_pickle.loads(data)." if _is_bytes_like(file) else "")
        )
    name = getattr(file, "name", file)
    with _advice_for_load(None if internal else "file"):
        return _load_one(file, options, buffers=buffers, describe=lambda: f"the file {name!r}")


LOADS_ADVICE = "keras_pickle.loads(data"
"""How an error's advice names the call that loads a payload with other switches: :func:`loads`'s spelling,
which :func:`load` respells with its own argument."""


@contextlib.contextmanager
def _advice_for_load(argument: str | None) -> Iterator[None]:
    """Within: a keras_pickle error's advice names :func:`load`, which the caller called, with ``argument``
    (``"file"`` or ``"path"``) where it names ``keras_pickle.loads(data, ...)``; ``None``: as written. The error
    itself is re-raised, its type and data unchanged."""
    try:
        yield
    except KerasPickleError as e:
        if argument is not None and e.args and isinstance(e.args[0], str) and LOADS_ADVICE in e.args[0]:
            e.args = (e.args[0].replace(LOADS_ADVICE, f"keras_pickle.load({argument}"), *e.args[1:])
        raise


def _is_bytes_like(data: Any) -> bool:
    try:
        memoryview(data)
    except TypeError:
        return False
    return True


def _is_file_or_path(data: Any) -> bool:
    return isinstance(data, (str, os.PathLike)) or callable(getattr(data, "read", None))


def _load_options(
    safe_mode: bool,
    custom_objects: Mapping[str, Any] | None,
    allow_by_value: bool,
    allow_callbacks: bool,
    allow_control_flow: bool = False,
) -> _options.LoadOptions:
    if custom_objects is not None and not (
        isinstance(custom_objects, Mapping) and all(isinstance(key, str) for key in custom_objects)
    ):
        raise TypeError(
            "custom_objects must map names (str) to classes or functions, as keras.saving.load_model takes them. "
            f"Received: {type(custom_objects).__name__}."
        )
    return _options.LoadOptions(
        safe_mode=safe_mode,
        allow_by_value=allow_by_value,
        allow_callbacks=allow_callbacks,
        allow_control_flow=allow_control_flow,
        custom_objects=dict(custom_objects or {}),
    )


def _load_one(
    file: IO[bytes], options: _options.LoadOptions, *, buffers, describe: Callable[[], str], data: Any = None
) -> Any:
    """Load one pickle from ``file`` with ``options``, else raise what :mod:`keras_pickle._diagnosis.diagnose`
    says; ``describe()`` names the input in errors, ``data`` is its bytes where the caller holds them (``loads``)."""
    reading = _diagnose.Reading.of(file, describe, data)
    foreign = _diagnose.foreign(reading)
    if foreign is not None:
        raise foreign
    unpickler = None
    with _options.loading(options):
        try:
            check_lengths(file, describe)
            if options.safe_mode:
                unpickler = _restricted.SafeUnpickler(file, policy=globals_policy(), buffers=buffers)
            else:
                unpickler = stream_root.RecordingUnpickler(file, buffers=buffers)
            obj = unpickler.load()
        except Exception as e:
            diagnosed = _diagnose.diagnose(e, reading, unpickler, options.restored)
            if diagnosed is e:
                raise
            raise diagnosed from e
    unexpected = _diagnose.unexpected(obj, reading, unpickler, options.restored)
    if unexpected is not None:
        raise unexpected
    return obj


def convert(
    data: bytes,
    *,
    custom_objects: Mapping[str, Any] | None = None,
    protocol: int | None = None,
    checksum: bool | None = None,
) -> bytes:
    """Re-pickle bytes that Keras's own pickling wrote (``pickle.dumps(model)`` without keras_pickle, or
    scikeras's) as a keras_pickle payload, which :func:`loads` then reads in safe mode.

    Runs the pickle, as ``pickle.loads`` does: convert only data you trust. ``custom_objects`` names the
    classes and functions the model needs (as ``keras.saving.load_model`` takes them); Keras's own
    pickling stores none of them. ``protocol`` and ``checksum`` as for :func:`dumps` (a checksum by
    default). Raises :class:`NotAPayloadError` for data that is not Keras's pickle
    format, and :class:`~keras_pickle.KerasUnpicklingError` (naming ``custom_objects``) where Keras
    cannot rebuild it.
    """
    if not _is_bytes_like(data) or not looks_like_keras_native(bytes(memoryview(data)[:4096])):
        raise NotAPayloadError(
            "keras_pickle.convert takes the bytes of Keras's own pickling (pickle.dumps(model) without "
            "keras_pickle, or scikeras's); these are not. A keras_pickle payload needs no conversion: "
            "keras_pickle.loads(data).",
            found="not a Keras pickle",
        )
    _load_options(True, custom_objects, False, False)  # the same check of custom_objects as loads
    try:
        with keras.saving.custom_object_scope(dict(custom_objects or {})):
            obj = pickle.loads(data)
    except Exception as e:
        raise KerasUnpicklingError(
            f"Keras could not rebuild the model in this pickle ({_native_pickle.keras_cause(e)}).\n"
            "Give it what it needs, then convert again:\n"
            + "\n".join(f"    {line}" for line in _native_pickle.conversion_code(bytes(memoryview(data)))),
            original_error=e,
        ) from e
    return dumps(obj, protocol, checksum=checksum)
