"""Load YAML into plain data while remembering the line of every node.

Line numbers are what make a validation error actionable, so the loader keeps a map from
each value's path (a tuple of keys and indexes) to its line in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import Problem, UserError

Path_ = tuple[str | int, ...]
MAX_DEPTH = 50
# A matrix has a few hundred values; aliases that multiply past this (a "billion laughs" document) are refused
# while converting, before they cost time or memory.
MAX_VALUES = 20_000
MAX_BYTES = 16 << 20  # far above MAX_VALUES values; a bigger file (or a device) is not read into memory


@dataclass
class Located:
    """Parsed YAML plus the line of each path in it."""

    file: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    values: int = 0  # nodes converted so far, aliases counted each time they are used
    texts: dict[Path_, str] = field(default_factory=dict)  # plain scalars as written (2.10, not 2.1)

    def line(self, path: Path_) -> int | None:
        """The line of `path`, or of its nearest located parent."""
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path)

    def scalar_text(self, path: Path_) -> str | None:
        """An unquoted scalar as written in the file, before YAML turned it into a number or a boolean."""
        return self.texts.get(path)


def load_text(text: str, file: str) -> Located:
    """Parse `text`; any YAML error becomes a UserError naming file and line."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        located = Located(file=file, data=None)
        if node is not None:
            located.data = _convert(loader, node, (), located, depth=0)
        return located
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        reason = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise UserError([Problem(file, line, None, None, f"YAML syntax error: {reason}")]) from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise UserError([Problem(file, line, None, None, f"YAML error: character {exc.character!r} is not allowed")]) from None
    except yaml.YAMLError as exc:
        reason = str(exc).splitlines()[0]
        raise UserError([Problem(file, None, None, None, f"YAML error: {reason}")]) from None
    except RecursionError:  # PyYAML's parser recurses per level, before _convert can count them
        raise UserError([Problem(file, None, None, None, f"nesting deeper than {MAX_DEPTH} levels")]) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_file(path: Path) -> Located:
    """Read and parse a YAML file; a missing, unreadable, oversized or non-UTF-8 file is a UserError. At most
    MAX_BYTES are read: a path that never ends (/dev/zero) is refused, not read into memory."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # newlines as read_text reads them
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError([Problem(str(path), None, None, None, f"cannot read file: {exc}")]) from None
    if len(data) > MAX_BYTES:
        raise UserError([Problem(str(path), None, None, None, f"cannot read file: more than {MAX_BYTES} bytes, "
                                                              "too big for a matrix")])
    return load_text(text, str(path))


def _convert(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, out: Located, depth: int) -> Any:
    out.lines.setdefault(path, node.start_mark.line + 1)
    out.values += 1
    if out.values > MAX_VALUES:
        raise _error(out, node, f"the document expands to more than {MAX_VALUES} values (YAML aliases used again "
                                "and again?); write the matrix out")
    if depth > MAX_DEPTH:
        raise _error(out, node, f"nesting deeper than {MAX_DEPTH} levels (a recursive alias?)")
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _convert(loader, key_node, path, out, depth + 1)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise _error(out, key_node, "a mapping key must be a plain value")
            if key in result:
                raise _error(out, key_node, f"duplicate key '{key}'")
            out.lines[(*path, str(key))] = key_node.start_mark.line + 1
            result[key] = _convert(loader, value_node, (*path, str(key)), out, depth + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(loader, item, (*path, i), out, depth + 1) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.ScalarNode) and not node.style:
        out.texts[path] = node.value
    return loader.construct_object(node, deep=True)


def _error(out: Located, node: yaml.Node, message: str) -> UserError:
    return UserError([Problem(out.file, node.start_mark.line + 1, None, None, message)])
