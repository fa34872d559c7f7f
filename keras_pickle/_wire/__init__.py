"""The keras_pickle wire format: what a payload is, written and read without Keras or a backend.

The specification is ``docs/format.md`` (with ``docs/format.schema.json``). A pickled Keras object is
the call ``keras_pickle._format.restore(header, body)``; the limits are in :mod:`keras_pickle.limits`.

* :mod:`.schema`: the format's name and versions, kinds, the reconstructors' paths, header and body checks.
* :mod:`.layout`: a layer body's fields in written order and where its arrays sit, as one table.
* :mod:`.body_sections`: the structure of the sections that hold no arrays (recorded calls, custom objects).
* :mod:`.arrays`: one array entry, ``(path, dtype, shape, data)``, encoded, validated and decoded.
* :mod:`.checksum`: the xxh3 checksum of header, body and custom-object names.
* :mod:`.upgrade`: a payload of an older format version brought to the current shape, once.
* :mod:`.dialect_traits`: each Keras dialect a payload may hold, as its readers ask about it (package, names).
* :mod:`.config_walk`: the one walk over a decoded Keras config and the names its nodes spell.
* :mod:`.refs`: the inert references safe mode hands the stream instead of a class or function.
* :mod:`.reprs`: bounded reprs of untrusted values.
* :mod:`.bounds`: the size and depth of the stream values keras_pickle walks.
* :mod:`.joined_stream`: the in-memory stream ``keras_pickle.dumps`` writes to, joined once.
"""
