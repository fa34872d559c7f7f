"""How a Keras layer or model would fail to pickle, judged from its config, never its weights."""

from __future__ import annotations

import inspect
import re
import types
from typing import Any

import keras
from keras.src.models.functional import Functional

from .._capture import checks as _dump_checks
from .._capture import config as _capture_config
from .._capture import custom_objects as _custom_objects
from .._capture import encode as _capture_encode
from .._dialect import Dialect
from .._keras3.recorded import records as _records
from .._protocol import dialects as _dialects
from .._rebuild.registered import LOCAL_CLASS_REMEDIES
from ..errors import CustomObjectError, KerasPickleError, KerasPicklingError


def lists_layers(layer: Any) -> bool:
    """True for a model rebuilt from a config that lists its layers (Functional, Sequential)."""
    return isinstance(layer, (keras.Sequential, Functional))


def layer_failure(layer: Any) -> tuple[BaseException | None, dict]:
    """What pickling ``layer`` would raise (short of reading its weights), and its custom objects.

    The same steps as pickling (:func:`_capture_encode.checked_config`), without reading variables.
    """
    dialect = _dialects.of(layer)
    if not dialect.records_calls:  # tf-keras: its config and custom objects are all a dump checks
        return _tf_keras_layer_failure(layer, dialect)
    try:
        checked = _capture_encode.checked_config(layer, dialect)
        travelling = [*_custom_objects.portable_mapping(checked.custom_objects).values()]
        travelling += [_custom_objects.portable(entry.cls) for entry in checked.constructed]
        local = [ref for ref in travelling if isinstance(ref, _custom_objects.DefinedHere)]
        if local:
            return _loads_here_only(local[0]), checked.custom_objects
        return None, checked.custom_objects
    except KerasPickleError as e:
        return e, {}
    except Exception as e:
        return KerasPicklingError(f"Cannot pickle {type(layer).__name__}: {type(e).__name__}: {e}"), {}


def _tf_keras_layer_failure(layer: Any, dialect: Dialect) -> tuple[BaseException | None, dict]:
    """:func:`layer_failure` of a tf-keras layer: its config and the custom objects it names."""
    try:
        config = dialect.config_of(layer)
        _capture_config.config_to_json(config, layer)
        custom_objects = _custom_objects.collect(config, layer, dialect)
    except KerasPickleError as e:
        return e, {}
    except Exception as e:
        return KerasPicklingError(f"Cannot pickle {type(layer).__name__}: {type(e).__name__}: {e}"), {}
    local = [
        ref
        for ref in _custom_objects.portable_mapping(custom_objects).values()
        if isinstance(ref, _custom_objects.DefinedHere)
    ]
    return (_loads_here_only(local[0]) if local else None), custom_objects


def _loads_here_only(ref: Any) -> CustomObjectError:
    return CustomObjectError(
        f"{ref.qualified_name} is defined inside a function and not registered with Keras: pickle carries it by a "
        "name that resolves in this process only, so a copy loads here and nowhere else (a worker fails). "
        + LOCAL_CLASS_REMEDIES,
        name=ref.qualified_name,
        module=getattr(ref.target, "__module__", None),
    )


def own_constructor_failure(layer: Any) -> KerasPickleError | None:
    """``_dump_checks.check_constructor_recoverable`` for ``layer`` alone, not the layers it lists."""
    try:
        _dump_checks.check_own_constructor(layer)
    except KerasPickleError as e:
        return e
    return None


def recorded_arguments(layer: Any, path: str) -> list[tuple[str, Any]]:
    """``(path, value)`` of every constructor argument keras_pickle recorded for ``layer`` or a layer in it.

    Those travel in the pickle beside the config (``keras_pickle._keras3.recorded.construct``),
    so each must pickle; a path names the argument (``vae.decoder``).
    """
    found = []
    sublayers = layer._flatten_layers(include_self=True) if hasattr(layer, "_flatten_layers") else [layer]
    for sublayer in sublayers:
        recorded = _records.init_arguments(sublayer)
        if recorded is None:
            continue
        base = path if sublayer is layer else f"{path}.get_layer({sublayer.name!r})"
        args, kwargs = recorded
        try:
            names = list(inspect.signature(type(sublayer).__init__).bind(sublayer, *args).arguments)[1:]
        except TypeError:
            names = []
        for index, value in enumerate(args):
            found.append((f"{base}.{names[index]}" if index < len(names) else f"{base}.args[{index}]", value))
        for name, value in kwargs.items():
            found.append((f"{base}.{name}", value))
    return found


def culprits(layer: Any, path: str, error: BaseException) -> list[tuple[str, Any, BaseException]]:
    """Where to report ``error``: the layer itself if its own constructor cannot be recovered,
    and, recursively, each layer its config lists that fails on its own; else the layer itself.

    Configs only: each sublayer's config is produced, never its weights.
    """
    found: list[tuple[str, Any, BaseException]] = []
    own = own_constructor_failure(layer)
    if own is not None:
        found.append((path, layer, own))
    if lists_layers(layer):
        for index, sublayer in enumerate(layer.layers):
            sub_error, _ = layer_failure(sublayer)
            if sub_error is not None:
                found += culprits(sublayer, f"{path}.layers[{index}]", sub_error)
    return found or [(path, layer, error)]


MESSAGE_PREFIX = re.compile(r"^(?:Refusing to pickle|Cannot pickle) [\w.<>]+: ")


def reason_and_advice(message: str, default_advice: str) -> tuple[str, str]:
    """A keras_pickle error message as (why, what to do): its first sentence, then the rest.

    Prose is joined onto one line; a code example (lines indented by four spaces) keeps its lines, so
    that the advice prints as it would be typed.
    """
    text = MESSAGE_PREFIX.sub("", _prose_and_code(message), count=1)
    depth = 0
    for index, char in enumerate(text):
        if char == "\n":
            break  # a code example: the first sentence ended before it
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char == "." and depth == 0 and text[index + 1 : index + 2] == " ":
            if text[index - 3 : index + 1] == "e.g.":
                continue
            return text[: index + 1], text[index + 2 :]
    return text, default_advice or text


def _prose_and_code(message: str) -> str:
    """``message`` with each run of prose lines joined into one line, and each line indented by four spaces
    (a code example) kept on its own line after a blank one."""
    parts: list[str] = []
    prose: list[str] = []
    code: list[str] = []

    def flush_code() -> None:
        if code:
            parts.append("\n\n" + "\n".join(code) + "\n\n")
            code.clear()

    for line in message.splitlines():
        if line.startswith("    ") and line.strip():
            if prose:
                parts.append(" ".join(" ".join(prose).split()))
                prose.clear()
            code.append(line.rstrip())
        elif line.strip():
            flush_code()
            prose.append(line)
    if prose:
        parts.append(" ".join(" ".join(prose).split()))
    flush_code()
    return "".join(parts).strip()


def function_arguments(layer: Any) -> list[tuple[str, str]]:
    """Constructor arguments of ``layer`` (kept as attributes of that name) that are lambdas or local functions."""
    try:
        parameters = inspect.signature(type(layer).__init__).parameters
    except (TypeError, ValueError):
        return []
    found = []
    for name in parameters:
        value = vars(layer).get(name)
        qualname = getattr(value, "__qualname__", "")
        if isinstance(value, types.FunctionType) and "<lambda>" in qualname:
            found.append((name, "a lambda"))
        elif isinstance(value, types.FunctionType) and "<locals>" in qualname:
            found.append((name, f"a function defined inside a function ({qualname})"))
    return found
