"""Errors a user can act on: each names the file, the entry and the field."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# What a message never prints raw: a value's newline would forge a second message line, an escape sequence or a
# right-to-left override would hide what the value really is.
HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


# user:password@ in a URL (an index, a mirror, a registry): shown as ***@ in every message, log line and note.
CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")


def visible(text: str) -> str:
    """`text` as it may be shown: on one line, each control or invisible character written as an escape (\\n,
    \\x1b, \\u202e), and the credentials of a URL replaced by ***."""
    text = CREDENTIALS.sub(r"\1***@", text)
    if all(unicodedata.category(c) not in HIDDEN for c in text):
        return text
    return "".join(NAMED.get(c) or (c.encode("unicode_escape").decode() if unicodedata.category(c) in HIDDEN else c)
                   for c in text)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, located as precisely as the input allows."""

    file: str
    line: int | None
    entry: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        if not self.file:
            return visible(self.message)
        where = f"{self.file}:{self.line}" if self.line else self.file
        parts = [where]
        if self.entry:
            parts.append(self.entry)
        if self.field:
            parts.append(f"field '{self.field}'")
        return visible(": ".join(parts) + f": {self.message}")


class UserError(Exception):
    """Bad input or environment; the CLI prints it and exits 2, never a traceback."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str, *, detail: str = "") -> None:
        if isinstance(problems, str):
            problems = [Problem(file="", line=None, entry=None, field=None, message=problems)]
        self.problems = problems
        self.detail = detail  # output of a tool that failed (a log tail), printed as it is below the problems
        super().__init__("\n".join(str(p) for p in problems))


MARKDOWN_SPECIAL = {c: f"\\{c}" for c in "\\`*_[]|#"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def markdown_text(value: object) -> str:
    """A value from a file as Markdown text: one line (visible), no HTML, and no character that would make it
    emphasis, code, a link, a table cell or a heading."""
    return "".join(MARKDOWN_SPECIAL.get(c, c) for c in visible(str(value)))
