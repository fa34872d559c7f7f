"""Diagnosis: why a payload failed to load, or what damaged it, told from the errors' fields and the bytes read.

* :mod:`.mismatch`: a payload's content against its checksum; the error every damage report raises.
* :mod:`.damage`: a damaged stream, told from data that is no payload by its first bytes.
* :mod:`.written_globals`: the globals keras_pickle writes, and what one damaged byte makes of them.

None of them imports Keras: the format's checks (:mod:`keras_pickle._wire.schema`), loading and
``inspect`` use them. Nothing is imported here.
"""
