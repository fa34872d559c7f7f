"""The load side: from a checked payload back to a Keras object.

* :mod:`.decode`: a checked body back into a blueprint, and the object rebuilt from it.
* :mod:`.from_blueprint`: a Keras 3 object from a blueprint: deferred variables, the graph, compiling.
* :mod:`.assign_state`: every saved value given to the rebuilt object, matched by key, checked.
* :mod:`.vetting`: safe mode asked of a body before Keras builds anything.
* :mod:`.registered`: what a class or function registered with Keras loads as.
* :mod:`.load_by_value`: a class or function the payload carries by value, or the loading script's own.
* :mod:`.skew`: a payload from another Keras version: keys dropped as defaults, or refused.
* :mod:`.reclaim`: a joblib worker's previous model collected before the next is rebuilt.
"""
