"""keras_pickle's public surface is declared: ``__all__`` lists exactly the public names, and each resolves."""

from __future__ import annotations

import types

import keras_pickle


def test_all_lists_every_public_name_and_each_resolves():
    public = {
        name
        for name in dir(keras_pickle)
        if not name.startswith("_") and not isinstance(getattr(keras_pickle, name), types.ModuleType)
    }
    public.discard("annotations")  # `from __future__ import annotations` binds the name in every module
    assert set(keras_pickle.__all__) - {"limits", "__version__"} == public
    assert len(keras_pickle.__all__) == len(set(keras_pickle.__all__))
    for name in keras_pickle.__all__:
        assert getattr(keras_pickle, name) is not None, name
