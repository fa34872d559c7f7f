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

from .._wire import config_walk
from .._wire.reprs import first_sentence

_ZIP_MAGIC = b"PK\x03\x04"
_MAX_NAMES = 20


def custom_names(data: bytes) -> list[tuple[str | None, str, str]]:
    """``(module, name, key)`` of every class or function outside Keras the archive's config names (``key``:
    the name Keras looks it up by in ``custom_objects``; ``module`` ``None`` for a class of the script or
    notebook that pickled the model, which Keras records without one), each once, in the config's order;
    ``[]`` where the stream holds no archive that reads."""
    try:
        for _opcode, argument, _ in pickletools.genops(data):
            if isinstance(argument, (bytes, bytearray)) and bytes(argument[:4]) == _ZIP_MAGIC:
                with zipfile.ZipFile(io.BytesIO(argument)) as archive:
                    config = json.loads(archive.read("config.json"))
                found = dict.fromkeys(entry for node in config_walk.iter_nodes(config) if (entry := _custom(node)))
                return list(found)[:_MAX_NAMES]
    except Exception:  # a stream or archive that does not read: nothing to name
        return []
    return []


def script_globals(data: bytes) -> list[str]:
    """The names the pickle stream itself takes from ``__main__`` (scikeras's ``model=build``: a function of
    the script that pickled the estimator), each once, in stream order; read without unpickling."""
    found: dict[str, None] = {}
    strings: list[str] = []  # the strings pushed last, memoized ones read back included
    memo: dict[int, str] = {}
    try:
        for opcode, argument, _ in pickletools.genops(data):
            name = opcode.name
            if name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                strings = [*strings[-1:], argument]
            elif name == "MEMOIZE" and strings:
                memo[len(memo)] = strings[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET") and argument in memo:
                strings = [*strings[-1:], memo[argument]]
            elif name == "STACK_GLOBAL" and len(strings) == 2 and strings[0] == "__main__":
                found.setdefault(strings[1])
            elif name == "GLOBAL" and isinstance(argument, str) and argument.startswith("__main__ "):
                found.setdefault(argument.partition(" ")[2])
    except Exception:  # the names read before the stream stopped reading
        pass
    return list(found)[:_MAX_NAMES]


def _custom(node: dict) -> tuple[str, str, str] | None:
    """``(module, name, key)`` of the class or function outside Keras that ``node`` names, unless registered."""
    module, class_name = node.get("module"), node.get("class_name")
    if module is None and isinstance(class_name, str) and class_name.isidentifier():
        module = _script_module(class_name, node.get("registered_name"))
        return None if module is None else (None, class_name, class_name)
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


def _script_module(class_name: str, registered_name: Any) -> str | None:
    """``""`` where a config node without a module names a class Keras does not know: one of the script or
    notebook that pickled the model (Keras records such a class with no module, under its own name)."""
    if class_name.startswith("__") or registered_name not in (None, class_name) or _is_registered(registered_name):
        return None  # a marker of Keras's config format (__keras_tensor__, __numpy__...), or a registered name
    known = (keras, keras.layers, keras.models, keras.losses, keras.metrics, keras.optimizers, keras.initializers)
    return None if any(hasattr(namespace, class_name) for namespace in known) else ""


def conversion_code(data: bytes | None) -> list[str]:
    """The code that converts ``data``, one statement a line, to copy: what the writing script defined (a
    comment each: define or import it first), the imports of the classes and functions outside Keras its
    config names, then ``keras_pickle.convert`` with them as ``custom_objects``. ``None``: the data is not at
    hand, and the call is spelt with a placeholder."""
    if data is None:
        return ["converted = keras_pickle.convert(data, custom_objects={...})  # the classes and functions it needs"]
    script = dict.fromkeys(script_globals(data))
    names = custom_names(data)
    modules: dict[str, list[str]] = {}
    for module, name, _ in names:
        if module is None:
            script.setdefault(name)
        elif name not in modules.setdefault(module, []):
            modules[module].append(name)
    code = [
        f"# {name}: the script or notebook that pickled it defined it; define it here as it did, or import it"
        for name in script
    ]
    code += [f"from {module} import {', '.join(found)}" for module, found in modules.items()]
    mapping = ", ".join(f"{key!r}: {name}" for _, name, key in names)
    code.append(f"converted = keras_pickle.convert(data{f', custom_objects={{{mapping}}}' if mapping else ''})")
    return code


def conversion_advice(data: bytes | None) -> str:
    """The remedy for Keras's own pickle (or scikeras's), as the lines that follow an error's first line."""
    lines = ["If you trust its source, convert it once; the result is a keras_pickle payload:"]
    return "\n".join([*lines, *(f"    {line}" for line in conversion_code(data))])


def keras_cause(error: BaseException, limit: int = 300) -> str:
    """``"Type: message"`` of an error Keras raised while rebuilding its pickle, on one line: the first sentence
    of the cause Keras puts last ("Exception encountered: ..."), not the config it prints first; a longer one is
    cut at a word after ``limit`` characters, with ``[...]``."""
    return f"{type(error).__name__}: {first_sentence(str(error).rpartition('Exception encountered: ')[2], limit)}"
