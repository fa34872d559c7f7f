"""An in-memory pickle stream that copies each weight byte exactly once, and the pickler that writes to it."""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from typing import Any

# Smaller writes are copied at once: joining many small parts costs more than copying them.
_KEPT_UNCOPIED = 1 << 16


class JoinedStream:
    """A write-only binary file for ``pickle.Pickler`` whose :meth:`getvalue` is the whole stream.

    ``io.BytesIO`` copies every write into a buffer that grows by reallocation. Here a large write is
    kept as it is until :meth:`getvalue` joins the parts once, into one ``bytes`` of the exact size, so
    each kept byte is copied once:

    * a ``bytes`` object, or a read-only buffer (an in-band ``PickleBuffer`` of a TensorFlow read or a
      JAX array, immutable snapshots), whose memory nothing changes;
    * a writable buffer (a PyTorch variable, read as a view of the live tensor), whose memory code run
      later in the same dump could change, only while the pickler is :meth:`pickler`'s: it calls
      :meth:`settle`, which copies each such part, before it saves any object whose saving may run
      code. A plain ``pickle.Pickler`` gets every writable buffer copied when it is written, as
      ``io.BytesIO`` would.

    A kept part must not change until :meth:`getvalue` returns; ``keras_pickle.dumps`` calls it before
    it returns.
    """

    def __init__(self) -> None:
        self._parts: list[Any] = []
        self._copied = io.BytesIO()
        self._unsettled: list[int] = []  # indices into _parts of writable buffers kept as they are
        self._keeps_writable = False

    def pickler(self, protocol: int, buffer_callback: Callable[[pickle.PickleBuffer], Any] | None) -> pickle.Pickler:
        """A ``pickle.Pickler`` writing to this stream that settles it before it saves an object whose saving may run
        code: for an object whose reducer is keras_pickle's own only (see :class:`_SettlingPickler`)."""
        self._keeps_writable = True
        return _SettlingPickler(self, protocol, buffer_callback)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        immutable = type(data) is bytes or view.readonly
        if view.nbytes >= _KEPT_UNCOPIED and (immutable or self._keeps_writable):
            self._close_copied_part()
            if not immutable:
                self._unsettled.append(len(self._parts))
            self._parts.append(data if type(data) is bytes else view)
        else:
            self._copied.write(view)
        return view.nbytes

    def settle(self) -> None:
        """Copy every kept writable part now: code about to run may change its memory."""
        for index in self._unsettled:
            self._parts[index] = bytes(self._parts[index])
        self._unsettled.clear()

    def _close_copied_part(self) -> None:
        if self._copied.tell():
            self._parts.append(self._copied.getvalue())
            self._copied = io.BytesIO()

    def getvalue(self) -> bytes:
        self._close_copied_part()
        self._unsettled.clear()
        if len(self._parts) == 1 and type(self._parts[0]) is bytes:
            return self._parts[0]
        joined = b"".join(self._parts)
        self._parts = [joined]
        return joined


class _SettlingPickler(pickle.Pickler):
    """A pickler that settles its :class:`JoinedStream` whenever ``reducer_override`` is called.

    ``pickle`` calls it before it saves any object but ``None``, booleans, ``int``, ``float``, ``str``,
    ``bytes`` and the exact built-in containers (``tuple``, ``list``, ``dict``, ``set``, ``frozenset``,
    ``bytearray``) and ``PickleBuffer``: it is the last moment before the object's own code may run (its
    reducer, or for a class or function saved by reference a metaclass's attribute lookup or an import
    hook). Code that runs between two items a reducer hands over as a lazy iterator is not preceded by
    such a call: the caller uses this pickler only for an object whose reducer is keras_pickle's own
    (``keras_pickle.dumps(model)``), whose body hands over no iterator.
    """

    def __init__(self, stream: JoinedStream, protocol: int, buffer_callback: Callable | None) -> None:
        super().__init__(stream, protocol, buffer_callback=buffer_callback)
        self._stream = stream

    def reducer_override(self, obj: Any) -> Any:
        if self._stream._unsettled:
            self._stream.settle()
        return NotImplemented
