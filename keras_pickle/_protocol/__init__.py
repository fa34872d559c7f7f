"""The pickle protocol on Keras objects.

* :mod:`.mixins`: ``__reduce_ex__``, ``__reduce__``, ``__deepcopy__``, ``__copy__`` and the refusals.
* :mod:`.dialects`: the two ``Dialect`` values, wired, and the choice of one per object or header.
* :mod:`.reconstruct`: ``restore(header, body)``, the reconstructor every payload calls.
* :mod:`.copy`: in-process copies rebuilt from the config, without serialization.
* :mod:`.attribute_copy`: the copy ``deepcopy`` makes of an object without hooks, kept independent.
* :mod:`.opt_in`: ``install(allow=...)``: metrics, callbacks and unbuilt optimizers with their state.
* :mod:`.install`: ``install()``, ``uninstall()``, ``is_installed()``, install on first load.
* :mod:`.written_models`: which models the pickling operation in progress has written.
* :mod:`.worker_cache`: a joblib worker's repeated task rebuilt from the model it already holds.
"""
