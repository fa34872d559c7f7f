"""What keras_pickle knows of tf-keras (Keras 2, the ``tf_keras`` package), imported on first use.

* :mod:`.classes`: tf-keras imported when first needed; the base classes ``install()`` patches.
* :mod:`.walk`: a tf-keras model's layers, variables keyed by position and own name, generators, tables.
* :mod:`.state`: every value of a tf-keras model read as numpy and given back.
* :mod:`.rebuild`: a tf-keras config written, and the object rebuilt from it.
* :mod:`.safe_mode`: what safe mode needs from tf-keras: its registry and how its deserializer resolves names.
* :mod:`.copy_plan`: what a deep copy attribute by attribute adds for tf-keras (the optimizer, rebuilt).
"""
