"""The inspector's report: :class:`PayloadInfo`, as text and as JSON with stable keys."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from .._wire import dialect_traits


@dataclasses.dataclass(frozen=True)
class PayloadInfo:
    """What a keras_pickle payload holds, read without running any of it.

    Counts and sizes come from the body (``n_variables``, ``weight_bytes``);
    what the header claims is kept next to them, and ``warnings`` says where
    the two disagree. ``imports`` lists every global the whole pickle stream
    names (keras_pickle's reconstructor aside): loading it imports those
    modules (``safe_mode=False``) or requires them to be imported already
    (safe mode).
    """

    format_version: Any
    keras_version: str | None
    backend: str | None
    model_class: str | None
    kind: str | None
    protocol: int
    n_layers: int | None
    n_params: int
    n_variables: int
    n_optimizer_variables: int
    weight_bytes: int
    out_of_band_buffers: int
    header_n_variables: Any
    header_weight_bytes: Any
    custom_objects: tuple[str, ...]
    imports: tuple[tuple[str, str], ...]
    lambda_layers: tuple[str, ...]
    checksum: str | None
    checksum_status: str
    warnings: tuple[str, ...]
    payloads_in_stream: int = 1
    safe_mode_refuses: bool = False
    """Whether ``keras_pickle.loads`` (safe mode) refuses the payload, as far as the stream, the
    config and this process's imported modules tell; ``warnings`` says why."""
    dialect: str | None = "keras3"
    """Which Keras wrote the payload: ``"keras3"`` or ``"tf_keras"`` (format versions 1 to 3: Keras 3)."""

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data: every field under its own name (``JSON_KEYS``), in that order.

        Stable: a key is only ever added. ``imports`` is a list of ``[module, name]`` pairs; values a
        malformed payload provides that are not plain JSON appear as their bounded repr (a string).
        """
        data = dataclasses.asdict(self)
        data["imports"] = [list(pair) for pair in self.imports]
        return {key: _json_value(data[key]) for key in JSON_KEYS}

    @property
    def has_lambda(self) -> bool:
        return bool(self.lambda_layers)

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules of :attr:`imports`, each once, in stream order."""
        return tuple(dict.fromkeys(module for module, _name in self.imports))

    def __str__(self) -> str:
        def join(items: Iterable[str]) -> str:
            items = list(items)
            return ", ".join(items) if items else "none"

        layers = "not listed in the config" if self.n_layers is None else str(self.n_layers)
        where = f", {self.out_of_band_buffers} out of band" if self.out_of_band_buffers else ""
        lines = [
            f"keras_pickle payload, format version {self.format_version} (pickle protocol {self.protocol})",
            f"  written by      {dialect_traits.of(self.dialect).keras} {self.keras_version}, backend {self.backend}",
            f"  object          {self.model_class} ({self.kind})",
            f"  layers          {layers}",
            f"  parameters      {self.n_params:,}",
            f"  variables       {self.n_variables} ({self.n_optimizer_variables} of them optimizer state)",
            f"  weight bytes    {self.weight_bytes:,} ({format_bytes(self.weight_bytes)}{where})",
            f"  custom objects  {join(self.custom_objects)}",
            f"  imports         {join(f'{m}.{n}' for m, n in self.imports)}",
            f"  Lambda layers   {join(self.lambda_layers)}",
            f"  safe mode       {_SAFE_MODE[self.safe_mode_refuses]}",
            f"  checksum        {self.checksum_status}" + (f" ({self.checksum})" if self.checksum else ""),
        ]
        if self.payloads_in_stream > 1:
            lines.append(f"  (the first of {self.payloads_in_stream} payloads in this pickle)")
        lines.extend(f"  WARNING: {warning}" for warning in collapsed(self.warnings))
        return "\n".join(lines)


_SAFE_MODE = {
    True: "REFUSES it (see the warnings)",
    False: "no refusal found (it loads where the modules it names are imported)",
}


_QUOTED_FIRST = re.compile(r"'([^']*)' (.+)", re.DOTALL)


def collapsed(warnings: Iterable[str]) -> list[str]:
    """``warnings`` as the report prints them, in order of first appearance: identical ones once, with how
    many times they occur; ones that differ only in the name they quote first, once, naming each
    (``each of 'a', 'b' is in a module ...``). :meth:`PayloadInfo.to_json` keeps every warning as it is."""
    groups: dict[str, list[str]] = {}
    for warning in warnings:
        match = _QUOTED_FIRST.fullmatch(warning)
        key, name = (match.group(2), f"'{match.group(1)}'") if match else (warning, None)
        groups.setdefault(key, []).append(name)
    lines = []
    for rest, names in groups.items():
        if names[0] is None:
            lines.append(rest if len(names) == 1 else f"({len(names)} times) {rest}")
        elif len(set(names)) == 1:
            lines.append(f"{names[0]} {rest}" + (f" ({len(names)} times)" if len(names) > 1 else ""))
        else:
            lines.append(f"each of {', '.join(dict.fromkeys(names))} {rest}")
    return lines


def format_bytes(n: int) -> str:
    if n >= 10**18:
        return f"about 10^{len(str(n)) - 1} B"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


JSON_KEYS = tuple(field.name for field in dataclasses.fields(PayloadInfo))
"""The keys of :meth:`PayloadInfo.to_json`, documented in docs/guide.md; only ever added to."""


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    return repr(value)
