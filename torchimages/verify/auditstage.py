"""The audit stage: each tested image's packages against known advisories (verify/audit.py), after the smoke suite and
before any push. Its inputs (the advisories, the allowlist) are read and checked before anything is built; each
image's result is recorded on its report record (stages.audit), which the push and the release manifest carry, and
the audit's JSON and Markdown (results_path: an audit/ folder beside the report, out of the way of a glob over reports)
hold every finding.

A failed audit fails the image (report.ImageRecord.ok) and stops the release before its first push: the gate is the
release's, not one image's. Without an advisory source every image is "not checked", never clean; with
--require-audit that fails it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..report import AuditStage, Report
from . import audit, osv, osvservice

if TYPE_CHECKING:
    from ..engine import Engine


@dataclass(frozen=True)
class AuditInputs:
    """What an audit reads, read before any build: the advisories of a folder or zip, or the OSV query service to ask
    (None, None: no source), the allowlist's entries, the level that fails and whether "not checked" fails."""

    advisories: tuple[osv.Advisory, ...] | None
    source: str | None
    entries: tuple[audit.AllowEntry, ...]
    fail_on: str = "HIGH"
    require: bool = False
    service: str | None = None  # an OSV query service's URL, asked for the images' packages

    @classmethod
    def read(cls, advisories: str | Path | None, allowlist: Path | None, *, fail_on: str = "HIGH",
             require: bool = False) -> AuditInputs:
        """The files given, each checked as input (one UserError naming the file and the entry); a URL is the
        service, asked once the images' packages are known."""
        entries = tuple(audit.read_allowlist(allowlist)) if allowlist else ()
        if isinstance(advisories, str) and advisories.startswith(("https://", "http://")):
            return cls(None, advisories, entries, fail_on.upper(), require, service=advisories)
        read = tuple(osv.read(Path(advisories))) if advisories else None
        return cls(read, str(advisories) if advisories else None, entries, fail_on.upper(), require)

    def not_checked(self) -> AuditStage:
        problems = ["not checked: no advisory source answered, and --require-audit"] if self.require else []
        return AuditStage("failed" if self.require else "not checked", self.fail_on, None, [], problems)


NO_AUDIT = AuditInputs(None, None, ())


def results_path(report_path: Path) -> Path:
    """Where a run's audit results go: audit/REPORT.json (and .md) beside the report, not among the reports
    themselves, which `build.py manifest reports/*.json` merges (release.yml)."""
    return report_path.parent / "audit" / report_path.name


def run(tags: dict[str, str], inputs: AuditInputs, *, report: Report | None, out: Path, today: datetime.date,
        say: Callable[[str], None], engine: Engine | None = None, ask: osvservice.Ask | None = None) -> bool:
    """Audit each image (image -> its tag on this engine); print each result and what fails it, record it on the
    report's record of that image, write `out` (JSON) and its .md beside it. Whether the gate passed."""
    if inputs.advisories is None and inputs.service is None:
        return not_checked(tags, inputs, report, say, "no advisory source given (--advisories DIR|ZIP|URL)")
    packages = audit.image_packages(tags, engine)
    known = inputs.advisories
    if known is None:
        try:
            known = tuple(osvservice.advisories(str(inputs.service), [p for listed in packages.values() for p in listed],
                                                ask))
        except osvservice.NoAnswer as exc:
            return not_checked(tags, inputs, report, say, f"the OSV service did not answer ({exc})")
    result = audit.audit(packages, known, inputs.entries, fail_on=inputs.fail_on, today=today)
    for image in result.images:
        say(f"audit: {image.image}: {len(image.findings)} advisories affect its packages, "
            f"{len(image.failing(result.fail_on))} fail at {result.fail_on} and above")
        for index, entry in sorted(image.covered.items()):
            say(f"audit: {image.image}: {image.findings[index].advisory.id} in {image.findings[index].package} allowed "
                f"by {entry.where}: {entry.reason} (until {entry.expires})")
    for entry in result.unused:
        say(f"warning: {entry.where}: {entry.id} matched nothing in these images (remove it once it is not needed)")
    json_path, markdown_path = audit.write_outputs(result, out)
    say(f"audit: {len(known)} advisories from {inputs.source}; results: {json_path} ({markdown_path.name})")
    record(report, {image.image: stage_of(result, image, inputs.source) for image in result.images})
    lines = audit.problems(result)
    for line in lines:
        say(f"error: {line}")
    return not lines


def not_checked(tags: dict[str, str], inputs: AuditInputs, report: Report | None, say: Callable[[str], None],
                why: str) -> bool:
    say(f"audit: not checked: {why}; {len(tags)} images unaudited")
    record(report, dict.fromkeys(tags, inputs.not_checked()))
    if inputs.require:
        say("error: --require-audit: no advisory source answered, so nothing was checked")
    return not inputs.require


def stage_of(result: audit.AuditResult, image: audit.ImageAudit, source: str | None) -> AuditStage:
    problems = audit.image_problems(result, image)
    return AuditStage("failed" if problems else "passed", result.fail_on, source, audit.finding_records(image), problems)


def record(report: Report | None, stages: dict[str, AuditStage]) -> None:
    """Each image's audit on its record; an image the report does not hold (audited on its own) is not added."""
    for item in report.images if report else []:
        if item.image in stages:
            item.audit = stages[item.image]
