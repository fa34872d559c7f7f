"""Payloads written by another Keras: a newer Keras's config keys, and errors that name both sides.

**Newer Keras → older.** Keras reads configs written by an older Keras itself, but not those of
a newer one: a newer Keras writes keys an older constructor rejects (Keras 3.15 writes
``quantization_config: None`` on every Dense and ``input_axes: None`` on every Glorot
initializer; Keras 3.10 rejects both).
When the header's Keras version is newer than this one, :func:`adapt_body` checks each object
a config names (layer, initializer, optimizer, loss, metric, ..., custom classes included)
against the class this Keras resolves it to. A key that class's constructor does not accept is

* **dropped** when its value is the default the writing Keras gives that key: the default
  :data:`WRITER_DEFAULTS` lists (keys Keras added since 3.8, found by comparing the
  constructors of Keras 3.8, 3.10 and 3.15), or, for a key it does not list, ``None``
  (Keras's "not set"). A default means "not used", and this Keras does not use it either;
* **translated** where the newer Keras spells a setting the older one takes in another place:
  the ``quantization_config`` a newer Keras writes for a layer quantized with the defaults of
  its dtype policy's mode (``Int8QuantizationConfig()`` under an ``int8`` policy,
  ``Float8QuantizationConfig()`` under ``float8``, :data:`IMPLIED_QUANTIZATION`) is what an older
  Keras does for that policy by itself, so it is dropped and the policy carries the mode (the
  layer's variables are the same on both);
* **refused** otherwise, with :class:`~keras_pickle.VersionSkewError` naming both Keras
  versions, the object, the key, its value and the remedy (an int4 ``quantization_config``,
  an int8 one with its own quantizers, ``use_gate=True``).

A constructor accepts a key when it names it as a parameter, or when it takes ``**kwargs`` and
passes them on (the next ``__init__`` of the class's MRO decides), or when that ``__init__``,
or a ``from_config`` the class overrides, reads the key by name in its source. Where a source
cannot be read (a class shipped by value), acceptance is uncertain: only keys
:data:`WRITER_DEFAULTS` lists are dropped, and nothing is refused (Keras reports what it
rejects). A class this Keras cannot resolve is left to Keras. A payload from this Keras or an
older one is not changed.

**Both sides in errors.** :func:`name_sides` adds writer and reader (Keras version, backend, format
version, as :func:`keras_pickle._diagnosis.sides.sides` describes them) to an error raised while loading.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import sys
from typing import Any

import keras
from keras.src.dtype_policies import QUANTIZATION_MODES

from .._diagnosis.sides import sides
from .._wire import config_walk
from .._wire.refs import unwrap
from .._wire.reprs import as_text, bounded_repr, shorten
from ..errors import KerasPickleError, VersionSkewError

# Keys Keras added to constructors since 3.8 (the oldest Keras keras_pickle supports) and the
# default the Keras that writes them gives each: compared on Keras 3.8.0, 3.10.0 and 3.15.1.
_QUANTIZABLE = {"quantization_config": None, "lora_alpha": None}
_VARIANCE_SCALING = {"input_axes": None, "output_axes": None}
_ATTENTION = {"use_gate": False, "sliding_window": None}
_LOOKUP = {"oov_method": "floormod", "salt": None}
WRITER_DEFAULTS: dict[str, dict[str, Any]] = {
    "Dense": _QUANTIZABLE,
    "Embedding": _QUANTIZABLE,
    "EinsumDense": {**_QUANTIZABLE, "gptq_unpacked_column_size": None},
    **{name: {"lora_alpha": None} for name in ("Conv1D", "Conv2D", "Conv3D")},
    **{
        name: _VARIANCE_SCALING
        for name in ("VarianceScaling", "GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform")
        + ("LecunNormal", "LecunUniform")
    },
    "BatchNormalization": {"renorm": False, "renorm_clipping": None, "renorm_momentum": 0.99},
    "MultiHeadAttention": _ATTENTION,
    "GroupedQueryAttention": _ATTENTION,
    "GroupQueryAttention": _ATTENTION,
    "StringLookup": _LOOKUP,
    "IntegerLookup": _LOOKUP,
    "Resizing": {"antialias": False},
    "InputLayer": {"ragged": False},
    "SparseCategoricalCrossentropy": {"ignore_class": None, "axis": -1},
    "JaxLayer": {"native_serialization_platforms": None},
    "FlaxLayer": {"native_serialization_platforms": None},
    "TorchModuleWrapper": {"output_shape": None},
}
"""Per class name (as configs write it): keys added since Keras 3.8, and their default."""

_ABS_MAX_INT8 = {"value_range": [-127, 127], "epsilon": 1e-07, "output_dtype": "int8"}
IMPLIED_QUANTIZATION: dict[str, tuple[str, dict[str, Any]]] = {
    "int8": (
        "Int8QuantizationConfig",
        {"weight_quantizer": None, "activation_quantizer": {"class_name": "AbsMaxQuantizer", "config": _ABS_MAX_INT8}},
    ),
    "float8": ("Float8QuantizationConfig", {}),
}
"""Per quantization mode of a dtype policy: the ``quantization_config`` (class name, config) Keras
3.15 writes for ``quantize(mode)`` with its defaults, which is what Keras before it does for a
layer under that policy (compared on Keras 3.8.0, 3.10.0 and 3.15.1: the same quantizers, the
same variables)."""

_QUOTED_NAME = re.compile(r"""["']([A-Za-z_]\w*)["']""")


# --------------------------------------------------------------------------
# Versions
# --------------------------------------------------------------------------


def version_tuple(version: str) -> tuple[int, ...]:
    """``"3.15.1"`` → ``(3, 15, 1)``; the leading numbers of a pre-release (``"3.16.0.dev1"`` → ``(3, 16, 0)``)."""
    numbers = []
    for part in str(version).split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


def written_by_newer(header: dict) -> bool:
    """Whether the header's Keras is newer than this process's."""
    written = header.get("keras_version")
    return isinstance(written, str) and version_tuple(written) > version_tuple(keras.__version__)


def name_sides(error: KerasPickleError, header: Any) -> KerasPickleError:
    """``error``, its message ending with :func:`~keras_pickle._diagnosis.sides.sides` when the sides differ (once);
    returned for ``raise``.

    The error keeps its class and attributes: ``except StateMismatchError`` still catches it.
    """
    described = sides(header)
    message = str(error.args[0]) if error.args else ""
    if described is not None and described not in message:
        error.args = (f"{message.rstrip()} (Payload {described}.)", *error.args[1:])
    return error


# --------------------------------------------------------------------------
# Newer → older: the config keys this Keras lacks
# --------------------------------------------------------------------------


def adapt_body(header: dict, body: dict) -> dict:
    """``body`` (checked) with its configs readable by this Keras (see the module docstring).

    Returns ``body`` itself when the header's Keras is not newer than this one, else a shallow
    copy whose ``config`` and ``compile_objects`` texts are adapted. Runs before safe mode
    judges the body: a key dropped here names nothing it must judge, and a refused one is
    reported as what it is.
    """
    if not written_by_newer(header):
        return body
    custom_objects = {str(name): unwrap(value) for name, value in (body.get("custom_objects") or {}).items()}
    written = as_text(header["keras_version"])
    body = dict(body)
    body["config"] = adapt_config_json(body["config"], written, custom_objects)
    if body.get("compile_objects"):
        body["compile_objects"] = {
            key: adapt_config_json(text, written, custom_objects) for key, text in body["compile_objects"].items()
        }
    return body


def adapt_config_json(text: str, written: str, custom_objects: dict[str, Any]) -> str:
    """A config's JSON text with the keys this Keras lacks dropped (or refused); unchanged text if none."""
    config = json.loads(text)
    changed = False
    for node, where in _objects(config):
        cls = _resolve(node, custom_objects)
        if cls is None:
            continue
        accepted, certain = _accepted(cls)
        class_name = str(node.get("class_name")).rpartition(".")[2]
        defaults = WRITER_DEFAULTS.get(class_name, {})
        for key in [key for key in node["config"] if key not in accepted]:
            value = node["config"][key]
            if key == "quantization_config" and implied_by_dtype_policy(value, node["config"].get("dtype")):
                del node["config"][key]
                changed = True
            elif _is_default(value, defaults[key] if key in defaults else None) and (certain or key in defaults):
                del node["config"][key]
                changed = True
            elif certain:
                raise _refusal(written, where, key, value, f" ({defaults[key]!r})" if key in defaults else "")
    return json.dumps(config) if changed else text


def implied_by_dtype_policy(quantization_config: Any, dtype_policy: Any) -> bool:
    """Whether ``quantization_config`` is the default one for the mode ``dtype_policy`` names
    (:data:`IMPLIED_QUANTIZATION`), or any default one under a policy that quantizes nothing
    (Keras 3.15 writes ``Float8QuantizationConfig`` on an Embedding that ``quantize("float8")``
    leaves unquantized: it is never read)."""
    if not (isinstance(quantization_config, dict) and quantization_config.get("module") == "keras.quantizers"):
        return False
    policy = dtype_policy.get("config") if isinstance(dtype_policy, dict) else None
    mode = policy.get("mode") if isinstance(policy, dict) else None
    candidates = [IMPLIED_QUANTIZATION[mode]] if mode in IMPLIED_QUANTIZATION else []
    if mode is None and isinstance(dtype_policy, (dict, str)):
        candidates = list(IMPLIED_QUANTIZATION.values())
    written = _without_locations(quantization_config)
    return any(written == {"class_name": name, "config": config} for name, config in candidates)


def _without_locations(value: Any) -> Any:
    """``value`` without the keys that locate its Keras objects (``module``, ``registered_name``, and the
    ``shared_object_id`` of Keras's object sharing), for comparing what they are."""
    if isinstance(value, dict):
        located = ("module", "registered_name", "shared_object_id")
        return {k: _without_locations(v) for k, v in value.items() if k not in located}
    if isinstance(value, (list, tuple)):
        return [_without_locations(v) for v in value]
    return value


def _is_default(value: Any, default: Any) -> bool:
    return value is None if default is None else (type(value) is type(default) and value == default)


def _refusal(written: str, where: str, key: str, value: Any, default: str) -> VersionSkewError:
    reading = keras.__version__
    return VersionSkewError(
        f"This payload was written by Keras {written} and cannot load on Keras {reading}: its {where} sets "
        f"{key}={shorten(bounded_repr(value), 120)}, which Keras {reading} does not support (it has no "
        f"'{key}' argument). Load it with Keras {written} or newer (pip install 'keras>={written}'), or "
        + (
            f"write it from a model quantized with a mode Keras {reading} has ({_modes()}), at its defaults."
            if key == "quantization_config"
            else f"write it from a model that leaves '{key}' at its default{default}."
        ),
        written_by=written,
        loading_on=reading,
        where=where,
        key=key,
    )


def _modes() -> str:
    """The quantization modes this Keras has, as ``model.quantize`` names them."""
    return ", ".join(str(mode) for mode in QUANTIZATION_MODES)


def _objects(config: Any):
    """Every ``{"class_name", "module", "config": {...}}`` node of ``config`` with a description of it.

    The description names the object by class and name, and an unnamed one (an initializer) by
    the key it sits under in its owner: ``"GlorotUniform (kernel_initializer of Dense 'dense')"``.
    """
    stack: list[tuple[Any, str | None, str | None]] = [(config, None, None)]
    while stack:
        node, owner, key = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("config"), dict) and isinstance(node.get("class_name"), str) and "module" in node:
                name = node["config"].get("name")
                where = f"{node['class_name']} {name!r}" if isinstance(name, str) else node["class_name"]
                if not isinstance(name, str) and owner is not None:
                    where = f"{where} ({key} of {owner})"
                yield node, shorten(where, 200)
                owner = where
            for child_key, child in reversed(list(node.items())):
                stack.append((child, owner, child_key if isinstance(child_key, str) else key))
        elif isinstance(node, (list, tuple)):
            stack.extend((child, owner, key) for child in reversed(node))


def _resolve(node: dict, custom_objects: dict[str, Any]) -> type | None:
    """The class this process would build ``node`` as; or None.

    Looked up in the body's custom objects, then in modules' ``__dict__`` (never ``getattr``: a
    module's ``__getattr__`` may import): nothing is imported or called.
    """
    class_name, module = node.get("class_name"), node.get("module")
    registered = node.get("registered_name")
    for name in (registered, class_name):
        if isinstance(name, str) and isinstance(custom_objects.get(name), type):
            return custom_objects[name]
    if not (isinstance(class_name, str) and isinstance(module, str)):
        return None
    name = config_walk.keras_class_name(node)
    if name is not None and module.split(".")[0] == "keras":
        found = _member(sys.modules.get(module), [name]) or _member(keras, [*module.split(".")[1:], name])
    else:
        found = _member(sys.modules.get(module), class_name.split("."))
    return found if isinstance(found, type) else None


def _member(root: Any, path: list[str]) -> Any:
    for part in path:
        try:
            root = vars(root).get(part)
        except TypeError:  # no __dict__ (None included)
            return None
    return root


@functools.lru_cache(maxsize=512)
def _accepted(cls: type) -> tuple[frozenset, bool]:
    """The config keys ``cls`` accepts, and whether that is certain (see the module docstring)."""
    names: set[str] = set()
    certain = True
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if klass is object or init is None:
            continue
        try:
            parameters = list(inspect.signature(init).parameters.values())
        except (TypeError, ValueError):
            return frozenset(names), False
        names.update(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
        certain = _read_names(init, names) is not None and certain
    for klass in cls.__mro__:
        from_config = vars(klass).get("from_config")
        if from_config is None:
            continue
        if klass.__name__ in ("Layer", "Operation") and klass.__module__.startswith("keras."):
            break  # Keras's own: cls(**config)
        source = _read_names(getattr(from_config, "__func__", from_config), names)
        # A from_config that does not pass the config on (Sequential's reads the keys it wants) may
        # ignore a key its constructor lacks.
        certain = certain and source is not None and ("**config" in source or ".from_config(" in source)
    return frozenset(names), certain


def _read_names(function: Any, names: set[str]) -> str | None:
    """Add the names ``function``'s source quotes (``kwargs.pop("key")``); its source, or None if unreadable."""
    try:
        source = inspect.getsource(function)
    except Exception:  # no file (by value, a notebook), or one that does not tokenize
        return None
    names.update(_QUOTED_NAME.findall(source))
    return source
