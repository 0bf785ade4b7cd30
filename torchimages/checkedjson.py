"""JSON files from outside, read field by field: every field typed, every value through its grammar, and the first
problem one line naming the file, the place in it and the field, with what would be valid (a UserError: exit 2).

The readers of release manifests, the lock file and rendered.json are built on `Fields`; the rules are the grammar's
(torchimages/input/grammar.py), the file helpers in torchimages/files.py. A file that holds a key
its reader does not know is refused too: a key nobody checks is a way in (an SBOM "source" naming any path)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NoReturn

from .errors import Problem, UserError, visible
from .input.grammar import Check, control_problem


class Fields:
    """One JSON object of a file, at a place in it (`where`: 'images[2] (cpu-ssh)')."""

    def __init__(self, file: str, data: object, where: str | None = None, *, allowed: tuple[str, ...] = ()) -> None:
        self.file, self.where = file, where
        if not isinstance(data, dict):
            self.refuse(None, f"must be a JSON object, not {kind_of(data)}")
        self.data: dict[str, object] = data
        if allowed:
            unknown = sorted(str(key) for key in data if key not in allowed)
            if unknown:
                self.refuse(unknown[0], f"is not a field of this file; valid: {', '.join(allowed)}")

    def refuse(self, field: str | None, message: str) -> NoReturn:
        raise UserError([Problem(self.file, None, self.where, field, message)])

    def value(self, key: str, *, optional: bool) -> object:
        if key not in self.data or self.data[key] is None:
            if not optional:
                self.refuse(key, "is missing")
            return None
        return self.data[key]

    def text(self, key: str, check: Check | None = None, *, optional: bool = False) -> str | None:
        value = self.value(key, optional=optional)
        if value is None:
            return None
        if not isinstance(value, str):
            self.refuse(key, f"must be a string, not {kind_of(value)}")
        why = control_problem(value) or (check(value) if check else None)  # one line of visible text, always
        if why:
            self.refuse(key, why)
        return value

    def required_text(self, key: str, check: Check | None = None) -> str:
        value = self.text(key, check)
        assert value is not None  # text() refuses a missing value
        return value

    def count(self, key: str, *, optional: bool = False) -> int | None:
        """A non-negative integer (a bool is not one, as JSON's true is not 1)."""
        value = self.value(key, optional=optional)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.refuse(key, f"must be a whole number of 0 or more, not {visible(json.dumps(value))[:60]}")
        return value

    def required_count(self, key: str) -> int:
        value = self.count(key)
        assert value is not None
        return value

    def flag(self, key: str, *, default: bool = False) -> bool:
        value = self.value(key, optional=True)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.refuse(key, f"must be true or false, not {kind_of(value)}")
        return value

    def objects(self, key: str) -> list[tuple[str, object]]:
        """The items of a list field, each with its place ('images[3]')."""
        value = self.value(key, optional=False)
        if not isinstance(value, list):
            self.refuse(key, f"must be a list, not {kind_of(value)}")
        return [(f"{key}[{index}]", item) for index, item in enumerate(value)]

    def table(self, key: str, check_key: Check, check_value: Callable[[object], str | None], *,
              optional: bool = True) -> dict[str, object]:
        """An object of NAME -> value, each name and value checked."""
        value = self.value(key, optional=optional)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.refuse(key, f"must be a JSON object, not {kind_of(value)}")
        for name, item in value.items():
            why = check_key(name) or check_value(item)
            if why:
                self.refuse(key, f"{visible(name)!r}: {why}")
        return dict(value)

    def sub(self, key: str, allowed: tuple[str, ...], *, optional: bool = False) -> Fields | None:
        value = self.value(key, optional=optional)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.refuse(key, f"must be a JSON object, not {kind_of(value)}")
        where = f"{self.where}: {key}" if self.where else key
        return Fields(self.file, value, where, allowed=allowed)


def kind_of(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
