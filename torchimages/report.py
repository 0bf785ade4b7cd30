"""The build report: one record per image, as JSON and as Markdown. Later stages add to the records.

A report read back (push, `build.py manifest`) is input: a report can be edited, or come from another run's artifacts.
Every value that later names a tag, a digest, a path or a file is checked by the grammar's rule for it
(torchimages/input/grammar.py) when the report is loaded, and the first problem is one line naming the report, the
image and the field."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from .errors import Problem, UserError, visible
from .files import atomic_write, load
from .input.grammar import (
    DEFAULT_PLATFORM,
    VARIANTS,
    audit_problem,
    control_problem,
    digest_problem,
    engine_floor_problem,
    entry_name_problem,
    image_name_problem,
    image_platform_problem,
    image_reference_problem,
    locked_wheels_problem,
    materials_problem,
    number_problem,
    optional_problem,
    platform_problem,
    relative_path_problem,
    release_problem,
    runs_on_key_problem,
    runs_on_value_problem,
    sha256_problem,
    tag_part_problem,
    text_problem,
    version_key_problem,
    version_value_problem,
)


@dataclass
class SmokeStage:
    """The smoke suite's result for one image, as the report keeps it."""

    passed: int
    failed: int
    skipped: int
    skipped_no_gpu: int
    seconds: float
    gpus: int
    tiers: dict[str, dict[str, int]]
    error: str | None
    image_id: str | None = None  # the image the suite ran: publish pushes this one
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The one definition of a passed suite, read by the exit policy, publish, the manifest and the views."""
        return self.error is None and self.failed == 0 and self.passed > 0

    def cell(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped ({self.skipped_no_gpu} no GPU)"


@dataclass
class PushStage:
    """One image's push: where to, the digest the registry confirmed, or why not."""

    reference: str  # repository:tag
    digest: str | None = None
    size: int | None = None
    pushed: bool = False  # False when the registry already held this exact image
    error: str | None = None
    attempts: int = 0
    candidate: str | None = None  # pushed under a candidate tag (RELEASE-CANDIDATE-IMAGE), for `promote`
    min_docker: str | None = None  # the oldest Docker engine that pulls it (zstd layers: 23.0); None: any supported

    @property
    def ok(self) -> bool:
        return self.digest is not None and self.error is None


@dataclass
class SbomStage:
    """The image's SBOM (SPDX JSON by syft): where it is, its hash, how many packages of each kind it lists."""

    path: str
    sha256: str
    image_id: str
    packages: dict[str, int]  # purl type (deb, pypi, ...) -> count


@dataclass
class AuditStage:
    """The image's packages against known advisories (verify/auditstage.py): passed, failed, or not checked (no
    advisory source); each finding (grammar.FINDING_FIELDS) and each line that failed it."""

    status: str
    fail_on: str
    source: str | None
    findings: list[dict[str, Any]]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def cell(self) -> str:
        """In words, for the summary and the release manifest's table: the status alone where nothing was checked."""
        allowed = sum(1 for finding in self.findings if finding["allowed_by"])
        return (f"{self.status} at {self.fail_on}: {len(self.findings)} advisories, {allowed} allowed" if self.source
                else self.status)


STAGES = {"smoke": SmokeStage, "push": PushStage, "sbom": SbomStage, "audit": AuditStage}
BUILT = ("built", "not built here")  # results of an image that exists: built in this run, or only tested in it


@dataclass
class ImageRecord:
    image: str
    entry: str
    variant: str
    tag: str
    result: str  # built, failed, skipped, cancelled; "not built here" for an image only tested in this run
    versions: dict[str, str | None]
    image_id: str | None = None
    size_bytes: int | None = None
    adds_bytes: int | None = None  # a variant's size over its base
    floor_bytes: int | None = None  # the OS base plus what was installed, each file once (torchimages.build.sizes)
    layers: int | None = None
    build_seconds: float | None = None
    error: str | None = None
    log: str | None = None
    smoke: SmokeStage | None = None
    push: PushStage | None = None
    sbom: SbomStage | None = None
    audit: AuditStage | None = None  # its packages against known advisories, after its suite
    bench: dict[str, Any] | None = None  # the benchmark's rows as it printed them, or {"error": ...}
    over_budget: str | None = None  # why its size is over the budget (torchimages.build.budget), or None
    content_digest: str | None = None  # what its build read, release aside (torchimages.build.cache)
    reused: str | None = None  # the previous release's image it was stamped from, when its content was unchanged
    builder: str | None = None  # what built it in this run (buildjobs.Builder.describe), None when not built here
    platform: str = DEFAULT_PLATFORM  # what it was built for: linux/amd64, linux/arm64
    runs_on: dict[str, str] | None = None  # what a host needs (specs.ImageSpec.runs_on): driver, GPU generations
    materials: dict[str, Any] | None = None  # what its build read, by digest (build.jobs BuildRunner._materials)
    wheels: list[str] | None = None  # the wheel lock: each wheel pip installed, a line of torchimages.wheellock

    @property
    def smoke_passed(self) -> bool:
        """Built (or tested here) and its suite passed: what may be pushed."""
        return self.result in BUILT and self.smoke is not None and self.smoke.ok

    @property
    def releasable(self) -> bool:
        """What may be pushed: its suite passed, it is within its size budget, its audit did not fail."""
        return self.smoke_passed and not self.over_budget and self.audit_ok

    @property
    def audit_ok(self) -> bool:
        return self.audit is None or self.audit.ok

    @property
    def ok(self) -> bool:
        """The exit policy: the image exists, its suite, if it ran, passed, it is within its size budget and its
        audit, if it ran, did not fail."""
        return (self.result in BUILT and (self.smoke is None or self.smoke.ok) and not self.over_budget
                and self.audit_ok)

    def to_dict(self) -> dict[str, Any]:
        """JSON shape: the stages under "stages", as every report has held them."""
        data = asdict(self)
        stages = {name: data.pop(name) for name in ("smoke", "push", "sbom", "audit", "bench")}
        data["stages"] = {name: value for name, value in stages.items() if value is not None}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImageRecord:
        data = dict(data)
        stages = data.pop("stages", None) or {}
        if not isinstance(stages, dict):
            raise TypeError("'stages' must be a mapping")
        typed = {name: STAGES[name](**stages[name]) for name in STAGES if stages.get(name) is not None}
        return cls(**data, **typed, bench=stages.get("bench"))


@dataclass
class Report:
    release: str
    matrix: str
    images: list[ImageRecord] = field(default_factory=list)
    folder: Path | None = field(default=None, compare=False, repr=False)  # where it was read or written: SBOMs are beside

    def sbom_folder(self, default: Path) -> Path:
        """Where this report's SBOMs go: RELEASE.sbom/ beside the report."""
        return (self.folder or default) / f"{self.release}.sbom"

    @classmethod
    def load(cls, path: Path) -> Report:
        """A report this tool wrote; anything else is a UserError naming the file."""
        data = load(path, "a build report")  # size, kind of file, UTF-8 and JSON checked there
        try:
            images = [ImageRecord.from_dict(record) for record in data.pop("images")]  # type: ignore[union-attr]
            report = cls(images=images, folder=path.parent, **data)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise UserError(f"{path}: not a build report written by this tool ({type(exc).__name__}: "
                            f"{visible(str(exc))[:200]})") from None
        check_report(report, path)
        return report

    def to_json(self) -> str:
        data = {"release": self.release, "matrix": self.matrix, "images": [r.to_dict() for r in self.images]}
        return json.dumps(data, indent=2) + "\n"

    def to_markdown(self) -> str:
        lines = [f"# Build report: release {self.release}", "", f"Matrix: `{self.matrix}`", "",
                 "| image | tag | result | size | floor | size/floor | adds | layers | seconds | smoke | torch | cuda | cudnn "
                 "| python |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.images:
            v = r.versions
            lines.append(f"| {r.image} | `{r.tag}` | {r.result} | {human(r.size_bytes)} | {human(r.floor_bytes)} | "
                         f"{ratio(r.size_bytes, r.floor_bytes)} | {human(r.adds_bytes)} | "
                         f"{r.layers or '-'} | {seconds(r.build_seconds)} | {smoke_cell(r)} | {v.get('torch')} | "
                         f"{v.get('cuda') or '-'} | "
                         f"{v.get('cudnn') or '-'} | {v.get('python')} |")
        tiered = [r for r in self.images if r.smoke and any(any(counts.values()) for counts in r.smoke.tiers.values())]
        if tiered:
            lines += ["", "## GPU checks", "",
                      "GPU-ready checks (CUDA libraries load, versions read from them, compiled GPU architectures, one "
                      "copy of each library) are proven without a GPU; the others need one and skip without it.", "",
                      "| image | proven without a GPU | need a GPU |", "|---|---|---|"]
            for r in tiered:
                tiers = r.smoke.tiers
                lines.append(f"| {r.image} | {tier_cell(tiers.get('gpu-ready'))} | {tier_cell(tiers.get('needs-gpu'))} |")
        audited = [r for r in self.images if r.audit and r.audit.findings]
        if audited:
            lines += ["", "## Known vulnerabilities", "", "| image | advisory | package | installed | fixed in | severity "
                      "| allowed by |", "|---|---|---|---|---|---|---|"]
            lines += [finding_row(r.image, finding) for r in audited for finding in r.audit.findings]  # type: ignore[union-attr]
        failures = [r for r in self.images if r.error]
        if failures:
            lines += ["", "## Problems", ""] + [f"- **{r.image}**: {r.error}" for r in failures]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> tuple[Path, Path]:
        """Write JSON to `path` and Markdown beside it, each atomically."""
        markdown = path.with_suffix(".md")
        self.folder = path.parent
        atomic_write(path, self.to_json())
        atomic_write(markdown, self.to_markdown())
        return path, markdown

    def summary(self) -> Table:
        table = Table(title=f"release {self.release}")
        audited = any(r.audit for r in self.images)
        for column in ("image", "tag", "result", "size", "seconds", "smoke", *(["audit"] if audited else [])):
            table.add_column(column, overflow="fold")
        for r in self.images:
            table.add_row(r.image, r.tag, r.result, human(r.size_bytes), seconds(r.build_seconds), smoke_cell(r),
                          *([r.audit.cell() if r.audit else "-"] if audited else []))
        return table


def finding_row(image: str, finding: dict[str, Any]) -> str:
    """A finding as a table row; its values passed the grammar (one line of visible text) but may hold '|'."""
    cells = [image, ", ".join([finding["id"], *finding["aliases"]]), f"{finding['package']} ({finding['ecosystem']})",
             finding["installed"], finding["fixed"] or "no fix", finding["severity"] or "unknown",
             finding["allowed_by"] or "-"]
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"


def smoke_cell(record: ImageRecord) -> str:
    return record.smoke.cell() if record.smoke else "-"


def ratio(size: int | None, floor: int | None) -> str:
    return f"{size / floor:.3f}" if size and floor else "-"


def tier_cell(counts: dict[str, int] | None) -> str:
    if not counts or not any(counts.values()):
        return "-"
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def human(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1000
    return f"{size} B"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


NUMBERS = ("size_bytes", "adds_bytes", "floor_bytes", "layers")


def check_report(report: Report, path: Path) -> None:
    def refuse(where: str | None, field: str, message: str) -> None:
        raise UserError([Problem(str(path), None, where, field, message)])

    for key, value in (("release", report.release), ("matrix", report.matrix)):
        if not isinstance(value, str):
            refuse(None, key, "must be a string")
    why = release_problem(report.release)
    if why:
        refuse(None, "release", why)
    names = []
    for index, record in enumerate(report.images):
        name = record.image if isinstance(record.image, str) else repr(record.image)
        where = f"images[{index}] ({visible(name)})"
        problem = record_problem(record)
        if problem:
            refuse(where, *problem)
        names.append(record.image)
    if len(set(names)) != len(names):
        refuse(None, "images", f"names {next(n for n in names if names.count(n) > 1)!r} twice; each image once")


def record_problem(record: ImageRecord) -> tuple[str, str] | None:
    """(field, why) for the first value of a record that is refused, or None."""
    texts = {"image": record.image, "entry": record.entry, "variant": record.variant, "tag": record.tag,
             "result": record.result}
    for key, value in texts.items():
        if not isinstance(value, str):
            return key, "must be a string"
    checks = [
        ("image", image_name_problem(record.image)),
        ("entry", entry_name_problem(record.entry)),
        ("variant", None if record.variant in ("base", *VARIANTS) else f"{visible(record.variant)!r} is not a variant"),
        ("platform", text_problem(record.platform, platform_problem) or image_platform_problem(record.image, record.platform)),
        ("tag", control_problem(record.tag) or image_reference_problem(record.tag)),
        ("image_id", optional_problem(record.image_id, digest_problem)),
        ("content_digest", optional_problem(record.content_digest, digest_problem)),
    ]
    checks += [(key, number_problem(getattr(record, key))) for key in NUMBERS]
    if not isinstance(record.versions, dict):
        checks.append(("versions", "must be a JSON object"))
    else:
        checks += [("versions", version_key_problem(str(key)) or version_value_problem(value))
                   for key, value in record.versions.items()]
    if record.runs_on is not None and not isinstance(record.runs_on, dict):
        checks.append(("runs_on", "must be a JSON object"))
    elif record.runs_on is not None:
        checks += [("runs_on", runs_on_key_problem(str(key)) or runs_on_value_problem(value))
                   for key, value in record.runs_on.items()]
    if record.materials is not None:
        checks.append(("materials", materials_problem(record.materials)))
    if record.wheels is not None:
        checks.append(("wheels", locked_wheels_problem(record.wheels)))
    if record.smoke is not None:
        checks.append(("stages.smoke.image_id", optional_problem(record.smoke.image_id, digest_problem)))
        checks += [(f"stages.smoke.{key}", number_problem(getattr(record.smoke, key)))
                   for key in ("passed", "failed", "skipped", "skipped_no_gpu")]
    if record.push is not None:
        push = record.push
        checks += [("stages.push.reference", text_problem(push.reference, image_reference_problem)),
                   ("stages.push.digest", optional_problem(push.digest, digest_problem)),
                   ("stages.push.candidate", optional_problem(push.candidate, tag_part_problem)),
                   ("stages.push.min_docker", optional_problem(push.min_docker, engine_floor_problem))]
    if record.audit is not None:
        checks.append(("stages.audit", audit_problem(asdict(record.audit))))
    if record.sbom is not None:
        sbom = record.sbom
        checks += [("stages.sbom.path", text_problem(sbom.path, relative_path_problem)),
                   ("stages.sbom.sha256", text_problem(sbom.sha256, sha256_problem)),
                   ("stages.sbom.image_id", text_problem(sbom.image_id, digest_problem))]
    return next(((key, why) for key, why in checks if why), None)
