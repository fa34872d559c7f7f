"""Run a hook right after a watched module is imported.

Why an import hook: scikeras assigns its own ``keras.Model.__deepcopy__`` when
it is imported. ``copy.deepcopy`` looks that attribute up before anything of
keras_pickle's could run, so no check inside keras_pickle's reducers can win
it back; only re-applying the hooks after scikeras's ``__init__`` has run can.
A finder at the front of ``sys.meta_path`` lets the real finders locate the
module, wraps its loader so that ``exec_module`` is followed by the hook, and
puts the real loader back on the module afterwards. Modules imported before
``install()`` are handled by ``install()`` itself (:func:`activate`).
"""

from __future__ import annotations

import importlib.abc
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import _dask, _scikeras

Hook = Callable[[ModuleType], None]

# module name -> (run after it is imported, run by activate() if it is already imported, undo)
_HOOKS: dict[str, tuple[Hook, Hook | None, Hook | None]] = {
    # Filled in by activate(): install() itself wins back hooks replaced before it ran.
    "scikeras": (lambda module: None, None, None),
    "tf_keras": (lambda module: None, None, None),
    "scikeras.wrappers": (_scikeras.patch_wrappers, _scikeras.patch_wrappers, _scikeras.unpatch_wrappers),
    "dask": (_dask.register_tokenize, _dask.register_tokenize, _dask.unregister_tokenize),
    "distributed.protocol": (_dask.register_serializer, _dask.register_serializer, _dask.unregister_serializer),
}


class _ChainedLoader(importlib.abc.Loader):
    """The module's own loader, followed by the hook."""

    def __init__(self, loader: Any, hook: Callable[[ModuleType], None]):
        self._loader = loader
        self._hook = hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        _run(self._hook, module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and not isinstance(spec.loader, _ChainedLoader):
            spec.loader = _ChainedLoader(spec.loader, _HOOKS[fullname][0])
        return spec


_finder = _PostImportFinder()


def _run(hook: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        hook(module)
    except Exception as e:  # An integration must never break the user's import.
        warnings.warn(
            f"keras_pickle could not apply its {module.__name__} integration ({type(e).__name__}: {e}).",
            RuntimeWarning,
            stacklevel=2,
        )


def activate(reapply_hooks: Callable[[], None]) -> None:
    """Watch the modules that need a hook; hook the ones already imported.

    ``reapply_hooks`` puts keras_pickle's protocol methods back on Keras's
    classes; it runs right after scikeras is imported (which replaces them).
    """
    _HOOKS["scikeras"] = (lambda module: reapply_hooks(), None, None)
    # tf-keras imported after install(): its classes receive the protocol too.
    _HOOKS["tf_keras"] = (lambda module: reapply_hooks(), None, None)
    if not any(finder is _finder for finder in sys.meta_path):
        sys.meta_path.insert(0, _finder)
    for name, (_after_import, on_activate, _undo) in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None and on_activate is not None:
            _run(on_activate, module)


def deactivate() -> None:
    """Stop watching and undo what the hooks changed on imported modules."""
    while any(finder is _finder for finder in sys.meta_path):
        sys.meta_path[:] = [finder for finder in sys.meta_path if finder is not _finder]
    for name, (_after_import, _on_activate, undo) in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None and undo is not None:
            undo(module)
