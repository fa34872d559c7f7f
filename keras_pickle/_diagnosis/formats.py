"""What data is when it is no keras_pickle payload: a known format that is never a pickle, or Keras's own pickle.

Read from the data's first bytes only; nothing is unpickled, and nothing here imports Keras.
"""

from __future__ import annotations

SIGNATURES = (
    (b"PK\x03\x04", "a zip archive (a .keras file? load it with keras.saving.load_model)"),
    (b"\x89HDF", "an HDF5 file (an .h5 model? load it with keras.saving.load_model)"),
    (b"\x93NUMPY", "a .npy file"),
    (b"\x1f\x8b", "gzip-compressed data"),
)

HDF5_WEIGHTS = (
    "an HDF5 file that holds no model config: Keras weights (a .weights.h5 file? build the model as it was "
    "built, then model.load_weights(path))"
)
"""What an HDF5 file is whose first bytes name no ``model_config``: every HDF5 model Keras writes records one
in its root attributes, near the start; a weights file (``model.save_weights``) has none."""


def foreign_format(head: bytes) -> str | None:
    """What a file starting with ``head`` (its first 64 KiB, for an HDF5 file's root attributes) is, if it is
    a known format that is never a pickle."""
    for signature, description in SIGNATURES:
        if head.startswith(signature):
            if signature == b"\x89HDF" and b"model_config" not in head:
                return HDF5_WEIGHTS
            return description
    return None


def looks_like_keras_native(head: bytes) -> bool:
    """Whether a pickle starting with ``head`` is Keras's own: Keras's ``__reduce__`` pickles call
    ``Model._unpickle_model``; scikeras's replacement calls ``scikeras._saving_utils.unpack_keras_model``."""
    return b"_unpickle_model" in head or b"unpack_keras_model" in head
