"""``keras_pickle.inspect``: describe a payload without unpickling it. Imports neither Keras nor a backend.

* :mod:`.inspection`: ``inspect()`` and ``inspect_all()``: open the input, evaluate it, describe its payloads.
* :mod:`.opening`: the input opened as a stream, decompressed as it is read.
* :mod:`.opcodes`: a pickle's opcodes read one at a time, bounded.
* :mod:`.machine`: ``evaluate()``: the opcodes run through the opcode table on inert values.
* :mod:`.machine_state`: the stack machine's state and the ``Stream`` record it fills.
* :mod:`.opcode_handlers`: ``DISPATCH``: what each pickle opcode does to the inert machine.
* :mod:`.values`: the inert values (globals, calls, out-of-band buffers) and their bounded descriptions.
* :mod:`.describe`: a payload's header and body described, its problems collected.
* :mod:`.object_names`: the names a payload's custom objects and constructed classes resolve to.
* :mod:`.verdict`: safe mode's verdict on a payload, judged statically.
* :mod:`.payload_info`: ``PayloadInfo``, the report.
"""

from .inspection import inspect as inspect
from .inspection import inspect_all as inspect_all
from .payload_info import PayloadInfo as PayloadInfo
