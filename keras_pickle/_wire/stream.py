"""An in-memory pickle stream that copies each weight byte exactly once."""

from __future__ import annotations

from typing import Any

# Writes below this size are copied when written: a pickler may reuse a small buffer.
_KEPT_UNCOPIED = 1 << 16


class JoinedStream:
    """A write-only binary file for ``pickle.Pickler`` whose :meth:`getvalue` is the whole stream.

    ``io.BytesIO`` grows by reallocation and copies the stream again in ``getvalue`` when it is
    over-allocated: a stream of large in-band arrays is copied more than once. Here the pickler's
    frames (``bytes``, immutable) and its large writes (in-band ``PickleBuffer`` views of the
    arrays) are kept as they are, and :meth:`getvalue` joins them into one ``bytes`` of the exact
    size: every byte is copied once. The arrays written must not change until :meth:`getvalue`
    returns; ``keras_pickle.dumps`` calls it before it returns.
    """

    def __init__(self) -> None:
        self._parts: list[Any] = []

    def write(self, data: Any) -> int:
        if type(data) is bytes:
            self._parts.append(data)
            return len(data)
        view = memoryview(data).cast("B")
        self._parts.append(view if view.nbytes >= _KEPT_UNCOPIED else view.tobytes())
        return view.nbytes

    def getvalue(self) -> bytes:
        joined = b"".join(self._parts)
        self._parts = [joined]
        return joined
