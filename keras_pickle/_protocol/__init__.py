"""The pickle protocol on Keras objects: the mixins' ``__reduce_ex__`` and ``__deepcopy__``, the
reconstructor every payload calls, in-process copies, ``install(allow=...)``, and ``install()``."""
