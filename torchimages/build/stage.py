"""The build stage: turn rendered contexts into images and a report."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import wheellock
from ..engine import BuildOutcome, Engine, failure_hint, short_error
from ..errors import UserError
from ..events import EventSink
from ..input.specs import Plan
from ..progress import LogFiles
from ..report import ImageRecord, Report
from ..workspace import Workspace
from . import jobs as buildjobs
from . import released
from .budget import Budget
from .cache import CacheSources
from .classic import ClassicBuilder
from .inputs import BuildInputs
from .jobs import Builder, BuildJob, BuildRunner, Selection
from .released import FromRelease
from .sizes import FloorMeter

if TYPE_CHECKING:
    from ..registry import Credentials

STEP_SHOWN = 200  # characters of the failed step a failure message shows


@dataclass(frozen=True)
class BuildOptions:
    release: str
    images_dir: Path
    selection: Selection = field(default_factory=Selection)
    jobs: int = 1
    no_cache: bool = False
    plain: bool = False
    report: Path | None = None
    logs: Path | None = None
    inputs: BuildInputs = field(default_factory=BuildInputs)
    budget: Budget = field(default_factory=Budget)
    cache: CacheSources = field(default_factory=CacheSources)
    # (registry host, auth config): credentials for pulling cache sources from the registry pushed to, and no other
    registry_auth: tuple[str, dict[str, str]] | None = None
    # classic (the Docker SDK), buildkit (a docker CLI; torchimages.build.buildkit), or None: the engine's own default
    builder: str | None = None
    buildx_builder: str | None = None  # a named buildx builder instance for BuildKit builds; None: buildx's current
    compression: str = "gzip"  # the layers' (--compression): zstd from BuildKit on the containerd image store only
    released: FromRelease | None = None  # --from-release: the release whose bases and wheel locks the build takes

    @property
    def report_path(self) -> Path:
        return Workspace.report(self.release, self.report)

    @property
    def logs_dir(self) -> Path:
        return Workspace.logs(self.release, self.logs)

    def pulling_as(self, repository: str, credentials: Credentials | None) -> BuildOptions:
        """These options with cache sources on `repository`'s registry pulled as `credentials` (other registries get
        what `docker login` stored)."""
        if credentials is None:
            return self
        return replace(self, registry_auth=(repository.split("/", 1)[0], credentials.auth_config()))


def select(plan: Plan, options: BuildOptions) -> list[BuildJob]:
    return buildjobs.select(plan, options.release, options.images_dir, options.selection,
                            base_for=options.inputs.base_for)


def describe_plan(jobs: list[BuildJob]) -> list[str]:
    """The --dry-run text: build order, tags, dependencies and context folders."""
    lines = []
    for number, job in enumerate(jobs, 1):
        after = f"after {job.depends_on}" if job.depends_on else f"FROM {job.base_image}"
        lines.append(f"{number:3d}. {job.image}\n     tag:     {job.tag}\n     for:     {job.platform}\n"
                     f"     order:   {after}\n     context: {job.context}")
    return lines


def check_contexts(jobs: list[BuildJob], release: str) -> None:
    missing = [str(job.context) for job in jobs if not (job.context / "Dockerfile").is_file()]
    if missing:
        raise UserError(f"no rendered context at {', '.join(missing[:3])}: run python build.py render --tag {release}")


def build(plan: Plan, options: BuildOptions, engine: Engine, emit: EventSink, logs: LogFiles, *,
          builder: Builder) -> Report:
    """Build the selected images with `builder` (builder_of), emitting their events; the report records every one,
    built or not."""
    jobs = select(plan, options)  # options.inputs were checked when the options were made (cli.build_options_from)
    runner = BuildRunner(engine, options.inputs, emit, jobs=options.jobs, cache=options.cache,
                         registry_auth=options.registry_auth, builder=builder, released=options.released)
    with stop_on_sigterm(runner):
        outcomes = runner.run(jobs)
    report = make_report(plan, options, jobs, outcomes=outcomes, engine=engine, logs=logs)
    built_by = f"{builder.describe()} on {engine.describe()}"
    for record in report.images:
        outcome = outcomes[record.image]
        record.content_digest, record.reused, record.materials = outcome.content_digest, outcome.reused, outcome.materials
        record.builder = built_by if outcome.seconds is not None else None
    return report


def check_released(options: BuildOptions, jobs: list[BuildJob], engine: Engine) -> str:
    """--from-release: what the release recorded is there to build from (released.check), before the first build;
    what was checked, in a line."""
    from ..input.indexes import http_fetch

    assert options.released is not None
    sources = released.build_sources(options.inputs, jobs, http_fetch(timeout=60))
    wheels = released.check(options.released, jobs, sources, engine, options.inputs.base_for)
    return (f"from release {options.released.release} ({options.released.path}): images {len(jobs)}, locked wheels "
            f"{len(wheels)}, each served by {' or '.join(map(str, sources))}; each base FROM the image it was built from")


def builder_of(name: str | None, engine: Engine, *, instance: str | None = None, compression: str = "gzip") -> Builder:
    """The backend --builder names: the classic builder through the SDK, or BuildKit through a docker CLI (on the
    buildx builder `instance` when named); without --builder, the engine's own default (engine.default_builder:
    BuildKit from Docker 23)."""
    chosen = name or engine.default_builder()
    if chosen == "buildkit":
        from .buildkit import BuildKitBuilder

        return BuildKitBuilder(engine, instance=instance, compression=compression)
    if compression != "gzip":
        why = "--builder classic" if name else f"the default of this Docker {engine.version()} engine"
        raise UserError(f"--compression {compression}: BuildKit compresses the layers as it builds them, and this build "
                        f"uses the classic builder ({why}), whose layers the push gzips: build with --builder buildkit "
                        "on an engine with the containerd image store, or leave --compression out")
    if instance is not None:
        why = "--builder classic" if name else f"the default of this Docker {engine.version()} engine"
        raise UserError(f"--buildx-builder {instance} names a BuildKit builder, but this build uses the classic builder "
                        f"({why}): build with --builder buildkit, or leave --buildx-builder out")
    return ClassicBuilder(engine)


@contextmanager
def stop_on_sigterm(runner: BuildRunner) -> Iterator[None]:
    """SIGTERM stops the builds like Ctrl-C does."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def make_report(plan: Plan, options: BuildOptions, jobs: list[BuildJob], *, outcomes: dict[str, BuildOutcome],
                engine: Engine, logs: LogFiles) -> Report:
    report = Report(release=options.release, matrix=plan.file)
    meter = FloorMeter(engine, known=known_floors(options.report_path))
    for job in jobs:
        outcome = outcomes[job.image]
        record = ImageRecord(
            image=job.image, entry=job.spec.name, variant=job.variant, tag=job.tag, result=result_of(outcome),
            platform=job.platform,
            versions=job.spec.versions(), runs_on=job.spec.runs_on(job.platform),
            build_seconds=None if outcome.seconds is None else round(outcome.seconds, 1),
            error=failure_message(job, outcome, logs) if outcome.error and not outcome.cancelled else None,
            log=None if outcome.seconds is None else str(logs.path(job.image)),
        )
        if outcome.ok:
            info = engine.image_info(job.tag)
            record.image_id, record.size_bytes, record.layers = info["id"], info["size"], info["layers"]
            record.wheels = locked_wheels(engine, job.tag)
            if job.spec.flavor != "ngc":  # an NGC image's floor is the whole NGC base: nothing to measure against
                record.floor_bytes = meter.floor(job.tag, options.inputs.base_for(job.platform) or job.spec.base_image,
                                                 image_id=record.image_id)
        report.images.append(record)
    sizes = {r.image: r.size_bytes for r in report.images}
    for record, job in zip(report.images, jobs, strict=True):
        base_size = sizes.get(job.depends_on or "")
        if record.size_bytes and base_size:
            record.adds_bytes = record.size_bytes - base_size
    return report


def locked_wheels(engine: Engine, tag: str) -> list[str] | None:
    """The wheel lock the image's pip steps recorded (torchimages.wheellock), a line a wheel; None when pip installed
    nothing in it (an NGC image without `pip:` packages) or it was built before the lock was recorded."""
    archive = engine.folder_archive(tag, wheellock.REPORTS)
    return None if archive is None else wheellock.lock_text(wheellock.from_image_folder(archive, tag)).splitlines()


def known_floors(previous_report: Path) -> dict[str, int]:
    """Floors the last report at this path measured, by image id: a no-op rebuild measures nothing again."""
    try:
        records = Report.load(previous_report).images if previous_report.is_file() else []
    except UserError:  # an unreadable earlier report only means the floors are measured again
        return {}
    return {r.image_id: r.floor_bytes for r in records if r.image_id and r.floor_bytes}


def result_of(outcome: BuildOutcome) -> str:
    if outcome.ok:
        return "built"
    if outcome.cancelled:
        return "cancelled"
    return "skipped" if outcome.skipped else "failed"


def failure_message(job: BuildJob, outcome: BuildOutcome, logs: LogFiles) -> str:
    """One short message: image, step, error, the last 20 log lines, what to try."""
    if outcome.skipped:  # never started: the error names the base that was not built
        return outcome.error or ""
    tail = "\n".join(f"    | {line}" for line in outcome.log_tail[-20:])
    return (f"{job.image} failed at {shortened(outcome.step or 'the start')}\n  error: {short_error(outcome.error)}\n"
            f"  last log lines:\n{tail}\n  full log: {logs.path(job.image)}\n"
            f"{removed_line(outcome)}  try: {failure_hint(outcome, job.base_image)}")


def shortened(step: str, limit: int = STEP_SHOWN) -> str:
    """A step as the message shows it: a long RUN cut, its whole text being in the full log."""
    return step if len(step) <= limit else step[:limit].rstrip() + " ..."


def removed_line(outcome: BuildOutcome) -> str:
    if not outcome.created:
        return ""
    return (f"  removed {outcome.removed} intermediate images of the failed build (the last good build's cache stays "
            "the one used)\n")
