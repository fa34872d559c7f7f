"""What Keras's own pickle (``pickle.dumps(model)`` without keras_pickle) says about the code it needs.

Keras pickles a model as its ``.keras`` archive in a ``BytesIO``; the archive's ``config.json`` names
every class and function the model is built from. :func:`custom_names` lists those outside Keras, read
from the stream's bytes without unpickling anything, so that ``keras_pickle.convert``'s error can name
the ``custom_objects`` it needs.
"""

from __future__ import annotations

import io
import json
import pickletools
import zipfile
from typing import Any

import keras

from .._wire import configs

_ZIP_MAGIC = b"PK\x03\x04"
_MAX_NAMES = 20


def custom_names(data: bytes) -> list[tuple[str, str, str]]:
    """``(module, name, key)`` of every class or function outside Keras the archive's config names (``key``:
    the name Keras looks it up by in ``custom_objects``), each once, in the config's order; ``[]`` where the
    stream holds no archive that reads."""
    try:
        for _opcode, argument, _ in pickletools.genops(data):
            if isinstance(argument, (bytes, bytearray)) and bytes(argument[:4]) == _ZIP_MAGIC:
                with zipfile.ZipFile(io.BytesIO(argument)) as archive:
                    config = json.loads(archive.read("config.json"))
                found = dict.fromkeys(entry for node in configs.iter_nodes(config) if (entry := _custom(node)))
                return list(found)[:_MAX_NAMES]
    except Exception:  # a stream or archive that does not read: nothing to name
        return []
    return []


def _custom(node: dict) -> tuple[str, str, str] | None:
    """``(module, name, key)`` of the class or function outside Keras that ``node`` names, unless registered."""
    module, class_name = node.get("module"), node.get("class_name")
    if not (isinstance(module, str) and isinstance(class_name, str)) or _is_keras(module):
        return None
    name = node.get("config") if class_name == "function" else class_name
    registered = node.get("registered_name")
    if not (isinstance(name, str) and name.isidentifier()) or _is_registered(registered):
        return None
    # Keras looks a custom object up by its registered name first (scikeras's pickles register every model
    # class as ">Name"): the key the mapping needs.
    return module, name, registered if isinstance(registered, str) and registered else name


def _is_registered(registered_name: Any) -> bool:
    """Whether Keras resolves ``registered_name`` itself (``keras.saving.register_keras_serializable``)."""
    if not isinstance(registered_name, str) or ">" not in registered_name:
        return False
    return keras.saving.get_registered_object(registered_name) is not None


def _is_keras(module: str) -> bool:
    return module in ("keras", "builtins") or module.startswith(("keras.", "keras_hub.", "keras_nlp.", "keras_cv."))


def custom_objects_hint(data: bytes) -> str:
    """How to call ``keras_pickle.convert`` for ``data``, as code to copy: the imports of the classes and functions
    outside Keras its config names, then the call with them as ``custom_objects``; the generic spelling where
    none is found."""
    names = custom_names(data)
    if not names:
        return "keras_pickle.convert(data, custom_objects={'Name': Name})"
    modules: dict[str, list[str]] = {}
    for module, name, _ in names:
        if name not in modules.setdefault(module, []):
            modules[module].append(name)
    imports = "; ".join(f"from {module} import {', '.join(found)}" for module, found in modules.items())
    mapping = ", ".join(f"{key!r}: {name}" for _, name, key in names)
    return f"{imports}; keras_pickle.convert(data, custom_objects={{{mapping}}})"
