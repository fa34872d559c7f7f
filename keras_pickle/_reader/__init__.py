"""Reading pickle streams that may be hostile, before and instead of ``pickle.loads``. No Keras import.

* :mod:`.allowlist`: the globals a keras_pickle payload may name, shared by
  safe mode and the inspector (which reports what safe mode would refuse).
* :mod:`.prescan`: a walk over the opcodes that refuses length fields and
  memo indices a CPython unpickler would allocate for before reading data;
  and the file signatures of formats that are never a pickle.
* :mod:`.safe`: the restricted unpickler behind ``keras_pickle.loads(...,
  safe_mode=True)``.

Safe mode and the inspector do not share one opcode interpreter: safe mode
must build exactly the objects ``pickle.loads`` would (it is CPython's own
pure-Python unpickler with hooks on a few opcodes), the inspector must build
none (``keras_pickle._inspect`` evaluates opcodes on inert values). What they
do share is the policy, which lives here.
"""
