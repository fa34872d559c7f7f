"""Variables created without a value, to be given the saved one: Keras's ``StatelessScope``, used for loads.

Within :func:`deferred_variables`, Keras records each new variable's
initializer without running it (``StatelessScope(initialize_variables=False)``).
The caller then creates each variable directly from its saved value
(``_backend.initialize``), and runs the initializer only of those the payload
holds no value for (:func:`initialize_leftovers`): no variable is written twice,
and no initializer runs for a value that is about to be overwritten. :func:`bounded_allocation` holds
what a safe rebuild allocates to what its payload carries.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
from keras.src.backend.common import global_state
from keras.src.backend.common.variables import Variable as KerasVariable

from ..errors import StateMismatchError
from . import backend as _backend

_deferring = threading.local()
_bound = threading.local()

SLACK_ELEMENTS = 1 << 20
"""Values a safe rebuild may allocate beyond twice what its payload carries (a layer's small scratch
variables: seed states, counters, carried RNN states)."""


@contextlib.contextmanager
def deferred_variables() -> Iterator[list]:
    """Within: new Keras variables are created without a value. The list yielded holds them on exit."""
    created: list = []
    previous = global_state.get_global_attribute("uninitialized_variables")
    global_state.set_global_attribute("uninitialized_variables", [])
    was_deferring = getattr(_deferring, "active", False)
    _deferring.active = True
    try:
        with keras.StatelessScope(initialize_variables=False):
            yield created
        created.extend(global_state.get_global_attribute("uninitialized_variables") or [])
    finally:
        _deferring.active = was_deferring
        global_state.set_global_attribute("uninitialized_variables", previous)


def initialize_leftovers(variables: list) -> None:
    """Run the initializer of each of ``variables`` that has not been given a value (within
    :func:`bounded_allocation`, counted against it first)."""
    allocation = getattr(_bound, "allocation", None)
    for variable in variables:
        if _backend.is_uninitialized(variable):
            if allocation is not None:
                allocation.take(variable.shape, variable.path)
            _backend.initialize_with_initializer(variable)


def build_optimizer(optimizer: Any, variables: list) -> list:
    """``optimizer.build(variables)``, its new variables (slots) deferred where that is known to be safe.

    Deferred when the class's ``build`` is Keras's own: it creates variables
    and reads only the model's (one assigns a slot, which the saved values
    overwrite: a built optimizer's payload holds all of its variables).
    Another class's ``build`` may read what it creates, so it runs as usual.
    Returns the deferred variables.
    """
    if not _builds_only_variables(optimizer):
        optimizer.build(variables)
        return []
    with deferred_variables() as created:
        optimizer.build(variables)
    return created


def _builds_only_variables(optimizer: Any) -> bool:
    build = getattr(type(optimizer), "build", None)
    module = getattr(build, "__module__", "") or ""
    return module.startswith(("keras.src.optimizers.", "keras.src.backend."))


class _Allocation:
    """What one bounded rebuild may still allocate, and the refusal it met (if any)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self.refused: StateMismatchError | None = None

    def take(self, shape: Any, name: Any) -> None:
        try:
            elements = int(np.prod([int(dim) for dim in shape], dtype=np.float64))
        except (TypeError, ValueError):
            return  # a shape Keras itself will refuse
        self.used += elements
        if self.used > self.limit:
            self.refused = StateMismatchError(
                f"The config asks Keras to allocate a variable {name!r} of shape {tuple(shape)}: {self.used:,} "
                f"values with those before it, more than a rebuild may make of a payload that carries "
                f"{(self.limit - SLACK_ELEMENTS) // 2:,} (twice that, plus {SLACK_ELEMENTS:,}). Refused before "
                "allocating it: the config does not describe the object that was pickled."
            )
            raise self.refused


@contextlib.contextmanager
def bounded_allocation(carried_elements: int) -> Iterator[None]:
    """Within, in this thread: the variables Keras allocates (not those :func:`deferred_variables` defers)
    hold at most twice ``carried_elements`` values, plus :data:`SLACK_ELEMENTS`. The variable that would
    exceed it raises :class:`~keras_pickle.errors.StateMismatchError` before it is allocated, and again on
    exit should the code within have caught it: a config cannot make a safe load allocate what its payload
    does not carry (a layer's ``build_config`` claiming a 10^9-wide input, say)."""
    _ensure_bounding_init()
    allocation = _Allocation(2 * carried_elements + SLACK_ELEMENTS)
    previous = getattr(_bound, "allocation", None)
    _bound.allocation = allocation
    try:
        yield
    except BaseException:
        if allocation.refused is not None:
            raise allocation.refused from None
        raise
    finally:
        _bound.allocation = previous
    if allocation.refused is not None:
        raise allocation.refused


def _ensure_bounding_init() -> None:
    """Wrap Keras's ``Variable.__init__`` (whatever it is now: Keras's own or ``install()``'s hook) with the
    check :func:`bounded_allocation` needs, unless it is wrapped already. Independent of ``install()``: a
    process that never installed, or uninstalled, is bounded all the same."""
    current = KerasVariable.__dict__["__init__"]
    if getattr(current, "__keras_pickle_bound__", None) is not None:
        return

    def __init__(self, initializer, *args, **kwargs):
        allocation = getattr(_bound, "allocation", None)
        if allocation is not None:
            concrete = not callable(initializer) and not isinstance(initializer, str)
            if concrete or not getattr(_deferring, "active", False):  # a deferred variable allocates nothing
                shape = np.shape(initializer) if concrete else kwargs.get("shape", args[0] if args else None)
                allocation.take(() if shape is None else shape, kwargs.get("name"))
        return current(self, initializer, *args, **kwargs)

    __init__.__keras_pickle_bound__ = current
    KerasVariable.__init__ = __init__


def unbound(function: Any) -> Any:
    """``function`` without :func:`bounded_allocation`'s wrapper, if it has one."""
    return getattr(function, "__keras_pickle_bound__", None) or function


def variable_init_hook(original: Callable[..., None]) -> Callable[..., None]:
    """``Variable.__init__`` for ``install()``: within :func:`deferred_variables`, a variable made from a
    concrete value rather than an initializer is created at once, outside the stateless scope.

    Keras refuses such a variable in a ``StatelessScope``: a stateful RNN makes
    its carried states from zeros in ``build()``, a KerasHub task compiles its
    default optimizer (whose iteration counter is a value) in its constructor.
    Those are small, and the payload's values overwrite them; without this the
    whole model would be built a second time, the ordinary way. Elsewhere, and
    in other threads, Keras's own ``__init__`` runs unchanged.
    """

    def __init__(self, initializer, *args, **kwargs):
        if getattr(_deferring, "active", False) and not callable(initializer) and not isinstance(initializer, str):
            scope = global_state.get_global_attribute("stateless_scope")
            global_state.set_global_attribute("stateless_scope", None)
            try:
                return original(self, initializer, *args, **kwargs)
            finally:
                global_state.set_global_attribute("stateless_scope", scope)
        return original(self, initializer, *args, **kwargs)

    __init__.__keras_pickle__ = True
    return __init__
