"""Safe mode's guard on the file system: while a payload is rebuilt, nothing touches a path it names.

The config rules (:data:`~keras_pickle._safe_mode.rules.FILE_FIELDS`, ``FILE_READING_LAYERS``) refuse the
fields Keras, tf-keras and KerasHub are known to open. A layer of someone else's, registered in the
loading process and so allowed, may open any field under any name, at any depth. This guard closes that
class for what Python itself audits (:pep:`578`): while :func:`never_touching` is active in this thread,
an audited file, directory, process or network event whose argument is a string the payload's configs
hold, or a path that resolves to such a string or lies under a directory it names, raises
:class:`~keras_pickle.errors.UnsafePayloadError` before the event happens; the refusal stands even if the
layer's code catches it.

Not guarded, and why: the import system and ``linecache`` (the payload cannot name a module safe mode
would import, and a warning's source line is not the payload's doing); ``tempfile`` (it makes fresh files
only); keras_pickle's own asset directories (:data:`ASSET_DIRECTORY_PREFIX`, the payload's assets written
there by the rebuild); a named string that resolves to the root or to the working directory or one of
its parents (``"."`` or ``"/"`` is a plain value far more often than a path); other threads; and what C++
reads without Python (TensorFlow's file system, SentencePiece), which only the config rules refuse.
"""

from __future__ import annotations

import contextlib
import contextvars
import linecache
import os
import sys
import tempfile
import tokenize
from collections.abc import Iterable, Iterator
from typing import Any

from .._wire.reprs import shorten
from ..errors import UnsafePayloadError

ASSET_DIRECTORY_PREFIX = "keras_pickle_assets_"
"""The name every temporary directory the rebuild writes a layer's assets to starts with."""

GUARDED_EVENTS = ("open", "os.", "shutil.", "glob.", "urllib.", "socket.", "subprocess.", "sqlite3.", "ctypes.dlopen")
"""Audit events (by prefix) whose arguments are checked: what reads, writes, lists, runs or reaches."""

FIRST_ARGUMENT_ONLY = ("open", "glob.", "urllib.", "sqlite3.", "ctypes.dlopen")
"""Events whose later arguments are not paths (a mode, a method) and are not checked."""

UNGUARDED_EVENTS = frozenset({"os.putenv", "os.unsetenv", "os.kill", "os.killpg"})
"""Events of a guarded family that name no path."""

_LONGEST_PATH = 4096


class _Guard:
    """The strings one payload names, indexed, and the refusal it met (if any).

    An event's check costs set lookups, bounded by its path's depth, whatever the number of strings: the
    strings and their absolute paths are sets, and "under a named directory" looks each directory the
    event's path lies under up in the set of named ones (:func:`_parents`) rather than scanning them."""

    def __init__(self, strings: frozenset[str]):
        self.strings = strings
        self.refused: UnsafePayloadError | None = None
        self._paths: tuple[frozenset[str], frozenset[str]] | None = None

    def paths(self) -> tuple[frozenset[str], frozenset[str]]:
        """The named strings as absolute paths, and those that may stand for a directory (computed once, in
        time linear in the strings)."""
        if self._paths is None:
            cwd = os.getcwd()
            absolute = frozenset(_absolute(text, cwd) for text in self.strings)
            directories = absolute.difference(_parents(cwd), (os.sep, cwd))
            self._paths = absolute, directories
        return self._paths

    def touches(self, argument: str) -> bool:
        if argument in self.strings:
            return True
        absolute, directories = self.paths()
        for path in {_absolute(argument), os.path.realpath(argument)}:
            if path in absolute or not directories.isdisjoint(_parents(path)):
                return not _is_own_asset(path)
        return False


def _parents(path: str) -> Iterator[str]:
    """Every ``directory`` with ``path.startswith(directory + os.sep)``: the prefixes of ``path`` that end
    before a separator, one per level."""
    end = path.find(os.sep)
    while end != -1:
        yield path[:end]
        end = path.find(os.sep, end + 1)


_ACTIVE: contextvars.ContextVar[_Guard | None] = contextvars.ContextVar("keras_pickle_file_guard", default=None)
_hook_added = False


def named_strings(configs: Iterable[Any]) -> frozenset[str]:
    """Every string (value or key) at any depth of ``configs`` that could name a path."""
    found: set[str] = set()
    stack = list(configs)
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if node and len(node) <= _LONGEST_PATH and "\0" not in node:
                found.add(node)
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return frozenset(found)


@contextlib.contextmanager
def never_touching(configs: Iterable[Any]) -> Iterator[None]:
    """Within, in this thread: no audited event touches a path ``configs`` name (module docstring).

    Raises :class:`~keras_pickle.errors.UnsafePayloadError` at the event, and again on leaving when the
    code within swallowed it (the first refusal wins over whatever else was raised)."""
    _add_hook()
    guard = _Guard(named_strings(configs))
    token = _ACTIVE.set(guard)
    try:
        yield
    except BaseException:
        if guard.refused is not None:
            raise guard.refused from None
        raise
    finally:
        _ACTIVE.reset(token)
    if guard.refused is not None:
        raise guard.refused


def _add_hook() -> None:
    """Add the audit hook once per process (hooks cannot be removed; it does nothing outside a guard)."""
    global _hook_added
    if not _hook_added:
        sys.addaudithook(_audit)
        _hook_added = True


def _audit(event: str, args: tuple) -> None:
    guard = _ACTIVE.get()
    if guard is None or not event.startswith(GUARDED_EVENTS) or event in UNGUARDED_EVENTS:
        return
    for argument in _strings_in(args[:1] if event.startswith(FIRST_ARGUMENT_ONLY) else args):
        if guard.touches(argument):
            if _from_trusted_caller():
                return
            what = f"{event} {shorten(argument, 300)!r}"
            error = UnsafePayloadError(
                f"Safe mode refused the payload: rebuilding it made {what}, a path or name its config holds "
                "(a layer that reads, writes or reaches what a payload names). Load it with safe_mode=False "
                "only if you trust where it came from.",
                what=what,
            )
            if guard.refused is None:
                guard.refused = error
            raise error


def _strings_in(args: tuple) -> Iterator[str]:
    for argument in args:
        for value in argument if isinstance(argument, tuple) else (argument,):
            if isinstance(value, (str, bytes, os.PathLike)):
                try:
                    text = os.fsdecode(value)
                except (TypeError, ValueError):
                    continue
                if text and len(text) <= _LONGEST_PATH and "\0" not in text:
                    yield text


def _from_trusted_caller() -> bool:
    """Whether the event comes from the import system, ``linecache`` (through ``tokenize``) or ``tempfile``."""
    frame = sys._getframe(2)  # 0: this function, 1: _audit, 2: the code that made the event
    filename = frame.f_code.co_filename
    if filename == tokenize.__file__ and frame.f_back is not None:
        filename = frame.f_back.f_code.co_filename  # tokenize.open: trusted when linecache calls it
        return filename == linecache.__file__
    return filename.startswith(("<frozen importlib", "<frozen zipimport")) or filename == tempfile.__file__


def _absolute(text: str, cwd: str | None = None) -> str:
    """``text`` as an absolute path; given ``cwd`` (the working directory), ``abspath`` need not ask for it."""
    text = os.path.expanduser(text)
    return os.path.abspath(text if cwd is None else os.path.join(cwd, text))


def _is_own_asset(path: str) -> bool:
    """Whether ``path`` lies in one of keras_pickle's asset directories (the system's temporary directory)."""
    for temporary in {tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir())}:
        if path.startswith(os.path.join(temporary, ASSET_DIRECTORY_PREFIX)):
            return True
    return False
