"""Reading pickle streams that may be hostile, before and instead of ``pickle.loads``. No Keras import.

* :mod:`.prescan`: refuse length fields and memo indices before an unpickler allocates for them.
* :mod:`.unpickler`: the restricted unpickler behind ``keras_pickle.loads``.
"""
