"""Build jobs: which images, in which order, with what inputs; run them, bases before variants."""

from __future__ import annotations

import fnmatch
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from .buildinputs import BuildInputs, copy_context
from .engine import BuildOutcome, Engine
from .errors import UserError
from .events import EventSink, StageEvent
from .specs import ImageSpec, Plan


@dataclass(frozen=True)
class BuildJob:
    image: str
    variant: str  # base, jupyter, ssh
    spec: ImageSpec
    tag: str
    context: Path
    depends_on: str | None
    base_image: str | None  # the FROM image of a base build (for error hints)


@dataclass(frozen=True)
class Selection:
    """Which images a command works on (--only globs, --flavor, --variant); empty means all."""

    only: tuple[str, ...] = ()
    flavors: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()

    def matches(self, image: str) -> bool:
        return not self.only or any(fnmatch.fnmatch(image, glob) for glob in self.only)


def select(plan: Plan, release: str, images_dir: Path, selection: Selection, *,
           base_override: str | None = None) -> list[BuildJob]:
    """plan_jobs, refusing a selection that matches nothing."""
    jobs = plan_jobs(plan, release, images_dir, selection, base_override=base_override)
    if not jobs:
        raise UserError("no image matches --only/--flavor/--variant; list them with: python build.py matrix")
    return jobs


def plan_jobs(plan: Plan, release: str, images_dir: Path, selection: Selection = Selection(), *,
              base_override: str | None = None) -> list[BuildJob]:
    """Selected images in build order; a selected variant brings its base along."""
    jobs: list[BuildJob] = []
    for spec in plan.specs:
        if selection.flavors and spec.flavor not in selection.flavors:
            continue
        chosen = [(variant, image) for variant, image in spec.images()
                  if (not selection.variants or variant in selection.variants) and selection.matches(image)]
        if chosen and chosen[0][0] != "base":
            chosen.insert(0, ("base", spec.name))
        for variant, image in chosen:
            base = variant == "base"
            jobs.append(BuildJob(
                image=image, variant=variant, spec=spec, tag=plan.tag(release, image), context=images_dir / image,
                depends_on=None if base else spec.name,
                base_image=(base_override or spec.base_image) if base else plan.tag(release, spec.name),
            ))
    return jobs


class BuildRunner:
    """Runs jobs on up to `jobs` threads; a variant starts when its base is built."""

    def __init__(self, engine: Engine, inputs: BuildInputs, emit: EventSink, *, jobs: int = 1) -> None:
        self.engine, self.inputs, self.emit, self.jobs = engine, inputs, emit, max(1, jobs)
        self.cancel = threading.Event()
        self.seconds: dict[str, float] = {}

    def run(self, jobs: list[BuildJob]) -> dict[str, BuildOutcome]:
        outcomes: dict[str, BuildOutcome] = {}
        for job in jobs:
            self.emit(StageEvent(job.image, "queued"))
        pending = list(jobs)
        running: dict[Future[BuildOutcome], BuildJob] = {}
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            try:
                while pending or running:
                    self._start_ready(pool, pending, running, outcomes)
                    if running:
                        finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                        for future in finished:
                            job = running.pop(future)
                            outcomes[job.image] = future.result()
            except KeyboardInterrupt:
                self.stop()
                for future, job in running.items():
                    outcomes[job.image] = future.result()
                raise
            finally:
                for job in pending:
                    outcomes.setdefault(job.image, BuildOutcome(job.image, job.tag, cancelled=True))
                    self.emit(StageEvent(job.image, "cancelled", "not started"))
        return outcomes

    def stop(self) -> None:
        """Ctrl-C or SIGTERM: stop every running build; none leaves a tag."""
        self.cancel.set()
        self.engine.stop_builds()

    def _start_ready(self, pool: ThreadPoolExecutor, pending: list[BuildJob],
                     running: dict[Future[BuildOutcome], BuildJob], outcomes: dict[str, BuildOutcome]) -> None:
        for job in list(pending):
            if self.cancel.is_set() or len(running) >= self.jobs:
                return
            waiting = job.depends_on and job.depends_on not in outcomes
            if waiting and any(j.image == job.depends_on for j in [*pending, *running.values()]):
                continue
            pending.remove(job)
            base = outcomes.get(job.depends_on) if job.depends_on else None
            if base is not None and not base.ok:
                outcomes[job.image] = BuildOutcome(job.image, job.tag, error=f"its base {job.depends_on} was not built",
                                                   skipped=True)
                self.emit(StageEvent(job.image, "skipped", f"base {job.depends_on} was not built"))
                continue
            running[pool.submit(self._build, job)] = job

    def _build(self, job: BuildJob) -> BuildOutcome:
        started = time.monotonic()
        self.emit(StageEvent(job.image, "started", job.tag))
        with tempfile.TemporaryDirectory(prefix=f"ctx-{job.image}-") as tmp:
            context = Path(tmp) / "context"
            copy_context(job.context, context)
            self.inputs.fill_context(context, installs_torch=job.variant == "base" and job.spec.flavor != "ngc")
            base_arg = (self.inputs.base_image if job.variant == "base" else job.base_image) or None
            outcome = self.engine.build(job.image, context, job.tag, buildargs=self.inputs.buildargs(base_image=base_arg),
                                        emit=self.emit, cancel=self.cancel)
        self.seconds[job.image] = time.monotonic() - started
        if self.cancel.is_set() and not outcome.ok:
            outcome.cancelled = True
        kind = "built" if outcome.ok else "cancelled" if outcome.cancelled or self.cancel.is_set() else "failed"
        self.emit(StageEvent(job.image, kind, outcome.error or outcome.image_id or ""))
        return outcome
