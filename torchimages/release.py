"""A release, stage by stage: render -> build -> smoke -> publish -> report, and the exit policy.

cli.py parses options and calls these; each stage module does its own work and records it on the report's
image records, and `finish` turns the records into the exit code (ImageRecord.ok is the one rule).
"""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from . import buildstage, smokestage
from . import render as render_stage
from .buildjobs import BuildJob
from .buildstage import BuildOptions
from .consoles import err, out
from .errors import UserError
from .publishstage import PushOptions, push_report
from .report import Report
from .specs import Plan


def run(plan: Plan, options: BuildOptions, *, push: PushOptions | None, require_gpu: bool) -> int:
    """The main job: render, build, smoke-test what was built and, when asked, push what passed; the exit code."""
    written = render_stage.write(plan, options.release, options.images_dir)
    out.print(f"rendered {len(written)} build contexts under {options.images_dir} for release {options.release}")
    report = build(plan, options)
    results = {record.image: record.result for record in report.images}
    built = [job for job in buildstage.select(plan, options) if results.get(job.image) == "built"]
    if built:
        smoke(built, report, require_gpu=require_gpu)
    pushed = push_report(report, push, err) if push else True
    return finish(report, options.report_path, failed=not pushed)


def print_plan(plan: Plan, options: BuildOptions) -> None:
    jobs = buildstage.select(plan, options)
    out.print(f"plan for release {options.release}: {len(jobs)} images from the contexts in {options.images_dir}/, "
              f"{options.jobs} at a time; no engine touched")
    for line in buildstage.describe_plan(jobs):
        out.print(line)


def build(plan: Plan, options: BuildOptions) -> Report:
    """Build, and print each failure's message."""
    report = buildstage.build(plan, options, err)
    for record in report.images:
        if record.error:
            err.print(f"[bold red]FAILED[/] {escape(record.error)}", markup=True, highlight=False)
    return report


def smoke(jobs: list[BuildJob], report: Report, *, require_gpu: bool) -> None:
    results = smokestage.test_images(jobs, report, err, require_gpu=require_gpu)
    skipped = sum(r.skipped_no_gpu for r in results)
    failed = sum(1 for r in results if not r.ok)
    err.print(f"smoke: {len(results) - failed} of {len(results)} images passed; {skipped} checks skipped for lack "
              "of a GPU (skips are not passes)", highlight=False)


def finish(report: Report, path: Path, *, failed: bool = False) -> int:
    """Summary table and report; 1 if any image was not built or failed its smoke suite (or `failed`), else 0."""
    out.print(report.summary())
    try:
        json_path, markdown_path = report.write(path)
    except OSError as exc:  # after a whole build: say where it could not go, keep the images
        raise UserError(f"the report could not be written to {path}: {exc.strerror or exc}; the images "
                        "are built: give --report a writable path and run the same command again (it is a no-op)") from None
    out.print(f"report: {json_path} ({markdown_path.name})")
    return 1 if failed or not all(record.ok for record in report.images) else 0


