"""Security advisories in the OSV format (https://ossf.github.io/osv-schema/), read as input, and whether one affects
an installed package.

The advisories come from a folder or a zip of OSV JSON documents (the public per-ecosystem exports are such zips), one
advisory each. Every field the match depends on is checked: an advisory that is not an object of the schema's shape,
a range without an `introduced` event, an id that is not one line of at most 100 characters, a zip member whose name
leads out of the archive: each is refused with one line naming the file. Versions are compared in their ecosystem's
order, never as text: PEP 440 for PyPI (`packaging`), Debian's for Debian and Ubuntu packages (the algorithm of
`dpkg --compare-versions`, which the tests check this against). A withdrawn advisory affects nothing.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cmp_to_key
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import UserError, visible
from ..input.grammar import short_line_problem

MAX_DOCUMENT = 4 * 1024 * 1024  # bytes of one advisory: the largest of PyPI's and Debian's exports are under 1 MB
EVENTS = ("introduced", "fixed", "last_affected", "limit")
# GitHub's advisories (GHSA) say MODERATE where CVSS says MEDIUM
SEVERITY_WORDS = {"LOW": "LOW", "MODERATE": "MEDIUM", "MEDIUM": "MEDIUM", "HIGH": "HIGH", "CRITICAL": "CRITICAL"}


@dataclass(frozen=True)
class Range:
    kind: str  # ECOSYSTEM, SEMVER (compared in the package's ecosystem order) or GIT (commits: never matched here)
    events: tuple[tuple[str, str], ...]  # (introduced|fixed|last_affected|limit, version), as the advisory lists them


@dataclass(frozen=True)
class Affected:
    ecosystem: str  # PyPI, Debian:12, Ubuntu:22.04:LTS, ...
    name: str
    ranges: tuple[Range, ...]
    versions: frozenset[str]


@dataclass(frozen=True)
class Advisory:
    id: str
    aliases: tuple[str, ...]
    severity: str | None  # LOW, MEDIUM, HIGH, CRITICAL, or None where the advisory gives none we can read
    withdrawn: str | None
    affected: tuple[Affected, ...]
    source: str  # the file (or zip member) it was read from


@dataclass(frozen=True)
class Finding:
    advisory: Advisory
    ecosystem: str
    package: str
    installed: str
    fixed: str | None  # the first fixed version above the installed one, or None: no fix published


# --- reading --------------------------------------------------------------------------------------------------------

def read(path: Path) -> list[Advisory]:
    """Every advisory of a folder (its *.json files, recursively) or a zip of them."""
    if path.is_dir():
        files = sorted(path.rglob("*.json"))
        return [parse_document(file.read_bytes()[: MAX_DOCUMENT + 1], str(file)) for file in files if file.is_file()]
    if zipfile.is_zipfile(path):
        return list(read_zip(path))
    raise UserError(f"--advisories {visible(str(path))}: not a folder or a zip of OSV JSON files")


def read_zip(path: Path) -> Iterator[Advisory]:
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            if member.is_dir():
                continue
            name = PurePosixPath(member.filename)
            where = f"{path}:{visible(member.filename)[:200]}"
            if name.is_absolute() or ".." in name.parts or "\\" in member.filename:
                raise UserError(f"{where}: a member whose name leads out of the archive")
            if name.suffix != ".json":
                continue
            if member.file_size > MAX_DOCUMENT:
                raise UserError(f"{where}: {member.file_size} bytes, more than an advisory's {MAX_DOCUMENT}")
            with archive.open(member) as file:
                yield parse_document(file.read(MAX_DOCUMENT + 1), where)


def parse_document(data: bytes, where: str) -> Advisory:
    if len(data) > MAX_DOCUMENT:
        raise UserError(f"{where}: more than an advisory's {MAX_DOCUMENT} bytes")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise UserError(f"{where}: not JSON (an OSV advisory is one JSON object)") from None
    return parse(document, where)


def parse(document: object, where: str) -> Advisory:
    """One OSV advisory, every field the match reads checked; anything else is one UserError naming the file."""
    if not isinstance(document, dict):
        raise UserError(f"{where}: not an OSV advisory (a JSON object with an id and what it affects)")
    ident = text(document, "id", where)
    where = f"{where} ({ident})"
    aliases = document.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and not short_line_problem(a) for a in aliases):
        raise UserError(f"{where}: field 'aliases' must be a list of ids, each one line of at most 100 characters")
    withdrawn = document.get("withdrawn")
    if withdrawn is not None and not isinstance(withdrawn, str):
        raise UserError(f"{where}: field 'withdrawn' must be a time (RFC 3339 text)")
    affected = document.get("affected") or []
    if not isinstance(affected, list):
        raise UserError(f"{where}: field 'affected' must be a list")
    return Advisory(id=ident, aliases=tuple(aliases), severity=severity_of(document, where), withdrawn=withdrawn,
                    affected=tuple(parse_affected(item, f"{where}: affected[{index}]")
                                   for index, item in enumerate(affected)),
                    source=where)


def parse_affected(item: object, where: str) -> Affected:
    if not isinstance(item, dict) or not isinstance(item.get("package"), dict):
        raise UserError(f"{where}: must be an object with a package (ecosystem and name)")
    package = item["package"]
    ecosystem, name = text(package, "ecosystem", where), text(package, "name", where)
    ranges = item.get("ranges") or []
    versions = item.get("versions") or []
    if not isinstance(ranges, list):
        raise UserError(f"{where}: field 'ranges' must be a list")
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise UserError(f"{where}: field 'versions' must be a list of versions")
    return Affected(ecosystem=ecosystem, name=name, versions=frozenset(versions),
                    ranges=tuple(parse_range(r, f"{where}: ranges[{index}]") for index, r in enumerate(ranges)))


def parse_range(item: object, where: str) -> Range:
    if not isinstance(item, dict) or item.get("type") not in ("ECOSYSTEM", "SEMVER", "GIT"):
        raise UserError(f"{where}: must be an object whose type is ECOSYSTEM, SEMVER or GIT")
    events = item.get("events")
    if not isinstance(events, list) or not events:
        raise UserError(f"{where}: field 'events' must be a list of events")
    parsed = []
    for event in events:
        if not isinstance(event, dict) or len(event) != 1 or next(iter(event)) not in EVENTS:
            raise UserError(f"{where}: each event is one of {', '.join(EVENTS)} with a version")
        kind, version = next(iter(event.items()))
        if not isinstance(version, str) or not version or short_line_problem(version):
            raise UserError(f"{where}: event {kind}: the version must be one line of text")
        parsed.append((kind, version))
    if not any(kind == "introduced" for kind, _ in parsed):
        raise UserError(f"{where}: a range without an 'introduced' event (the schema asks one; '0' for every version)")
    return Range(kind=item["type"], events=tuple(parsed))


def text(data: dict, key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value or (why := short_line_problem(value)):
        raise UserError(f"{where}: field {key!r} must be " + (why if isinstance(value, str) and value else "text"))
    return value


def severity_of(document: dict, where: str) -> str | None:
    """The advisory's severity: its database's word (GitHub's MODERATE is MEDIUM), else its CVSS v3 vector's base
    score rated as CVSS rates it; None where it gives neither (a CVSS v4 vector alone: its score is not computed
    here)."""
    specific = document.get("database_specific")
    word = specific.get("severity") if isinstance(specific, dict) else None
    if isinstance(word, str) and word.upper() in SEVERITY_WORDS:
        return SEVERITY_WORDS[word.upper()]
    for entry in document.get("severity") or []:
        if isinstance(entry, dict) and entry.get("type") == "CVSS_V3" and isinstance(entry.get("score"), str):
            score = cvss3_score(entry["score"])
            if score is None:
                raise UserError(f"{where}: severity: {visible(entry['score'])[:80]!r} is not a CVSS v3 vector")
            return rating(score)
    return None


CVSS3 = {"AV": {"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2}, "AC": {"L": 0.77, "H": 0.44},
         "UI": {"N": 0.85, "R": 0.62}, "C": {"H": 0.56, "L": 0.22, "N": 0.0}}
PRIVILEGES = {("N", "U"): 0.85, ("L", "U"): 0.62, ("H", "U"): 0.27, ("N", "C"): 0.85, ("L", "C"): 0.68, ("H", "C"): 0.5}


def cvss3_score(vector: str) -> float | None:
    """The CVSS v3.0/3.1 base score of a vector (FIRST's specification, section 7), or None when it is not one."""
    parts = vector.split("/")
    if not parts or not re.fullmatch(r"CVSS:3\.[01]", parts[0]):
        return None
    metrics = dict(part.split(":", 1) for part in parts[1:] if ":" in part)
    try:
        av, ac, ui = CVSS3["AV"][metrics["AV"]], CVSS3["AC"][metrics["AC"]], CVSS3["UI"][metrics["UI"]]
        scope = metrics["S"]
        pr = PRIVILEGES[(metrics["PR"], scope)]
        c, i, a = (CVSS3["C"][metrics[key]] for key in ("C", "I", "A"))
    except KeyError:
        return None
    if scope not in ("U", "C"):
        return None
    iss = 1 - (1 - c) * (1 - i) * (1 - a)
    impact = 6.42 * iss if scope == "U" else 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15
    exploitability = 8.22 * av * ac * pr * ui
    if impact <= 0:
        return 0.0
    total = impact + exploitability if scope == "U" else 1.08 * (impact + exploitability)
    return round_up(min(total, 10.0))


def round_up(value: float) -> float:
    """CVSS 3.1's Roundup: the smallest number of one decimal at or above `value`, free of floating-point noise."""
    whole = round(value * 100000)
    return whole / 100000.0 if whole % 10000 == 0 else (math.floor(whole / 10000) + 1) / 10.0


def rating(score: float) -> str | None:
    if score >= 9.0:
        return "CRITICAL"
    if score >= 7.0:
        return "HIGH"
    if score >= 4.0:
        return "MEDIUM"
    return "LOW" if score > 0 else None


# --- versions ---------------------------------------------------------------------------------------------------------

def debian_compare(a: str, b: str) -> int:
    """-1, 0 or 1: Debian's order of two versions ([epoch:]upstream[-revision]), as dpkg --compare-versions orders
    them (deb-version(7): digits compared as numbers, '~' before everything, even the end, letters before other
    characters)."""
    (epoch_a, up_a, rev_a), (epoch_b, up_b, rev_b) = split_debian(a), split_debian(b)
    if epoch_a != epoch_b:
        return -1 if epoch_a < epoch_b else 1
    return verrevcmp(up_a, up_b) or verrevcmp(rev_a, rev_b)


def split_debian(version: str) -> tuple[int, str, str]:
    epoch, colon, rest = version.partition(":")
    if not colon:
        epoch, rest = "0", version
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return (int(epoch) if epoch.isdigit() else 0), upstream, revision


def char_order(c: str) -> int:
    if c == "~":
        return -1
    if c.isdigit():
        return 0
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = char_order(a[i]) if i < len(a) else 0
            bc = char_order(b[j]) if j < len(b) else 0
            if ac != bc:
                return -1 if ac < bc else 1
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return -1 if first_diff < 0 else 1
    return 0


def family(ecosystem: str) -> str:
    """PyPI, Debian, Ubuntu, ...: an ecosystem without its release (Debian:12 -> Debian)."""
    return ecosystem.split(":", 1)[0]


def compare(ecosystem: str, a: str, b: str) -> int:
    if family(ecosystem) == "PyPI":
        left, right = Version(a), Version(b)  # InvalidVersion: the caller skips what PEP 440 cannot order
        return (left > right) - (left < right)
    return debian_compare(a, b)


def package_key(ecosystem: str, name: str) -> tuple[str, str]:
    """How a package is named across advisories and images: PyPI's names by PEP 503 (Jinja2 is jinja2), dpkg's as
    they are, within the ecosystem's family."""
    return family(ecosystem), canonicalize_name(name) if family(ecosystem) == "PyPI" else name


# --- matching ---------------------------------------------------------------------------------------------------------

def findings(advisories: Iterable[Advisory], packages: Iterable[tuple[str, str, str]]) -> list[Finding]:
    """Each advisory that affects an installed package (ecosystem, name, version; the ecosystem as OSV names it,
    Debian:12 or PyPI), with the first fixed version above the installed one. Withdrawn advisories count for nothing;
    an advisory for Debian:11 does not touch a Debian 12 image, one for plain `Debian` touches every release."""
    by_name: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for ecosystem, name, version in packages:  # an export holds thousands of advisories; an image, ~1000 packages
        by_name.setdefault(package_key(ecosystem, name), []).append((ecosystem, name, version))
    found = []
    for advisory in advisories:
        if advisory.withdrawn:
            continue
        for affected in advisory.affected:
            for ecosystem, name, version in by_name.get(package_key(affected.ecosystem, affected.name), ()):
                if not ecosystem_matches(affected.ecosystem, ecosystem):
                    continue
                hit = affects(affected, ecosystem, version)
                if hit is not None:
                    found.append(Finding(advisory, ecosystem, name, version, hit[1]))
    return found


def ecosystem_matches(advised: str, installed: str) -> bool:
    if advised == installed or advised.startswith(f"{installed}:"):  # Ubuntu:22.04:LTS for an Ubuntu 22.04 image
        return True
    return ":" not in advised and family(installed) == advised


def affects(affected: Affected, ecosystem: str, version: str) -> tuple[bool, str | None] | None:
    """(True, fixed version or None) when `version` is affected: listed in `versions`, or inside an ECOSYSTEM or SEMVER
    range (OSV's evaluation: events in version order, introduced opening, fixed and last_affected closing); None when
    it is not, or when its version cannot be ordered in its ecosystem (PEP 440 refuses it)."""
    if version in affected.versions:
        return True, next_fixed(affected, ecosystem, version)
    try:
        for item in affected.ranges:
            if item.kind != "GIT" and in_range(item, ecosystem, version):
                return True, next_fixed(affected, ecosystem, version)
    except InvalidVersion:
        return None
    return None


def in_range(item: Range, ecosystem: str, version: str) -> bool:
    def order(event: tuple[str, str]) -> tuple[int, object]:
        return (0, "") if event[1] == "0" else (1, cmp_to_key(lambda a, b: compare(ecosystem, a, b))(event[1]))

    affected = False
    for kind, at in sorted((e for e in item.events if e[0] != "limit"), key=order):
        if kind == "introduced":
            if at == "0" or compare(ecosystem, version, at) >= 0:
                affected = True
        elif kind == "fixed":
            if compare(ecosystem, version, at) >= 0:
                affected = False
        elif kind == "last_affected" and compare(ecosystem, version, at) > 0:
            affected = False
    return affected


def next_fixed(affected: Affected, ecosystem: str, version: str) -> str | None:
    fixes = []
    for item in affected.ranges:
        for kind, at in item.events:
            if kind == "fixed" and item.kind != "GIT":
                try:
                    if compare(ecosystem, at, version) > 0:
                        fixes.append(at)
                except InvalidVersion:
                    continue
    return min(fixes, key=cmp_to_key(lambda a, b: compare(ecosystem, a, b))) if fixes else None
