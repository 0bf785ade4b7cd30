"""Errors a user can act on: each names the file, the entry and the field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, located as precisely as the input allows."""

    file: str
    line: int | None
    entry: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        parts = [where]
        if self.entry:
            parts.append(self.entry)
        if self.field:
            parts.append(f"field '{self.field}'")
        return ": ".join(parts) + f": {self.message}"


class UserError(Exception):
    """Bad input or environment; the CLI prints it and exits 2, never a traceback."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(file="", line=None, entry=None, field=None, message=problems)]
        self.problems = problems
        super().__init__("\n".join(str(p) if p.file else p.message for p in problems))
