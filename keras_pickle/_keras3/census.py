"""One census of a model: its layers and their places, every variable with its key, read once.

Everything that reads a model's structure while pickling it (variable keys, the places of layers
that keep state outside their variables or hold metrics, the layers a config rebuilds for the
dump-time checks, the classes and functions custom objects may be found among) reads it from one
:class:`Census`: one walk of the layers (:func:`keras_pickle._keras3.survey.survey`) and one read of
``model.variables``. A census describes the model as it was when taken; take a new one after
changing the model's structure.
"""

from __future__ import annotations

import functools
from typing import Any

from . import survey as _survey


class Census:
    """What ``root`` is made of (a layer or model), gathered once.

    ``layers``: ``root`` and every layer in it, each once, depth first. ``places``:
    ``id(layer) -> place``. ``variables``: ``root.variables``; ``variable_keys``: their
    process-independent keys (:func:`keras_pickle._keras3.survey.variable_keys`), in the same order.
    """

    def __init__(self, root: Any):
        self.root = root
        if hasattr(root, "_layers"):
            survey = _survey.survey(root)
        else:  # not a layer: a loss, a metric or an optimizer pickled on its own
            survey = _survey.Survey(layers=[root], places={id(root): ""}, listed=frozenset({id(root)}), owned_keys={})
        self._survey = survey
        self.layers: list = survey.layers
        self.places: dict[int, str] = survey.places
        self.variables: list = list(getattr(root, "variables", ()))

    @functools.cached_property
    def variable_keys(self) -> list[str]:
        return _survey.keys_of(self.variables, self._survey.owned_keys)

    @property
    def references(self) -> list[tuple[Any, str]]:
        """``(variable, key)`` of every variable of ``root``, in order."""
        return list(zip(self.variables, self.variable_keys))

    def reread_variables(self) -> None:
        """Read ``root.variables`` again, after their order changed (:mod:`keras_pickle._keras3.order`)."""
        self.variables = list(getattr(self.root, "variables", ()))
        self.__dict__.pop("variable_keys", None)

    def place_of(self, layer: Any) -> str:
        return self.places.get(id(layer), "")

    def listed_layers(self) -> list:
        """The layers a config rebuilds: ``root`` and, recursively, those its Sequential or Functional configs list."""
        return [layer for layer in self.layers if id(layer) in self._survey.listed]


def census_of(obj: Any) -> Census:
    """``obj`` if it is a census already, else a new census of it."""
    return obj if isinstance(obj, Census) else Census(obj)
