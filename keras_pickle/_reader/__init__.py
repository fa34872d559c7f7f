"""Reading pickle streams that may be hostile, before and instead of ``pickle.loads``. No Keras import.

* :mod:`.prescan`: a walk over the opcodes that refuses length fields and
  memo indices a CPython unpickler would allocate for before reading data;
  and the file signatures of formats that are never a pickle.
* :mod:`.unpickler`: the restricted unpickler behind ``keras_pickle.loads(...,
  safe_mode=True)``.

Safe mode and the inspector do not share one opcode interpreter: safe mode
must build exactly the objects ``pickle.loads`` would (it is CPython's own
pure-Python unpickler with hooks on a few opcodes), the inspector must build
none (``keras_pickle._inspect`` evaluates opcodes on inert values). What they
share is the prescan here, and the policy: what a payload may name is
:mod:`keras_pickle._safe_mode`'s to decide, and both ask it.
"""
