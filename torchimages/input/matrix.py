"""matrix.yaml: load, check its shape, and expand it into a flat list of entries.

Shape errors (unknown keys, wrong types, YAML syntax, an empty file) are found here, with
line numbers; version compatibility is checked afterwards by `specs`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Problem, UserError
from . import grammar
from .grammar import DEFAULT_PLATFORM, PLATFORMS, VARIANTS
from .yamlsource import Located, load_file, load_text

FLAVORS = ("cuda", "ngc", "cpu")
DEFAULT_PLATFORMS = (DEFAULT_PLATFORM,)


def beyond_default(platforms: tuple[str, ...]) -> list[str]:
    """The platforms other than the default one, in their order."""
    return [platform for platform in platforms if platform != DEFAULT_PLATFORM]


STRING_FIELDS = ("name", "flavor", "torch", "cuda", "cudnn", "python", "ngc", "base_image", "size_growth_reason")
LIST_FIELDS = ("variants", "apt", "pip", "platforms")
ENTRY_FIELDS = STRING_FIELDS + LIST_FIELDS
TOP_FIELDS = ("registry", "images", "matrix")
MAX_IMAGES = 256  # entries a matrix may hold by default: a GitHub Actions job matrix runs at most 256 jobs
# The grammar each value must match before it is looked up or rendered (name and registry: specs).
FIELD_GRAMMARS = {"torch": grammar.version_problem, "cuda": grammar.version_problem, "cudnn": grammar.version_problem,
                  "python": grammar.version_problem, "ngc": grammar.version_problem,
                  "base_image": grammar.image_reference_problem, "apt": grammar.apt_problem, "pip": grammar.pip_problem,
                  "size_growth_reason": grammar.reason_problem}


@dataclass(frozen=True)
class Entry:
    """One image as written (or expanded), before compatibility checks."""

    origin: str
    line: int | None
    values: dict[str, Any]
    path: tuple[str | int, ...] | None = None  # where a listed entry stands in the YAML; None for matrix combinations

    def get(self, field: str) -> Any:
        return self.values.get(field)

    def field_line(self, doc: Located, field: str) -> int | None:
        """The line of `field` in a listed entry; the matrix block's line for an expanded combination."""
        return doc.line((*self.path, field)) if self.path else self.line


@dataclass(frozen=True)
class Matrix:
    file: str
    registry: str
    entries: tuple[Entry, ...]
    located: Located


def load(path: Path, max_images: int = MAX_IMAGES) -> Matrix:
    return parse(load_file(path), max_images)


def loads(text: str, file: str = "matrix.yaml", max_images: int = MAX_IMAGES) -> Matrix:
    return parse(load_text(text, file), max_images)


def parse(doc: Located, max_images: int = MAX_IMAGES) -> Matrix:
    """Check the top level and every entry's shape; raise one UserError listing all problems."""
    problems: list[Problem] = []
    data = doc.data
    if data is None:
        raise UserError([Problem(doc.file, None, None, None, "the file is empty: it needs 'registry' and 'images'")])
    if not isinstance(data, dict):
        raise UserError([Problem(doc.file, doc.line(()), None, None,
                                 f"the top level must be a mapping with {_names(TOP_FIELDS)}, not {_kind(data)}")])
    for key in data:
        if key not in TOP_FIELDS:
            problems.append(Problem(doc.file, doc.line((str(key),)), None, str(key),
                                    f"unknown top-level key; valid keys: {_names(TOP_FIELDS)}"))
    registry = data.get("registry")
    if not isinstance(registry, str) or not registry:
        problems.append(Problem(doc.file, doc.line(("registry",)), None, "registry",
                                "required: a non-empty string such as 'registry.example.com/ml/pytorch'"))
    listed = _listed_entries(doc, problems)
    entries = listed + _matrix_entries(doc, problems, max_images, len(listed))
    if len(listed) > max_images:
        problems.append(Problem(doc.file, doc.line(("images",)), None, "images", f"lists {len(listed)} images; at most "
                                f"{max_images} (GitHub Actions' job-matrix limit): split the matrix, or raise the limit "
                                "with --max-images"))
    if not entries and not problems:
        problems.append(Problem(doc.file, doc.line(()), None, "images", "no images: add entries under 'images' or a 'matrix' block"))
    for entry in entries:
        problems += check_entry_shape(doc.file, entry, doc)
    if problems:
        raise UserError(problems)
    return Matrix(file=doc.file, registry=str(registry), entries=tuple(entries), located=doc)


def _listed_entries(doc: Located, problems: list[Problem]) -> list[Entry]:
    images = doc.data.get("images")
    if images is None:
        return []
    if not isinstance(images, list):
        problems.append(Problem(doc.file, doc.line(("images",)), None, "images", f"must be a list of entries, not {_kind(images)}"))
        return []
    entries = []
    for index, item in enumerate(images):
        origin = f"images[{index}]"
        if not isinstance(item, dict):
            problems.append(Problem(doc.file, doc.line(("images", index)), origin, None,
                                    f"an entry must be a mapping of {_names(ENTRY_FIELDS)}, not {_kind(item)}"))
            continue
        label = f"{origin} {item['name']!r}" if isinstance(item.get("name"), str) else origin
        entries.append(Entry(origin=label, line=doc.line(("images", index)), values=dict(item), path=("images", index)))
    return entries


def _matrix_entries(doc: Located, problems: list[Problem], max_images: int, listed: int) -> list[Entry]:
    block = doc.data.get("matrix")
    if block is None:
        return []
    line = doc.line(("matrix",))
    before = len(problems)
    if not isinstance(block, dict):
        problems.append(Problem(doc.file, line, "matrix", None, f"must be a mapping of axes, not {_kind(block)}"))
        return []
    for key, values in block.items():
        key_line = doc.line(("matrix", str(key)))
        if key in ("include", "exclude"):
            if not isinstance(values, list) or not all(isinstance(v, dict) for v in values):
                problems.append(Problem(doc.file, key_line, "matrix", str(key), "must be a list of mappings"))
            continue
        if key not in ENTRY_FIELDS or key == "name":
            valid = [f for f in ENTRY_FIELDS if f != "name"]
            problems.append(Problem(doc.file, key_line, "matrix", str(key),
                                    f"unknown axis; axes are entry fields: {_names(valid)}, plus include/exclude"))
        elif not isinstance(values, list) or not values:
            problems.append(Problem(doc.file, key_line, "matrix", str(key), "an axis must be a non-empty list of values"))
    if len(problems) > before:
        return []
    axes = [values for key, values in block.items() if key not in ("include", "exclude")]
    size = math.prod(len(values) for values in axes) if axes else 0
    if listed + size + len(block.get("include") or []) > max_images:  # counted before expanding: 10^6 are never made
        beside = f" beside {listed} listed images" if listed else ""
        problems.append(Problem(doc.file, line, "matrix", None, f"expands to {size} combinations{beside}; at most "
                                f"{max_images} images (GitHub Actions' job-matrix limit): split the matrix, or raise "
                                "the limit with --max-images"))
        return []
    return [Entry(origin=f"matrix combination {_short(c)}", line=line, values=c) for c in expand(block)]


def expand(block: dict[str, Any]) -> list[dict[str, Any]]:
    """Expand axes with include/exclude the way a GitHub Actions job matrix does.

    The product of the axes, minus combinations matching an `exclude` item (all its keys), then
    each `include` item is merged into every combination whose original axis values it does
    not change; an item that fits no combination becomes a combination of its own.
    """
    axes = {k: v for k, v in block.items() if k not in ("include", "exclude")}
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())] if axes else []
    for excluded in block.get("exclude") or []:
        combos = [c for c in combos if not all(c.get(k) == v for k, v in excluded.items())]
    originals = list(combos)
    for included in block.get("include") or []:
        fitting = [c for c in originals if all(c[k] == v for k, v in included.items() if k in axes)]
        for combo in fitting:
            combo.update(included)
        if not fitting:
            combos.append(dict(included))
    return combos


def check_entry_shape(file: str, entry: Entry, doc: Located) -> list[Problem]:
    """Unknown keys and wrong types of one entry."""
    problems = []

    def problem(field: str, message: str) -> None:
        problems.append(Problem(file, entry.field_line(doc, field), entry.origin, field, message))

    for key, value in entry.values.items():
        if key not in ENTRY_FIELDS:
            problem(str(key), f"unknown key; valid keys: {_names(ENTRY_FIELDS)}")
        else:
            for why in _value_problems(entry, doc, key, value):
                problem(key, why)
    flavor = entry.get("flavor")
    if flavor is None:
        problem("flavor", f"required; one of {_names(FLAVORS)}")
    elif isinstance(flavor, str) and flavor not in FLAVORS:
        problem("flavor", f"unknown flavor '{flavor}'; valid: {_names(FLAVORS)}")
    for why in _choice_problems(entry.get("variants"), "variant", VARIANTS, " (the base image is always built)"):
        problem("variants", why)
    platforms = entry.get("platforms")
    for why in _choice_problems(platforms, "platform", tuple(PLATFORMS)):
        problem("platforms", why)
    if platforms == []:
        problem("platforms", f"lists no platform; leave it out for {_names(DEFAULT_PLATFORMS)}")
    return problems


def _choice_problems(items: Any, noun: str, valid: tuple[str, ...], note: str = "") -> list[str]:
    """A list field whose items are chosen from `valid`: each unknown one, and one listed twice."""
    if not isinstance(items, list):
        return []
    problems = [f"unknown {noun} '{item}'; valid: {_names(valid)}{note}" for item in items
                if isinstance(item, str) and item not in valid]
    if len(set(map(str, items))) != len(items):
        problems.append(f"lists a {noun} twice")
    return problems


def _value_problems(entry: Entry, doc: Located, key: str, value: Any) -> list[str]:
    """Wrong type, else each item outside its field's grammar."""
    if key in STRING_FIELDS and not isinstance(value, str):
        return [f"must be a string, not {_kind(value)}{_number_hint(entry, doc, key, value)}"]
    if key in LIST_FIELDS and not isinstance(value, list):
        return [f"must be a list of strings, not {_kind(value)}"]
    items = value if isinstance(value, list) else [value]
    odd = [i for i, v in enumerate(items) if not isinstance(v, str)]
    if odd:
        return [f"must be a list of strings: item {odd[0] + 1} is {_kind(items[odd[0]])} ({items[odd[0]]!r}); quote it"]
    found = (grammar.control_problem(item) or (FIELD_GRAMMARS[key](item) if key in FIELD_GRAMMARS else None)
             for item in items)
    return [why for why in found if why]


def _number_hint(entry: Entry, doc: Located, key: str, value: Any) -> str:
    """YAML reads `torch: 2.10` as the number 2.1: quote the text as written, not the number."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return ""
    written = doc.scalar_text((*entry.path, key)) if entry.path else None
    return f' (versions are strings: write {key}: "{written or value}")'


def _names(items: tuple[str, ...] | list[str]) -> str:
    return ", ".join(items)


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "empty"}.get(type(value), type(value).__name__)


def _short(combo: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in combo.items() if not isinstance(v, list)) + "}"
