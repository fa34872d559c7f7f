"""What :func:`keras_pickle.check` returns: each problem by path, as text and as JSON."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Problem:
    path: str
    type_name: str
    reason: str
    advice: str

    def __str__(self) -> str:
        return f"{self.path} ({self.type_name}): {self.reason}\n    -> {self.advice}"


@dataclasses.dataclass
class CheckReport:
    """What :func:`check` found. ``ok`` is True exactly when ``pickle.dumps`` of the object succeeds."""

    root: str
    problems: list[Problem]
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """``{"root", "ok", "problems": [{"path", "type", "reason", "advice"}], "notes"}``: stable keys."""
        return {
            "root": self.root,
            "ok": self.ok,
            "problems": [
                {"path": p.path, "type": p.type_name, "reason": p.reason, "advice": p.advice} for p in self.problems
            ],
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        if self.ok:
            lines = [f"{self.root} is pickle-safe."]
        else:
            count = len(self.problems)
            lines = [f"{self.root} is not pickle-safe: {count} problem{'s' if count > 1 else ''}."]
            lines += [str(problem) for problem in self.problems]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)
