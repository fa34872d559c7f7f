"""The dump side: what a Keras object is made of, captured once, and written as a payload.

* :mod:`.encode`: ``snapshot`` (one census, the checked config, every variable) and the header and body
  ``__reduce_ex__`` writes.
* :mod:`.config`: an object's config as it travels: shared objects marked, canonical, JSON.
* :mod:`.gather_state`: every value a model holds, as numpy snapshots keyed from the census.
* :mod:`.array_store`: weights handed to a pickler that stores numpy arrays itself (joblib).
* :mod:`.custom_objects`: the custom classes and functions a config names, and how each travels.
* :mod:`.main_script`: classes and functions of the main script, written by value.
* :mod:`.checks`: what is refused at dump time because it could never load.
"""
