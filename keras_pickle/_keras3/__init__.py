"""What keras_pickle knows of Keras 3: the one place that reads Keras's internals.

* :mod:`.survey`: the one walk over a model's layers, variable keys, layer places, canonical configs.
* :mod:`.census`: a model's layers, places and variables with their keys, gathered once.
* :mod:`.order`: a rebuilt model's own variable lists put back in the original's order.
* :mod:`.backend`: how each backend stores values: reading and assigning them.
* :mod:`.deferred`: variables created without a value, for the saved one to be their first.
* :mod:`.convert`: what a payload from another backend needs (dtypes, seed states, optimizer classes).
* :mod:`.native_pickle`: what Keras's own pickle names, read without unpickling.
* :mod:`.graph`: a Functional's or Sequential's nodes, wired again without tracing.
* :mod:`.recorded`: what ``install()`` records beside its objects (constructor and ``compile()`` calls),
  replayed on load.
* :mod:`.state`: what a model's state is made of: its optimizer and held metrics.
* :mod:`.layer_state`: state kept outside variables (vocabularies, assets, RNN states), by layer place.
* :mod:`.safe_mode`: what safe mode needs from Keras 3: its registry and how its deserializer resolves names.
* :mod:`.copy_plan`: what a deep copy attribute by attribute adds for Keras 3 (records, tracking).
"""
