"""keras_pickle's version, readable without importing anything else (the build reads it statically)."""

__version__ = "0.3.0"
