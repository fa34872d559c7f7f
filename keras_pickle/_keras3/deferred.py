"""Variables created without a value, to be given the saved one: Keras's ``StatelessScope``, used for loads.

Within :func:`deferred_variables`, Keras records each new variable's
initializer without running it (``StatelessScope(initialize_variables=False)``).
The caller then creates each variable directly from its saved value
(``_backend.initialize``), and runs the initializer only of those the payload
holds no value for (:func:`initialize_leftovers`): no variable is written twice,
and no initializer runs for a value that is about to be overwritten.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import keras
from keras.src.backend.common import global_state

from . import backend as _backend

_deferring = threading.local()


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
    """Run the initializer of each of ``variables`` that has not been given a value."""
    for variable in variables:
        if _backend.is_uninitialized(variable):
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
