"""The smoke stage over a plan: which images to test, and their results in the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from .buildjobs import BuildJob
from .engine import image_exists
from .errors import UserError
from .report import ImageRecord, Report
from .smoke import SmokeResult, SmokeRunner, Target
from .specs import ImageSpec


def expected_of(spec: ImageSpec) -> dict[str, Any]:
    """What the suite checks an image of `spec` against: its declared versions and the GPU generations claimed."""
    return {**spec.versions(), "archs": list(spec.archs)}


def target_of(job: BuildJob) -> Target:
    return Target(image=job.image, tag=job.tag, variant=job.variant, flavor=job.spec.flavor, expected=expected_of(job.spec))


def test_images(jobs: list[BuildJob], report: Report, console: Console, *, require_gpu: bool) -> list[SmokeResult]:
    """Run the suite on each job's image (its tag must exist) and record the results in `report`."""
    runner = SmokeRunner(require_gpu=require_gpu)
    missing = [job.tag for job in jobs if not image_exists(runner.api, job.tag)]
    if missing:
        raise UserError(f"not built: {', '.join(missing[:3])}; build first: python build.py build --tag ...")
    results = []
    for job in jobs:
        console.print(f"smoke: {job.image}: starting", highlight=False)
        result = runner.run(target_of(job))
        results.append(result)
        record_result(report, job, result)
        state = "[green]passed[/]" if result.ok else "[bold red]FAILED[/]"  # the rest is escaped: names are user text
        console.print(f"smoke: {escape(job.image)}: {state}: {escape(result.summary())}", highlight=False, markup=True)
        if result.tiers_summary():
            console.print(f"  GPU checks: {result.tiers_summary()}", highlight=False)
        for check in result.checks:
            if check.outcome == "passed" and check.message:
                console.print(f"  note {escape(check.name)}: {escape(check.message)}", highlight=False, markup=True)
            if check.outcome == "failed":
                console.print(f"  [red]failed[/] {escape(check.name)}: {escape(first_lines(check.message))}", highlight=False,
                              markup=True)
        if result.error:
            console.print(f"  [red]error[/] {escape(result.error)}", highlight=False, markup=True)
    return results


def record_result(report: Report, job: BuildJob, result: SmokeResult) -> None:
    record = next((r for r in report.images if r.image == job.image), None)
    if record is None:
        record = ImageRecord(image=job.image, entry=job.spec.name, variant=job.variant, tag=job.tag, result="not built here",
                             versions=target_of(job).expected)
        report.images.append(record)
    record.smoke = result.record()


def first_lines(message: str, count: int = 3) -> str:
    return " | ".join(line.strip() for line in message.splitlines()[:count] if line.strip())


def load_report(path: Path, release: str, matrix_file: str) -> Report:
    return Report.load(path) if path.exists() else Report(release=release, matrix=matrix_file)
