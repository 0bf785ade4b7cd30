"""The smoke stage over a release: test each target, emit its progress as events, record its results in the report."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import UserError
from ..events import EventSink, StageEvent
from ..report import ImageRecord, Report
from .smoke import SmokeResult, SmokeRunner, Target


def test_images(runner: SmokeRunner, targets: list[Target], report: Report, emit: EventSink, *,
                jobs: int = 1) -> list[SmokeResult]:
    """Run the suite on each target (its tag must exist), `jobs` images at a time, each with a runner of its own,
    and record the results in `report` in the targets' order."""
    missing = [target.tag for target in targets if not runner.engine.image_exists(target.tag)]
    if missing:
        raise UserError(f"not built: {', '.join(missing[:3])}; build first: python build.py build --tag ...")
    for target in targets:
        emit(StageEvent(target.image, "queued", stage="smoke"))

    def test(target: Target, with_runner: SmokeRunner) -> SmokeResult:
        emit(StageEvent(target.image, "started", target.tag, stage="smoke"))
        result = with_runner.run(target)
        emit_result(target.image, result, emit)
        return result

    if jobs == 1 or len(targets) < 2:
        results = [test(target, runner) for target in targets]
    else:
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="smoke") as pool:
            results = list(pool.map(lambda target: test(target, runner.twin()), targets))
    for target, result in zip(targets, results, strict=True):
        record_result(report, target, result)
    return results


def emit_result(image: str, result: SmokeResult, emit: EventSink) -> None:
    """Every check as a log line (the image's smoke log holds them all), notes and the end as shown events."""
    for check in result.checks:
        emit(StageEvent(image, "log", f"{check.outcome} {check.name}: {first_lines(check.message)}".rstrip(": "),
                        stage="smoke"))
        if check.outcome == "passed" and check.message:
            emit(StageEvent(image, "note", f"{check.name}: {check.message}", stage="smoke"))
    if result.tiers_summary():
        emit(StageEvent(image, "note", f"GPU checks: {result.tiers_summary()}", stage="smoke"))
    emit(StageEvent(image, "passed" if result.ok else "failed", result.summary(), stage="smoke"))


def failures(result: SmokeResult) -> list[str]:
    """The lines that say why an image failed its suite: each failed check, and an error that stopped the suite."""
    lines = [f"failed {check.name}: {first_lines(check.message)}" for check in result.checks if check.outcome == "failed"]
    return lines + ([f"error {result.error}"] if result.error else [])


def record_result(report: Report, target: Target, result: SmokeResult) -> None:
    record = next((r for r in report.images if r.image == target.image), None)
    if record is None:
        versions = {key: value for key, value in target.expected.items() if key not in ("archs", "gpu_archs", "platform")}
        record = ImageRecord(image=target.image, entry=target.entry or target.image, variant=target.variant,
                             tag=target.tag, result="not built here", versions=versions, platform=target.platform,
                             runs_on=target.runs_on)
        report.images.append(record)
    record.smoke = result.record()
    record.audit = None  # of the image tested before, which this one may not be: audit it again


def first_lines(message: str, count: int = 3) -> str:
    return " | ".join(line.strip() for line in message.splitlines()[:count] if line.strip())


def load_report(path: Path, release: str, matrix_file: str) -> Report:
    """The release's report to add to (a new one where none is); another release's is refused, as push refuses it:
    its images would get this release's tested image IDs."""
    if not path.exists():
        return Report(release=release, matrix=matrix_file)
    found = Report.load(path)
    if found.release != release:
        raise UserError(f"{path} is the report of release {found.release}, not {release}: give --report the report of "
                        f"{release}, or a new path")
    return found
