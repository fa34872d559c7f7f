"""The dump side: what a Keras object is made of, captured once, and written as a payload.

``payload`` (``snapshot``: one census of the model, its checked config, every variable; the
header and body ``__reduce_ex__`` writes), ``config`` (the config as it travels), ``state``
(every value, as numpy snapshots), ``custom_objects`` (what the config names, and how each
travels), ``checks`` (what is refused at dump time because it could never load).
"""
