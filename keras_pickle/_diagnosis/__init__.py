"""Diagnosis: why a payload failed to load, or what damaged it, told from the errors' fields and the bytes read.

* :mod:`.mismatch`: a payload's content against its checksum; the error every damage report raises.
* :mod:`.damage`: a damaged stream, told from data that is no payload by its first bytes.
* :mod:`.written_globals`: the globals keras_pickle writes, and what one damaged byte makes of them.
* :mod:`.stream_root`: whether the value a stream returned is the one it built; the global it asked for.
* :mod:`.formats`: what data is when it is no payload: a format that is never a pickle, Keras's own pickle.
* :mod:`.sides`: the Keras, backend and format version that wrote a payload, beside this process's.
* :mod:`.load_failure`: an unpickling failure inside a payload: which payload, which class shipped by value.
* :mod:`.diagnose`: the one error a failed load raises, chosen from the caught error and what was read.

The first five import no Keras: the format's checks (:mod:`keras_pickle._wire.schema`), the reader
(:mod:`keras_pickle._reader.prescan`) and ``inspect`` use them. Loading (:mod:`keras_pickle._api`) reads a
stream, else raises what :func:`.diagnose.diagnose` returns. Nothing is imported here.
"""
