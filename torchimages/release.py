"""A release, stage by stage: render -> build -> smoke -> audit -> publish -> report, and the exit policy.

cli.py parses options and calls these. One engine connection serves every stage of a command; each stage emits its
progress as events (events.StageEvent) into the same view (`shown`), does its own work and records it on the
report's image records; `finish` turns the records into the exit code (ImageRecord.ok is the one rule).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape

from . import progress
from .build import render as render_stage
from .build import stage as buildstage
from .build.budget import Budget
from .build.inputs import BuildInputs
from .build.jobs import BuildJob, Selection
from .build.stage import BuildOptions
from .consoles import err, out
from .engine import Engine
from .errors import UserError
from .events import EventSink
from .input.specs import Plan
from .publish.pushstage import PushOptions, push_report
from .report import Report
from .verify import auditstage, smokestage
from .verify import junit as junitxml
from .verify.auditstage import NO_AUDIT, AuditInputs
from .verify.smoke import SmokeRunner, Target


def run(plan: Plan, options: BuildOptions, *, push: PushOptions | None, require_gpu: bool,
        junit: Path | None = None, audited: AuditInputs = NO_AUDIT) -> int:
    """The main job: render, build, smoke-test what was built, audit what passed and, when asked and the audit did not
    fail, push what passed; the exit code."""
    buildstage.select(plan, options)  # a selection that matches nothing is refused before anything is rendered
    credentials = push.credentials() if push else None  # a password on stdin is read before the long build
    if push:  # cache sources on the registry pushed to are pulled as the same user
        options = options.pulling_as(push.repository, credentials)
    written = render_stage.write(plan, options.release, options.images_dir)
    out.print(f"rendered {len(written)} build contexts under {options.images_dir} for release {options.release}")
    engine = Engine(no_cache=options.no_cache)
    report = build(plan, options, engine)
    results = {record.image: record.result for record in report.images}
    built = [job for job in buildstage.select(plan, options) if results.get(job.image) == "built"]
    if built:
        smoke(engine, targets_of(built), report, require_gpu=require_gpu, plain=options.plain, logs=options.logs_dir,
              jobs=options.jobs)
    if not audit(engine, report, audited, options.report_path) and push:  # the failed images make the exit 1
        err.print("error: the audit failed (above): nothing pushed. Once each line is mended (a newer package, or an "
                  "allowlist entry with its reason), run the same command again", highlight=False, markup=False)
        push = None
    pushed = True
    if push:
        # Written before the push: a push cut short (the registry, syft, a full disk) leaves the report of what was
        # built and tested, from which `build.py push` publishes those images without building them again.
        write_report(report, options.report_path)
        try:
            with shown(options.plain, options.logs_dir) as (emit, _):
                pushed, written_manifest = push_report(engine, report, push, emit, credentials,
                                                       report_path=options.report_path, indexed=plan.indexed_images())
        except UserError as exc:
            raise UserError(f"{exc}\nthe images are built and tested ({options.report_path}); once that is mended, "
                            f"`build.py push --tag {options.release}` with the same push options publishes them (a tag "
                            "already pushed is not pushed again)") from None
        err.print(written_manifest)
    return finish(report, options.report_path, failed=not pushed, junit=junit,
                  tested=[record.image for record in report.images])


@contextmanager
def shown(plain: bool, logs_dir: Path) -> Iterator[tuple[EventSink, progress.LogFiles]]:
    """One stage's events on the terminal (live table, or --plain lines) and in the per-image logs under `logs_dir`."""
    logs = progress.LogFiles(logs_dir)
    try:
        with progress.view(err, plain=plain) as view:
            yield progress.fan_out(view, logs), logs
    finally:
        logs.close()


def print_plan(plan: Plan, options: BuildOptions) -> None:
    jobs = buildstage.select(plan, options)
    out.print(f"plan for release {options.release}: {len(jobs)} images from the contexts in {options.images_dir}/, "
              f"{options.jobs} at a time; no engine touched")
    for line in buildstage.describe_plan(jobs):
        out.print(line)


def build(plan: Plan, options: BuildOptions, engine: Engine) -> Report:
    """Build, and print each failure's message."""
    jobs = buildstage.select(plan, options)
    buildstage.check_contexts(jobs, options.release)
    if options.released:
        err.print(buildstage.check_released(options, jobs, engine), highlight=False, markup=False)
    builder = buildstage.builder_of(options.builder, engine, instance=options.buildx_builder,
                                    compression=options.compression)
    err.print(f"building with {builder.describe()} on {engine.describe()}", highlight=False)
    with shown(options.plain, options.logs_dir) as (emit, logs):
        report = buildstage.build(plan, options, engine, emit, logs, builder=builder)
    for record in report.images:
        if record.result == "skipped" and record.error:
            err.print(f"[bold yellow]SKIPPED[/] {escape(record.image)}: {escape(record.error)}", markup=True,
                      highlight=False)
        elif record.error:
            err.print(f"[bold red]FAILED[/] {escape(record.error)}", markup=True, highlight=False)
    check_budget(plan, report, options.budget)
    return report


def check_budget(plan: Plan, report: Report, budget: Budget) -> None:
    """Mark and print each image over its size budget: the release fails (ImageRecord.ok) and it is not pushed."""
    over = budget.check(plan, report)
    for record in report.images:
        record.over_budget = over.get(record.image)
        if record.over_budget:
            err.print(f"[bold red]OVER BUDGET[/] {escape(record.image)}: {escape(record.over_budget)}", markup=True,
                      highlight=False)


def targets_of(jobs: list[BuildJob]) -> list[Target]:
    return [Target.of(job.spec, job.variant, job.tag, job.platform) for job in jobs]


def smoke(engine: Engine, targets: list[Target], report: Report, *, require_gpu: bool, plain: bool, logs: Path,
          jobs: int = 1) -> None:
    """Run the suite on each target, `jobs` at a time; then each failure's reasons and the stage's summary."""
    runner = SmokeRunner(engine=engine, require_gpu=require_gpu)
    with shown(plain, logs) as (emit, _):
        results = smokestage.test_images(runner, targets, report, emit, jobs=jobs)
    for result in results:
        for line in smokestage.failures(result):
            err.print(f"[bold red]FAILED[/] {escape(result.image)}: {escape(line)}", markup=True, highlight=False)
    skipped = sum(r.skipped_no_gpu for r in results)
    failed = sum(1 for r in results if not r.ok)
    err.print(f"smoke: {len(results) - failed} of {len(results)} images passed; {skipped} checks skipped for lack "
              "of a GPU (skips are not passes)", highlight=False)


def audit(engine: Engine, report: Report, inputs: AuditInputs, report_path: Path) -> bool:
    """The audit stage on each image that passed its suite (the image the suite ran); whether the gate passed."""
    tested = {record.image: (record.smoke.image_id if record.smoke else None) or record.tag
              for record in report.images if record.smoke_passed and not record.over_budget}
    if not tested:
        return True
    return auditstage.run(tested, inputs, report=report, out=auditstage.results_path(report_path),
                          today=datetime.date.today(), say=say, engine=engine)


def say(line: str) -> None:
    """A stage's line as it was written: errors and warnings on stderr."""
    (err if line.startswith(("error", "warning")) else out).print(line, highlight=False, markup=False)


def finish(report: Report, path: Path, *, failed: bool = False, junit: Path | None = None,
           tested: list[str] | None = None) -> int:
    """Summary table and report (and, with --junit, a JUnit file of each `tested` image); 1 if any image was not built
    or failed its smoke suite (or `failed`), else 0."""
    out.print(report.summary())
    json_path, markdown_path = write_report(report, path)
    out.print(f"report: {json_path} ({markdown_path.name})")
    if junit is not None:
        written = junitxml.write_report(report, junit, tested or [])
        out.print(f"junit: {len(written)} files in {junit}")
    return 1 if failed or not all(record.ok for record in report.images) else 0


def write_report(report: Report, path: Path) -> tuple[Path, Path]:
    try:
        return report.write(path)
    except OSError as exc:  # after a whole build: say where it could not go, keep the images
        raise UserError(f"the report could not be written to {path}: {exc.strerror or exc}; the images "
                        "are built: give --report a writable path and run the same command again (it is a no-op)") from None


# The commands that run one stage on their own (build, test, push): each checks what it was given and returns
# its exit code.

def build_rendered(plan: Plan, options: BuildOptions, *, pulling: PushOptions | None = None) -> int:
    """`build`: the rendered contexts, refused when stale for the release, built; cache sources on the registry
    are pulled as `pulling`'s user."""
    stale = render_stage.stale_paths(plan, options.release, options.images_dir)
    if stale:
        raise UserError(f"{options.images_dir} does not match the matrix for release {options.release} ({len(stale)} "
                        f"files differ); run: python build.py render --tag {options.release}")
    if pulling is not None and options.cache.used:
        options = options.pulling_as(pulling.repository, pulling.credentials())
    report = build(plan, options, Engine(no_cache=options.no_cache))
    return finish(report, options.report_path)


def test_built(plan: Plan, release: str, jobs: list[BuildJob], report_path: Path, *, require_gpu: bool, plain: bool,
               logs: Path, parallel: int, junit: Path | None = None) -> int:
    """`test`: the smoke suite in each built image of `jobs`, its results added to the release's report."""
    results_report = smokestage.load_report(report_path, release, plan.file)
    smoke(Engine(), targets_of(jobs), results_report, require_gpu=require_gpu, plain=plain, logs=logs, jobs=parallel)
    return finish(results_report, report_path, junit=junit, tested=[job.image for job in jobs])


def push_tested(release: str, report_path: Path, options: PushOptions, *, plain: bool, logs: Path,
                indexed: dict[str, list[tuple[str, str]]] | None = None) -> int:
    """`push`: the images of a run's report whose suite passed, under this release's tags; the manifest written (and,
    without a candidate, the image index of each image of `indexed` whose every platform is in the report)."""
    if not report_path.exists():
        raise UserError(f"no report at {report_path}: run build and test first, or pass --report")
    run_report = Report.load(report_path)
    if run_report.release != release:  # its images would be pushed under the other release's tags
        raise UserError(f"{report_path} is the report of release {run_report.release}, not {release}: push --tag "
                        f"{run_report.release}, or give --report the report of {release}")
    credentials = options.credentials()
    with shown(plain, logs) as (emit, _):
        ok, written = push_report(Engine(), run_report, options, emit, credentials, report_path=report_path,
                                  indexed=indexed)
    err.print(written)
    run_report.write(report_path)
    return 0 if ok else 1


def bake_rendered(plan: Plan, release: str, images_dir: Path, *, selection: Selection, inputs: BuildInputs,
                  out: Path) -> tuple[Path, dict[str, Any]]:
    """`bake`: the rendered contexts (refused when stale, as `build` refuses them) staged and described as a bake
    file, with what `build --builder buildkit` would give each build (build/bake.py)."""
    from .build import bake
    from .build import jobs as buildjobs

    stale = render_stage.stale_paths(plan, release, images_dir)
    if stale:
        raise UserError(f"{images_dir} does not match the matrix for release {release} ({len(stale)} files differ); "
                        f"run: python build.py render --tag {release}")
    jobs = buildjobs.select(plan, release, images_dir, selection, base_for=inputs.base_for)
    engine = Engine()
    runner = buildjobs.BuildRunner(engine, inputs, lambda _event: None, builder=buildstage.builder_of("buildkit", engine))
    return bake.export(jobs, runner, out)
