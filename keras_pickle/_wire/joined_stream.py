"""An in-memory pickle stream that copies each immutable weight byte exactly once."""

from __future__ import annotations

import io
from typing import Any

# Smaller writes are copied at once: joining many small parts costs more than copying them.
_KEPT_UNCOPIED = 1 << 16


class JoinedStream:
    """A write-only binary file for ``pickle.Pickler`` whose :meth:`getvalue` is the whole stream.

    ``io.BytesIO`` copies every write into a buffer that grows by reallocation. Here a large
    write whose memory cannot change is kept as it is: a ``bytes`` object, or a read-only buffer
    (an in-band ``PickleBuffer`` of a TensorFlow read or a JAX array, immutable snapshots). Every
    other write is copied when it is written, as ``io.BytesIO`` would, since its memory may change
    later in the same dump (a PyTorch variable is a writable view of the live tensor).
    :meth:`getvalue` joins the parts once, into one ``bytes`` of the exact size: each kept byte is
    copied once. A read-only view of memory that something else writes to must not change until
    :meth:`getvalue` returns; ``keras_pickle.dumps`` calls it before it returns.
    """

    def __init__(self) -> None:
        self._parts: list[Any] = []
        self._copied = io.BytesIO()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if view.nbytes >= _KEPT_UNCOPIED and (type(data) is bytes or view.readonly):
            self._close_copied_part()
            self._parts.append(data if type(data) is bytes else view)
        else:
            self._copied.write(view)
        return view.nbytes

    def _close_copied_part(self) -> None:
        if self._copied.tell():
            self._parts.append(self._copied.getvalue())
            self._copied = io.BytesIO()

    def getvalue(self) -> bytes:
        self._close_copied_part()
        if len(self._parts) == 1 and type(self._parts[0]) is bytes:
            return self._parts[0]
        joined = b"".join(self._parts)
        self._parts = [joined]
        return joined
