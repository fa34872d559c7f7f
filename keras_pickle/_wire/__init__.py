"""The keras_pickle wire format. Imports neither Keras nor a backend.

The specification is ``docs/format.md`` (with ``docs/format.schema.json``): every field of every
format version, the reconstructors, the array encoding, the checksum and the limits. keras_pickle
writes format version :data:`.schema.FORMAT_VERSION` (4) and reads versions 1 to 4: a payload is
checked and its checksum verified as written, then one of an older version is brought to the
current shape (:mod:`.upgrade`), which is what follows.

A pickled Keras object is the call ``keras_pickle._format.restore(header, body)``:

``header`` (a dict of plain values, read first)
    ``format`` ("keras_pickle"), ``format_version``, ``dialect`` ("keras3" or
    "tf_keras", since version 4), ``keras_version`` (that dialect's version),
    ``backend``, ``class`` (dotted path of the pickled object's class),
    ``kind`` ("layer"; "loss", "metric" or "optimizer" for a config-only
    payload), ``n_variables``, ``weight_bytes`` and ``checksum`` (``None``, or
    ``"xxh3_64+header:<hex>"`` over the other header fields, the body and the
    custom objects' names; ``"xxh3_64:<hex>"``, over the body only, in format
    version 1).

``body`` (a dict; a config-only payload's holds ``config`` and ``custom_objects`` only)
    ``config``: the object's Keras config as a JSON string (including its
    build and compile configs, object-sharing ids numbered 1, 2, 3... in
    order of appearance); ``variables`` and ``optimizer_variables``: lists of
    ``(path, dtype, shape, data)`` in the order of ``obj.variables`` /
    ``obj.optimizer.variables``, loaded by position; ``path`` is a key for
    errors and inspection, never interpreted on load (a name that does
    not depend on the writing process, ``block/dense/kernel``,
    ``dropout/seed_generator_state``, ``block/dense/kernel/momentum``; older
    payloads hold Keras's variable path); ``dtype_policy``: the object's own
    dtype policy as JSON, Keras's global policy while it is rebuilt (``""``:
    none recorded; absent in format version 1); ``optimizer_built``: whether the optimizer had
    created its slots; ``layer_states``: state that layers keep outside Keras
    variables (lookup tables, vocabularies), as ``(place, [(key, dtype,
    shape, data)], [(asset_path, bytes)])``, ``place`` the layer's place in the
    model, or a positional place ``#<n>/`` naming its index in
    ``_flatten_layers()`` (what an int index of format versions 1 and 2
    becomes); ``custom_objects``: the custom classes and functions the config
    names, keyed by the names Keras looks up; ``metric_variables`` (the
    compiled metrics' variables), ``held_optimizers`` (optimizers a model holds
    besides ``model.optimizer``: path, config, built, targets, variables),
    ``constructed``, ``compile_call`` and ``compile_objects`` (recorded
    constructor and ``compile()`` arguments; these five since version 3).

``data`` is the raw bytes of a C-contiguous array: a ``PickleBuffer`` under
protocol 5, so that ``buffer_callback`` receives every weight out of band,
and ``bytes`` under protocols 0-4; a uint8 numpy array only for a pickler that
stores numpy arrays its own way (joblib). No zip, no HDF5.

One module per concern: :mod:`.schema` (names, versions, header and body
validation), :mod:`.upgrade` (older format versions to the current shape, the one
module that converts them), :mod:`.arrays` (array codecs), :mod:`.checksum`, :mod:`.configs`
(reading a decoded Keras config), :mod:`.refs` (inert references),
:mod:`.reprs` (bounded reprs of untrusted values). The limits are in
:mod:`keras_pickle.limits`.
"""
