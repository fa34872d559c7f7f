"""The load side: from a checked payload back to a Keras object.

``payload`` (the body decoded into a blueprint), ``build`` (config to object: deferred variables,
a linear-time Sequential, the graph from recorded specs, compiling), ``state`` (every saved value
given to the rebuilt object), ``registered`` (names Keras registered), ``vetting`` (safe mode's
policy, :mod:`keras_pickle._safe_mode`, asked of a body before Keras builds anything).
"""
