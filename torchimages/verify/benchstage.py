"""The bench stage over a plan: the benchmark in each chosen image (or this host's Python), its results added to
the release's report, each table printed, and the AMP speed gate; torchimages.verify.bench measures one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from ..build import jobs as buildjobs
from ..build.jobs import Selection
from ..consoles import err, out
from ..input.specs import Plan
from ..workspace import Workspace
from . import bench, smokestage


def in_images(plan: Plan, release: str, workspace: Workspace, *, selection: Selection, seconds: float,
              report: Path | None) -> dict[str, dict[str, Any]]:
    """The benchmark in each selected image (nothing named: the base images), recorded in the release's report."""
    selection = measured_by_default(selection)
    runner = bench.runner()
    results = {job.image: bench.in_image(runner, job.tag, seconds)
               for job in buildjobs.select(plan, release, workspace.images(), selection)}
    path = Workspace.report(release, report)
    run_report = smokestage.load_report(path, release, plan.file)
    for record in run_report.images:
        if record.image in results:
            record.bench = results[record.image]
    run_report.write(path)
    return results


def measured_by_default(selection: Selection) -> Selection:
    """What bench measures: the images named, or, when no image or variant is named, the base images (a variant
    adds a service, not speed)."""
    return selection if selection.only or selection.variants else replace(selection, variants=("base",))


def shown(results: dict[str, dict[str, Any]], min_amp_speedup: float | None) -> int:
    """Print each result's table, then the failures and the gate's; the exit code (1: a failure or the gate)."""
    gate_failures, errors = [], []
    for name, result in results.items():
        if "error" in result:  # the other images' results still print
            errors.append(f"{name}: {result['error']}")
            continue
        out.print(bench.table(name, result))
        if min_amp_speedup is not None and (problem := bench.amp_gate(result, min_amp_speedup)):
            gate_failures.append(problem)
    for problem in errors:
        err.print(f"[bold red]bench failed[/]: {escape(problem)}", markup=True)
    for problem in gate_failures:
        err.print(f"[bold red]gate failed[/]: {escape(problem)}", markup=True)
    return 1 if gate_failures or errors else 0
