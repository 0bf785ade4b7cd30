"""Build jobs: which images, in which order, with what inputs; run them, bases before variants."""

from __future__ import annotations

import fnmatch
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..engine import BuildOutcome, Engine
from ..errors import UserError
from ..events import EventSink, StageEvent
from ..input.specs import ImageSpec, Plan
from . import cache as buildcache
from .cache import CONTENT_LABEL, CacheSources
from .classic import ClassicBuilder
from .inputs import BuildInputs, copy_context


class Builder(Protocol):
    """What builds an image: the classic builder (classic.ClassicBuilder) or BuildKit (buildkit.BuildKitBuilder)."""

    def build(self, image: str, context: Path, tag: str, *, buildargs: dict[str, str], emit: EventSink,
              cancel: threading.Event, cache_from: list[str] | None = None,
              labels: dict[str, str] | None = None) -> BuildOutcome: ...

    def stop_builds(self) -> None: ...

    def describe(self) -> str:
        """Which builder, for the output and the report: "BuildKit through /usr/bin/docker 20.10.24 (...)"."""
        ...


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

    def __init__(self, engine: Engine, inputs: BuildInputs, emit: EventSink, *, jobs: int = 1,
                 cache: CacheSources | None = None, registry_auth: tuple[str, dict[str, str]] | None = None,
                 builder: Builder | None = None) -> None:
        self.engine, self.inputs, self.emit, self.jobs = engine, inputs, emit, max(1, jobs)
        self.builder: Builder = builder or ClassicBuilder(engine)
        self.cache, self.registry_auth = cache or CacheSources(), registry_auth
        self.cancel = threading.Event()
        self._digests: dict[str, str | None] = {}  # image -> content digest: a variant's parent is its base's
        self._pulls: dict[str, str | None] = {}  # reference -> why it could not be pulled, or None
        self._pull_lock = threading.Lock()

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
        self.builder.stop_builds()

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
            buildargs = self.inputs.buildargs(base_image=base_arg)
            digest = self._digests[job.image] = self._content_digest(job, context, buildargs)
            labels = {CONTENT_LABEL: digest} if digest else None
            previous = None if self.engine.no_cache else self.cache.reusable(job.image, digest)
            reused = bool(previous) and self._pulled(job.image, previous) and self._labelled(job.image, previous, digest)
            if reused:
                outcome = self._stamp(job, previous, context, Path(tmp) / "stamp", labels)
            else:
                sources = [] if self.engine.no_cache else self.cache.layer_sources(job.image)
                outcome = self.builder.build(job.image, context, job.tag, buildargs=buildargs, emit=self.emit,
                                             cancel=self.cancel, labels=labels,
                                             cache_from=[ref for ref in sources if self._pulled(job.image, ref)])
        outcome.seconds, outcome.content_digest = time.monotonic() - started, digest
        outcome.reused = previous if reused else None
        if self.cancel.is_set() and not outcome.ok:
            outcome.cancelled = True
        kind = "built" if outcome.ok else "cancelled" if outcome.cancelled or self.cancel.is_set() else "failed"
        self.emit(StageEvent(job.image, kind, outcome.error or outcome.image_id or ""))
        return outcome

    def _content_digest(self, job: BuildJob, context: Path, buildargs: dict[str, str]) -> str | None:
        """The build's content digest; None when its FROM image is not known here (its build then fails anyway)."""
        if job.depends_on:
            parent = self._digests.get(job.depends_on)
        else:
            dockerfile = (context / "Dockerfile").read_text(encoding="utf-8")
            reference = buildargs.get("BASE_IMAGE") or buildcache.from_default(dockerfile)
            parent = self.engine.image_id(reference) if reference else None
        return buildcache.content_digest(context, buildargs, parent) if parent else None

    def _pulled(self, image: str, reference: str) -> bool:
        """Pull a cache source once per run; a source that cannot be pulled is a note, not a failure."""
        with self._pull_lock:
            if reference not in self._pulls:
                started = time.monotonic()
                why = self._pulls[reference] = self.engine.pull(reference, self._auth_for(reference))
                took = time.monotonic() - started
                self.emit(StageEvent(image, "note", f"cache: {reference} not pulled ({why}); building without it" if why
                                     else f"cache: {reference} ready ({took:.1f} s)"))
            return self._pulls[reference] is None

    def _labelled(self, image: str, reference: str, digest: str | None) -> bool:
        """The pulled image's own content label must be this build's digest, not only the manifest that named it."""
        labels = self.engine.image_labels(reference)
        if labels.get(CONTENT_LABEL) == digest:
            return True
        label = str(labels.get(CONTENT_LABEL))[:19]  # the note stays one short line: the digests are in the log
        self.emit(StageEvent(image, "note", f"cache: not reused: the pulled image's content label is {label}, not "
                                            f"this build's {str(digest)[:19]}; building ({reference})"))
        return False

    def _auth_for(self, reference: str) -> dict[str, str] | None:
        """The given credentials for their own registry only; elsewhere what `docker login` stored (None)."""
        if self.registry_auth and reference.split("/", 1)[0] == self.registry_auth[0]:
            return self.registry_auth[1]
        return None

    def _stamp(self, job: BuildJob, previous: str, context: Path, folder: Path,
               labels: dict[str, str] | None) -> BuildOutcome:
        """The previous release's identical image with this release's stamp written on top: no step runs again."""
        self.emit(StageEvent(job.image, "note", f"reused: content unchanged since {previous}; writing only the "
                                                "release stamp"))
        folder.mkdir()
        dockerfile = (context / "Dockerfile").read_text(encoding="utf-8")
        (folder / "Dockerfile").write_text(buildcache.stamp_dockerfile(previous, dockerfile), encoding="utf-8")
        return self.builder.build(job.image, folder, job.tag, buildargs={}, emit=self.emit, cancel=self.cancel,
                                  labels=labels)
