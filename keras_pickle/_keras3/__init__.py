"""What keras_pickle knows of Keras 3: the one place that reads Keras's internals.

How a Keras 3 model is walked and named (``names``, ``census``: one walk per dumps and per loads),
how its variables hold values on each backend (``backend``, ``deferred``, ``convert``), how its
graph is recorded and rebuilt (``graph``), what ``install()`` records beside its objects
(``records``, ``construct``, ``compile``), what its state is made of (``state``,
``layer_state``), and what safe mode needs to know of it (``safe_mode``: its registry, how its
deserializer resolves a config's names). The dump side (:mod:`keras_pickle._capture`) and the load side
(:mod:`keras_pickle._rebuild`) ask these modules; a second Keras dialect (tf-keras) is a sibling
package answering the same questions.
"""
