"""What keras_pickle knows of tf-keras (Keras 2, the ``tf_keras`` package): the sibling of
:mod:`keras_pickle._keras3`.

How a tf-keras model is walked and its variables keyed (``walk``), how its state is read and
given back, optimizer slots and random-generator state included (``state``), how its config is
written and rebuilt (``build``), what safe mode needs to know of it (``safe_mode``: its registry, how its
deserializer resolves a config's names), and which of its classes
``install()`` gives the pickle protocol (``classes``). tf-keras is imported on first use
(:func:`keras_pickle._tfkeras.classes.tf_keras`), never by ``import keras_pickle``.
"""
