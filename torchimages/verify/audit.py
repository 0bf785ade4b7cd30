"""`build.py audit`: each built image's Python and Debian packages matched against OSV advisories (verify/osv.py),
with an allowlist of accepted ones (`vulnerabilities.yaml`), and a gate: any advisory with a published fix, at or
above --fail-on, that no allowlist entry covers fails the audit, naming each; so does an expired entry.

The packages are read from the image itself, in a container started without a command: every Python distribution
its `python` sees (importlib.metadata) and every Debian package by its source package and version, which is what
Debian's and Ubuntu's advisories name (openssl, glibc; not libssl3, libc6). An advisory with no severity the audit can
read counts as reaching every --fail-on level: not knowing is not low. Without an advisory source the audit says
"not checked", never "clean" (--require-audit makes that a failure).
"""

from __future__ import annotations

import datetime
import fnmatch
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ..errors import UserError, visible
from ..files import atomic_write
from ..input.grammar import SEVERITIES, control_problem, short_line_problem
from . import osv

if TYPE_CHECKING:  # the Docker SDK loads when an image is read, not when advisories are
    from ..engine import Engine

ALLOWLIST_FIELDS = ("id", "images", "packages", "reason", "expires")
# What runs in the image: its OS, its Debian packages by source, the distributions its python imports
PACKAGES_SCRIPT = r"""
. /etc/os-release 2>/dev/null || true
printf 'os\t%s\t%s\n' "${ID:-}" "${VERSION_ID:-}"
if command -v dpkg-query >/dev/null 2>&1; then
    dpkg-query -W -f='deb\t${source:Package}\t${source:Version}\n'
fi
python -c 'import importlib.metadata as m
for d in m.distributions():
    print("pypi\t" + (d.metadata["Name"] or "") + "\t" + (d.version or ""))' 2>/dev/null || true
"""


@dataclass(frozen=True)
class AllowEntry:
    id: str
    images: str
    packages: str
    reason: str
    expires: datetime.date
    where: str

    def covers(self, image: str, finding: osv.Finding) -> bool:
        ids = {finding.advisory.id, *finding.advisory.aliases}
        return (self.id in ids and fnmatch.fnmatchcase(image, self.images)
                and fnmatch.fnmatchcase(finding.package.lower(), self.packages.lower()))


def read_allowlist(path: Path) -> list[AllowEntry]:
    """vulnerabilities.yaml: a list of entries, each an advisory id (or alias), optional image and package globs, the
    reason it is accepted and the date it expires; anything else is one UserError naming the file, entry and field."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: not a readable YAML allowlist: {visible(str(exc)).splitlines()[0][:200]}") from None
    if not isinstance(data, list):
        raise UserError(f"{path}: must be a list of entries (id, reason, expires; images, packages optional)")
    entries = []
    for index, item in enumerate(data):
        where = f"{path}: entries[{index}]"
        if not isinstance(item, dict) or set(item) - set(ALLOWLIST_FIELDS):
            raise UserError(f"{where}: must be an object of {', '.join(ALLOWLIST_FIELDS)}")
        texts = {}
        for key, default in (("id", None), ("images", "*"), ("packages", "*"), ("reason", None)):
            value = item.get(key, default)
            if not isinstance(value, str) or not value.strip() or short_line_problem(value, limit=300):
                raise UserError(f"{where}: field {key!r} must be one line of text" +
                                (" (why the advisory is accepted)" if key == "reason" else ""))
            texts[key] = value
        expires = expiry(item.get("expires"))
        if expires is None:
            raise UserError(f"{where}: field 'expires' must be a date, YYYY-MM-DD")
        entries.append(AllowEntry(texts["id"], texts["images"], texts["packages"], texts["reason"], expires, where))
    return entries


def expiry(value: object) -> datetime.date | None:
    """YAML reads `2027-01-31` as a date; quoted, it is text in the same form."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value) if len(value) == 10 else None
        except ValueError:
            return None
    return None


def parse_packages(output: str, image: str) -> list[tuple[str, str, str]]:
    """The probe's lines as (ecosystem, name, version); its answer is input: a line that is not one of its three
    kinds is refused, naming the image."""
    ecosystem, packages = None, set()
    for line in output.splitlines():
        if not line.strip():
            continue
        kind, *fields = line.split("\t")
        if control_problem(line.replace("\t", " ")) or len(fields) != 2 or kind not in ("os", "deb", "pypi"):
            raise UserError(f"{image}: the package listing printed {visible(line)[:80]!r}, not what it lists")
        if kind == "os":
            ecosystem = os_ecosystem(*fields)
        elif fields[0] and fields[1]:
            packages.add((kind, fields[0], fields[1]))
    return sorted({("PyPI" if kind == "pypi" else ecosystem or "Debian", name, version)
                   for kind, name, version in packages if kind == "pypi" or ecosystem})


def os_ecosystem(os_id: str, version_id: str) -> str | None:
    """Debian 12 -> Debian:12, Ubuntu 22.04 -> Ubuntu:22.04 (OSV's names); None for an OS without dpkg advisories."""
    names = {"debian": "Debian", "ubuntu": "Ubuntu"}
    if os_id not in names:
        return None
    return f"{names[os_id]}:{version_id.split('.', maxsplit=1)[0] if os_id == 'debian' else version_id}"


@dataclass
class ImageAudit:
    image: str
    findings: list[osv.Finding] = field(default_factory=list)
    covered: dict[int, AllowEntry] = field(default_factory=dict)  # index in findings -> the entry that covers it

    def failing(self, fail_on: str) -> list[osv.Finding]:
        """What fails the gate: a published fix, a severity at or above `fail_on` (or none readable), no entry."""
        return [finding for index, finding in enumerate(self.findings)
                if index not in self.covered and finding.fixed and reaches(finding.advisory.severity, fail_on)]


def reaches(severity: str | None, fail_on: str) -> bool:
    return severity is None or SEVERITIES.index(severity) >= SEVERITIES.index(fail_on)


@dataclass
class AuditResult:
    images: list[ImageAudit]
    expired: list[AllowEntry]
    unused: list[AllowEntry]
    fail_on: str

    @property
    def failed(self) -> bool:
        return bool(self.expired) or any(image.failing(self.fail_on) for image in self.images)


def audit(packages: dict[str, list[tuple[str, str, str]]], advisories: list[osv.Advisory],
          allowlist: Iterable[AllowEntry], *, fail_on: str, today: datetime.date) -> AuditResult:
    """Each image's findings, which allowlist entry covers which, the expired entries and those that covered nothing."""
    entries = list(allowlist)
    expired = [entry for entry in entries if entry.expires < today]
    live = [entry for entry in entries if entry.expires >= today]
    used: set[int] = set()
    images = []
    for image, installed in packages.items():
        result = ImageAudit(image, osv.findings(advisories, installed))
        for index, finding in enumerate(result.findings):
            for number, entry in enumerate(live):
                if entry.covers(image, finding):
                    result.covered[index] = entry
                    used.add(number)
                    break
        images.append(result)
    return AuditResult(images, expired, [entry for number, entry in enumerate(live) if number not in used], fail_on)


def markdown(result: AuditResult) -> str:
    lines = ["| image | advisory | package | installed | fixed in | severity | allowed by |", "|---|---|---|---|---|---|---|"]
    for image in result.images:
        for index, finding in enumerate(image.findings):
            advisory = finding.advisory
            names = ", ".join([advisory.id, *advisory.aliases])
            entry = image.covered.get(index)
            lines.append(f"| {image.image} | {names} | {finding.package} ({finding.ecosystem}) | {finding.installed} | "
                         f"{finding.fixed or 'no fix'} | {advisory.severity or 'unknown'} | "
                         f"{f'{entry.where}: {entry.reason} (until {entry.expires})' if entry else '-'} |")
    return "\n".join(lines) + "\n"


def as_json(result: AuditResult) -> dict[str, object]:
    return {"fail_on": result.fail_on, "failed": result.failed,
            "images": [{"image": image.image, "findings": finding_records(image)} for image in result.images],
            "expired_entries": [entry.id for entry in result.expired], "unused_entries": [entry.id for entry in result.unused]}


def finding_records(image: ImageAudit) -> list[dict[str, object]]:
    """Each finding as the report, the manifest and the audit's JSON record it (grammar.FINDING_FIELDS)."""
    return [{"id": f.advisory.id, "aliases": list(f.advisory.aliases), "ecosystem": f.ecosystem, "package": f.package,
             "installed": f.installed, "fixed": f.fixed, "severity": f.advisory.severity,
             "allowed_by": image.covered[index].id if index in image.covered else None}
            for index, f in enumerate(image.findings)]


def problems(result: AuditResult) -> list[str]:
    """The lines that fail the gate, one each: every expired entry once, then each image's failing findings."""
    return [expired_line(entry) for entry in result.expired] + [
        line for image in result.images for line in failing_lines(image, result.fail_on)]


def image_problems(result: AuditResult, image: ImageAudit) -> list[str]:
    """What fails one image: the expired entries its name matches, its failing findings."""
    return ([expired_line(entry) for entry in result.expired if fnmatch.fnmatchcase(image.image, entry.images)]
            + failing_lines(image, result.fail_on))


def expired_line(entry: AllowEntry) -> str:
    return f"{entry.where}: {entry.id} expired on {entry.expires} ({entry.reason}): review it, or the fix"


def failing_lines(image: ImageAudit, fail_on: str) -> list[str]:
    return [f"{image.image}: {finding.advisory.id} ({', '.join(finding.advisory.aliases) or 'no alias'}): "
            f"{finding.package} {finding.installed} is affected, fixed in {finding.fixed}, severity "
            f"{finding.advisory.severity or 'unknown'}" for finding in image.failing(fail_on)]


def write_outputs(result: AuditResult, out: Path) -> tuple[Path, Path]:
    """OUT (JSON) and OUT's .md beside it (OUT's folder made)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    markdown_path = out.with_suffix(".md")
    atomic_write(out, json.dumps(as_json(result), indent=1) + "\n")
    atomic_write(markdown_path, markdown(result))
    return out, markdown_path


def image_packages(tags: dict[str, str], engine: Engine | None = None) -> dict[str, list[tuple[str, str, str]]]:
    """Each image's packages (image -> its tag or ID on this engine), read in a container of it."""
    from ..containers import Containers
    from ..engine import Engine

    engine = engine or Engine()
    containers = Containers(engine)
    listed = {}
    for image, tag in tags.items():  # each container removed as it ends (run_once)
        if engine.image_id(tag) is None:
            raise UserError(f"{image}: {tag} is not on this engine: build it first (build.py build --tag ...)")
        code, output = containers.run_once(tag, entrypoint=["sh", "-c", PACKAGES_SCRIPT], timeout=300, stderr=False)
        if code != 0:
            raise UserError(f"{image}: listing its packages failed (exit {code}): {visible(output[-200:])}")
        listed[image] = parse_packages(output, image)
    return listed
