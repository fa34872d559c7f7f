"""The reconstructor every payload calls: ``keras_pickle._format.restore(header, body)``.

It validates the header before touching the body, the body before decoding
anything (:mod:`keras_pickle._wire.schema`: both as written, their checksum verified), brings a
payload of an older format version to the current shape once (:mod:`keras_pickle._wire.upgrade`:
nothing after it knows older versions), in safe mode judges what the
body's objects and configs stand for (:mod:`keras_pickle._rebuild.vetting`; first, a
newer Keras's config keys this one lacks are dropped or refused by
:mod:`keras_pickle._rebuild.skew`) and holds Keras's own safe mode for the whole rebuild,
rebuilds the object (:mod:`keras_pickle._rebuild.decode`; a joblib worker's repeated task copies the
model it rebuilt for the same payload, :mod:`.worker_cache`), runs the hooks registered with
:func:`after_restore` (``install()`` registers "install on first load", so
that a worker that received a model sends results back the same way), and
raises only :class:`~keras_pickle.KerasUnpicklingError` subclasses; when the payload comes from
another Keras, backend or format version, their message names both sides.

The function is defined here and published as ``keras_pickle._format.restore``
(``_format`` is a thin module at the top of the package): that dotted path is
part of the format, and pickle records it from the function's ``__module__``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import keras

from .. import _options
from .._diagnosis import load_failure as _load_failure
from .._keras3.recorded import records as _records
from .._rebuild import decode as _rebuild_decode
from .._rebuild import load_by_value as _load_by_value
from .._rebuild import reclaim as _reclaim
from .._rebuild import skew as _skew
from .._rebuild import vetting as _vetting
from .._wire import schema, upgrade
from .._wire.refs import InertReference
from .._wire.reprs import shorten
from ..errors import KerasPickleError, KerasUnpicklingError
from . import copy as _copy
from . import dialects as _dialects
from . import worker_cache as _worker_cache

_after_restore: list[Callable[[], None]] = []


def after_restore(hook: Callable[[], None]) -> None:
    """Run ``hook()`` after every successful :func:`restore` (once registered; idempotent)."""
    if hook not in _after_restore:
        _after_restore.append(hook)


@schema.published(schema.RESTORE)
def restore(header, body):
    """Rebuild a Keras object from a keras_pickle payload.

    This is the function every keras_pickle pickle calls; its path is part of the format.
    """
    written = header  # as the payload holds it: errors name the format version it was written in
    try:
        header = schema.check_header(header)
        unloadable = _load_by_value.first_unloadable(body)
        if unloadable is not None:  # a class the body carries by value did not unpickle here
            raise _load_failure.unloadable_error(header, unloadable)
        safe_mode = _options.load_options().safe_mode
        body = schema.check_body(header, body, is_custom_object=_custom_object_check(safe_mode))
        header, body = upgrade.to_current(header, body)  # from here on, the current format version's shape
        decoded = _vetting.vet_names(body) if safe_mode else None  # Keras-free: nothing imported before it
        dialect = _dialects.of_header(header)  # tf-keras: imported, or both sides named
        checked = body
        body = dialect.adapt_body(header, body)  # a newer Keras's config keys this one lacks
        # Safe mode: vetted, under Keras's safe mode, touching no path the configs name; the configs
        # decoded above, unless adapt_body rewrote them.
        safely = _vetting.safe_rebuild(body, dialect, decoded if body is checked else None) if safe_mode else None
        with safely or contextlib.nullcontext():
            mapped = _reclaim.has_mapped_weights(body.get("variables") or ())
            if mapped:  # a joblib worker: the previous task's model goes before this one comes
                _reclaim.before_rebuild()
                obj = _worker_cache.rebuilt_or_copied(
                    header,
                    body,
                    rebuild=lambda: _rebuild_decode.object_from_payload(header, body, dialect, safe_mode=safe_mode),
                    copy=lambda kept: _copy.copy_layer(kept, {}),
                )
                _reclaim.rebuilt(obj)
            else:
                obj = _rebuild_decode.object_from_payload(header, body, dialect, safe_mode=safe_mode)
    except KerasPickleError as e:
        _skew.name_sides(e, written)  # from another Keras, backend or format: both sides named
        raise
    except Exception as e:
        root = root_cause(e)
        raise _skew.name_sides(
            KerasUnpicklingError(
                f"Could not rebuild {_class_of(written)} from its payload: {type(root).__name__}: {shorten(str(root))}",
                original_error=e,
            ),
            written,
        ) from e
    for hook in _after_restore:
        hook()
    _options.note_restored()
    return obj


@schema.published(schema.PART_OF)
def part_of(model, path):
    """The optimizer or metric at ``path`` of ``model``, a model restored from the same stream.

    What a built optimizer, or a metric a compiled model holds, pickles as
    when its model is pickled in the same stream (see ``_mixins``): identity
    holds (``restored.optimizer is restored.model_.optimizer``) and the state
    is the model's.
    """
    part = _records.resolve_part(model, path) if isinstance(model, keras.Model) and isinstance(path, str) else None
    if not isinstance(part, (keras.optimizers.Optimizer, keras.metrics.Metric)):
        raise KerasUnpicklingError(
            f"Corrupt keras_pickle payload: it names the optimizer or metric {shorten(repr(path), 80)} of "
            f"a {type(model).__name__}, which holds none there."
        )
    return part


def _custom_object_check(safe_mode: bool) -> Callable[[Any], bool]:
    """What a custom object in the body may be: in safe mode, an inert reference that the
    restricted unpickler made (anything else was not named by a global); else a class or function."""
    if safe_mode:
        return lambda value: isinstance(value, InertReference)
    return lambda value: callable(value) and value is not restore


def _class_of(header: Any) -> str:
    name = header.get("class") if isinstance(header, dict) else None
    return shorten(name, 300) if isinstance(name, str) else "the object"


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception of a chain (Keras wraps errors several times)."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    return error
