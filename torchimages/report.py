"""The build report: one record per image, as JSON and as Markdown. Later stages add to the records."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from .errors import UserError, visible
from .input.matrix import DEFAULT_PLATFORM


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


STAGES = {"smoke": SmokeStage, "push": PushStage, "sbom": SbomStage}
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
    bench: dict[str, Any] | None = None  # the benchmark's rows as it printed them, or {"error": ...}
    over_budget: str | None = None  # why its size is over the budget (torchimages.build.budget), or None
    content_digest: str | None = None  # what its build read, release aside (torchimages.build.cache)
    reused: str | None = None  # the previous release's image it was stamped from, when its content was unchanged
    builder: str | None = None  # what built it in this run (buildjobs.Builder.describe), None when not built here
    platform: str = DEFAULT_PLATFORM  # what it was built for: linux/amd64, linux/arm64
    runs_on: dict[str, str] | None = None  # what a host needs (specs.ImageSpec.runs_on): driver, GPU generations

    @property
    def smoke_passed(self) -> bool:
        """Built (or tested here) and its suite passed: what may be pushed."""
        return self.result in BUILT and self.smoke is not None and self.smoke.ok

    @property
    def releasable(self) -> bool:
        """What may be pushed: its suite passed and it is within its size budget."""
        return self.smoke_passed and not self.over_budget

    @property
    def ok(self) -> bool:
        """The exit policy: the image exists, its suite, if it ran, passed, and it is within its size budget."""
        return self.result in BUILT and (self.smoke is None or self.smoke.ok) and not self.over_budget

    def to_dict(self) -> dict[str, Any]:
        """JSON shape: the stages under "stages", as every report has held them."""
        data = asdict(self)
        stages = {name: data.pop(name) for name in ("smoke", "push", "sbom", "bench")}
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
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            images = [ImageRecord.from_dict(record) for record in data.pop("images")]
            report = cls(images=images, folder=path.parent, **data)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise UserError(f"{path}: not a build report written by this tool ({type(exc).__name__}: "
                            f"{visible(str(exc))[:200]})") from None
        from .reportcheck import check_report  # the grammar lives with the specs; this module stays import-light

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
        for column in ("image", "tag", "result", "size", "seconds", "smoke"):
            table.add_column(column, overflow="fold")
        for r in self.images:
            table.add_row(r.image, r.tag, r.result, human(r.size_bytes), seconds(r.build_seconds), smoke_cell(r))
        return table


def smoke_cell(record: ImageRecord) -> str:
    return record.smoke.cell() if record.smoke else "-"


def ratio(size: int | None, floor: int | None) -> str:
    return f"{size / floor:.3f}" if size and floor else "-"


def tier_cell(counts: dict[str, int] | None) -> str:
    if not counts or not any(counts.values()):
        return "-"
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def atomic_write(path: Path, text: str) -> None:
    """Write through a temporary sibling, so readers see the old file or the new one; the temporary file never stays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8", suffix=".tmp") as tmp:
        temporary = Path(tmp.name)
    try:
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


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
