"""Build jobs: which images, in which order, with what inputs; run them, bases before variants."""

from __future__ import annotations

import fnmatch
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..engine import BuildOutcome, Engine
from ..errors import UserError
from ..events import EventSink, StageEvent
from ..input.grammar import DEFAULT_PLATFORM
from ..input.specs import ImageSpec, Plan, PlatformImage
from ..settings import SETTINGS
from . import cache as buildcache
from . import contexts
from .cache import CONTENT_LABEL, CacheSources
from .classic import ClassicBuilder
from .digests import DigestMemo, sha256_of
from .inputs import INDEX_ARGS, BuildInputs, copy_context

PLATFORM_LABEL = "io.torchimages.platform"  # the platform an image was built for, beside its configuration's own
# The GPU generations its torch runs on, '+PTX' where it carries PTX ('7.5 8.0 8.6 9.0 10.0 12.0'), per platform: what
# `build.py fit` decides with before the pull; 'none' for a CPU image or where the compat data records none
GPU_ARCHS_LABEL = "io.torchimages.cuda-archs"
EPOCH_ARG = "SOURCE_DATE_EPOCH"  # the time the environment's files are given (macros.j2: network_args, clamp_times)
PLATFORM_ARG = "TARGETPLATFORM"  # how a platform other than the default enters the content digest


def no_override(_platform: str) -> str | None:
    return None


def from_default(context: Path) -> str | None:
    """The FROM image a context's Dockerfile names when no BASE_IMAGE is given."""
    return buildcache.from_default((context / "Dockerfile").read_text(encoding="utf-8"))


class Builder(Protocol):
    """What builds an image: the classic builder (classic.ClassicBuilder) or BuildKit (buildkit.BuildKitBuilder)."""

    def build(self, image: str, context: Path, tag: str, *, buildargs: dict[str, str], emit: EventSink,
              cancel: threading.Event, cache_from: list[str] | None = None,
              labels: dict[str, str] | None = None, platform: str | None = None) -> BuildOutcome: ...

    # Whether a build for another platform than the engine's installs torch natively (BuildKit's $BUILDPLATFORM stage)
    cross_installs: bool
    dockerfile: str  # the file of a context it builds from, where the context has it (else Dockerfile)

    def stop_builds(self) -> None: ...

    def describe(self) -> str:
        """Which builder, for the output and the report: "BuildKit through /usr/bin/docker 20.10.24 (...)"."""
        ...


@dataclass(frozen=True)
class BuildJob:
    image: str  # the image as built for its platform (specs.PlatformImage.image): the key of outcomes and records
    variant: str  # base, jupyter, ssh
    spec: ImageSpec
    tag: str
    context: Path  # the rendered context, one for every platform of the image
    depends_on: str | None
    base_image: str | None  # the FROM image: of a base build, the platform's base; of a variant, its base's tag
    platform: str = DEFAULT_PLATFORM

    @property
    def name(self) -> str:
        """The image across its platforms (NAME[-VARIANT]): what its release tag names."""
        return self.spec.image_name(self.variant)


@dataclass(frozen=True)
class Selection:
    """Which images a command works on (--only globs, --flavor, --variant, --platform); empty means all."""

    only: tuple[str, ...] = ()
    flavors: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()

    def matches(self, *names: str) -> bool:
        """Whether a glob of --only matches any of the image's names (the image's, and its platform's image's)."""
        return not self.only or any(fnmatch.fnmatch(name, glob) for glob in self.only for name in names)


def select(plan: Plan, release: str, images_dir: Path, selection: Selection, *,
           base_for: Callable[[str], str | None] = no_override) -> list[BuildJob]:
    """plan_jobs, refusing a selection that matches nothing."""
    jobs = plan_jobs(plan, release, images_dir, selection, base_for=base_for)
    if not jobs:
        raise UserError("no image matches --only/--flavor/--variant/--platform; list them with: python build.py matrix")
    return jobs


def plan_jobs(plan: Plan, release: str, images_dir: Path, selection: Selection = Selection(), *,
              base_for: Callable[[str], str | None] = no_override) -> list[BuildJob]:
    """Selected images in build order, platform by platform; a selected variant brings its base (of its platform)
    along. `base_for(platform)`: the image a base build of that platform is FROM instead of the matrix's."""
    jobs: list[BuildJob] = []
    for spec in plan.specs:
        if selection.flavors and spec.flavor not in selection.flavors:
            continue
        for platform in spec.platforms:
            if selection.platforms and platform not in selection.platforms:
                continue
            built = [spec.platform_image(variant, platform) for variant in ("base", *spec.variants)]
            chosen = [image for image in built if (not selection.variants or image.variant in selection.variants)
                      and selection.matches(image.name, image.image)]
            if chosen and chosen[0].variant != "base":
                chosen.insert(0, built[0])
            jobs += [job_of(plan, release, images_dir, image, spec, base=built[0].image, base_for=base_for)
                     for image in chosen]
    return jobs


def job_of(plan: Plan, release: str, images_dir: Path, image: PlatformImage, spec: ImageSpec, *, base: str,
           base_for: Callable[[str], str | None]) -> BuildJob:
    is_base = image.variant == "base"
    return BuildJob(image=image.image, variant=image.variant, spec=spec, tag=plan.tag(release, image.image),
                    context=images_dir / image.name, depends_on=None if is_base else base, platform=image.platform,
                    base_image=(base_for(image.platform) or spec.base_image) if is_base else plan.tag(release, base))


def platform_args(job: BuildJob) -> dict[str, str]:
    """What a Dockerfile rendered for the default platform is told of another: a devel image's arch list (the GPU
    generations of that platform's torch wheel)."""
    if job.variant != "devel" or job.platform == DEFAULT_PLATFORM or not job.spec.devel_pip:
        return {}
    return {"TORCH_CUDA_ARCH_LIST": job.spec.cuda_arch_list(job.platform)}


class ReleasedInputs(Protocol):
    """What a rebuild of a release gives each build (build/released.py: FromRelease, which builds on this module)."""

    def step_locks(self, image: str) -> dict[str, str]: ...

    def base_of(self, image: str) -> str | None: ...

    def source_date_epoch(self, image: str) -> int | None: ...


@dataclass(frozen=True)
class Prepared:
    """What one build is given besides its context: build arguments, content digest (None: its FROM image is not
    known here), labels."""

    buildargs: dict[str, str]
    digest: str | None
    labels: dict[str, str]


class BuildRunner:
    """Runs jobs on up to `jobs` threads; a variant starts when its base is built."""

    def __init__(self, engine: Engine, inputs: BuildInputs, emit: EventSink, *, jobs: int = 1,
                 cache: CacheSources | None = None, registry_auth: tuple[str, dict[str, str]] | None = None,
                 builder: Builder | None = None, released: ReleasedInputs | None = None) -> None:
        self.engine, self.inputs, self.emit, self.jobs = engine, inputs, emit, max(1, jobs)
        self.released = released  # --from-release: each base's FROM and every pip step's wheels from the release
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
        with tempfile.TemporaryDirectory(prefix=f"ctx-{job.image}-") as tmp, contexts.staged(job.image) as context:
            prepared = self.prepare(job, context)
            if isinstance(prepared, str):
                outcome = BuildOutcome(job.image, job.tag, error=prepared)
                return self._ended(job, outcome, started, digest=None, previous=None, reused=False)
            buildargs, digest, labels = prepared.buildargs, prepared.digest, prepared.labels
            materials = self._materials(job, context, buildargs)
            if not self.engine.no_cache and (held := self._held_here(job, context, labels)):
                return self._ended(job, BuildOutcome(job.image, job.tag, image_id=held), started, digest=digest,
                                   previous=None, reused=False)
            previous = None if self.engine.no_cache else self.cache.reusable(job.image, digest)
            reused = bool(previous) and self._pulled(job.image, previous) and self._labelled(job.image, previous, digest)
            if reused:
                outcome = self._stamp(job, previous, context, Path(tmp) / "stamp", labels)
            else:
                sources = [] if self.engine.no_cache else self.cache.layer_sources(job.image)
                outcome = self.builder.build(job.image, context, job.tag, buildargs=buildargs, emit=self.emit,
                                             cancel=self.cancel, labels=labels, platform=job.platform,
                                             cache_from=[ref for ref in sources if self._pulled(job.image, ref)])
        outcome.materials = materials
        return self._ended(job, outcome, started, digest=digest, previous=previous, reused=reused)

    def prepare(self, job: BuildJob, context: Path) -> Prepared | str:
        """The job's context staged into `context` (the rendered files, the CA bundle, its wheels) and what its build
        is given: build arguments, content digest, labels; or why it cannot be built. Bases before their variants: a
        variant's content digest is its base's. `build.py bake` hands the same to docker buildx bake."""
        copy_context(job.context, context)
        self.inputs.fill_context(context, installs_torch=job.variant == "base" and job.spec.flavor != "ngc",
                                 platform=job.platform,
                                 stack_wheels=job.spec.devel_wheels if job.variant == "devel" else (),
                                 locks=self.released.step_locks(job.image) if self.released else None)
        base_arg = (self._base_of(job) if job.variant == "base" else job.base_image) or None
        if why := self._platform_problem(job, base_arg or from_default(context)) or self._locked_cross(job):
            return why
        buildargs = {**self.inputs.buildargs(base_image=base_arg), **self._cross_args(job), **platform_args(job),
                     **self._epoch_args(job)}
        digest = self._digests[job.image] = self._content_digest(job, context, buildargs)
        labels = {**({CONTENT_LABEL: digest} if digest else {}), PLATFORM_LABEL: job.platform,
                  GPU_ARCHS_LABEL: job.spec.gpu_archs(job.platform) or "none"}
        return Prepared(buildargs, digest, labels)

    def _base_of(self, job: BuildJob) -> str | None:
        """A base build's FROM image: --base-image's, else (--from-release) the one its release was built from, else
        the matrix's (the rendered Dockerfile's default)."""
        return self.inputs.base_for(job.platform) or (self.released.base_of(job.image) if self.released else None)

    def _epoch_args(self, job: BuildJob) -> dict[str, str]:
        """--from-release: the time its release gave the environment's files (SOURCE_DATE_EPOCH), where that is not
        the one the rendered Dockerfile declares (settings.source_date_epoch): the same files then make the same
        layers. Not passed otherwise, so an ordinary build's arguments, and so its content digest, stay as they were."""
        epoch = self.released.source_date_epoch(job.image) if self.released else None
        return {EPOCH_ARG: str(epoch)} if epoch is not None and epoch != SETTINGS.source_date_epoch else {}

    def _locked_cross(self, job: BuildJob) -> str | None:
        if self.released and self._cross_args(job):
            return (f"--from-release installs each step's lock where the image runs; {job.image} ({job.platform}) would "
                    f"be cross-installed on this {self.engine.platform()} engine: build it with --builder classic "
                    "(under emulation) or on a native engine")
        return None

    def _materials(self, job: BuildJob, context: Path, buildargs: dict[str, str]) -> dict[str, object]:
        """What the build reads, by digest, for its provenance: the Dockerfile it builds from, its FROM image (the base
        image, or a variant's base) with its ID here, every wheel given to it, the indexes it may download from."""
        dockerfile = context / self.builder.dockerfile
        dockerfile = dockerfile if dockerfile.is_file() else context / "Dockerfile"
        reference = (job.base_image if job.depends_on else buildargs.get("BASE_IMAGE") or from_default(context)) or ""
        memo = DigestMemo()
        wheels = {wheel.name: memo.sha256(wheel) for wheel in sorted(context.rglob("*.whl"))}
        memo.save()
        return {"dockerfile": dockerfile.name, "dockerfile_sha256": sha256_of(dockerfile),
                "from": reference, "from_id": self.engine.image_id(reference) if reference else None,
                "wheels": wheels, "indexes": sorted({buildcache.without_credentials(buildargs[name])
                                                     for name in INDEX_ARGS if buildargs.get(name)}),
                "engine": self.engine.version(),
                "source_date_epoch": int(buildargs.get(EPOCH_ARG, SETTINGS.source_date_epoch))}

    def _ended(self, job: BuildJob, outcome: BuildOutcome, started: float, *, digest: str | None,
               previous: str | None, reused: bool) -> BuildOutcome:
        outcome.seconds, outcome.content_digest = time.monotonic() - started, digest
        outcome.reused = previous if reused else None
        if self.cancel.is_set() and not outcome.ok:
            outcome.cancelled = True
        kind = "built" if outcome.ok else "cancelled" if outcome.cancelled or self.cancel.is_set() else "failed"
        self.emit(StageEvent(job.image, kind, outcome.error or outcome.image_id or ""))
        return outcome

    def _platform_problem(self, job: BuildJob, reference: str | None) -> str | None:
        """A FROM image on this engine that is of another platform than the build's: refused before the build,
        which would otherwise make an image of one platform labelled as another."""
        found = self.engine.image_platform(reference) if reference else None
        if found is None or found == job.platform:
            return None
        option = f"--base-image {job.platform}=IMAGE" if job.variant == "base" else f"a {job.platform} base"
        return (f"{reference} is a {found} image on this engine; {job.image} is built for {job.platform}: "
                f"give it {option}")

    def _cross_args(self, job: BuildJob) -> dict[str, str]:
        """A torch install for another platform than the engine's, by a builder that can: the build platform's pip
        installs the target's wheels, which no emulator then has to unpack (buildkit.CROSS_INSTALL)."""
        if job.variant != "base" or job.spec.flavor == "ngc" or not self.builder.cross_installs:
            return {}
        native = self.engine.platform()
        if job.platform == native:
            return {}
        args = {"TORCH_INSTALL": "cross"}
        if build_base := self.inputs.base_for(native):
            args["BUILD_BASE_IMAGE"] = build_base
        return args

    def _content_digest(self, job: BuildJob, context: Path, buildargs: dict[str, str]) -> str | None:
        """The build's content digest; None when its FROM image is not known here (its build then fails anyway).
        A platform other than the default is one of its inputs (a multi-platform base has one name for all)."""
        if job.depends_on:
            parent = self._digests.get(job.depends_on)
        else:
            reference = buildargs.get("BASE_IMAGE") or from_default(context)
            parent = self.engine.image_id(reference) if reference else None
        read = buildargs if job.platform == DEFAULT_PLATFORM else {**buildargs, PLATFORM_ARG: job.platform}
        if not parent:
            return None
        memo = DigestMemo()
        digest = buildcache.content_digest(context, read, parent, memo)
        memo.save()
        return digest

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

    def _held_here(self, job: BuildJob, context: Path, labels: dict[str, str]) -> str | None:
        """The image this build would make, already under its tag here: the content digest, platform and GPU labels
        and this release's stamp are this build's. Then nothing is built or sent again, and a no-op rebuild takes
        seconds with either builder (the classic builder is otherwise sent its whole context at every build, the CUDA
        entry's 2.9 GB wheelhouse included, also when every step is cached). `--no-cache` builds it again."""
        if CONTENT_LABEL not in labels or not (held := self.engine.held_image(job.tag)):
            return None
        stamp = buildcache.stamp_labels((context / "Dockerfile").read_text(encoding="utf-8"))
        if stamp is None or any(held.labels.get(key) != value for key, value in {**stamp, **labels}.items()):
            return None
        if job.base_image:  # a variant on the base image as it is now, not on one its base tag held before
            base = self.engine.image_layers(job.base_image)
            if not base or held.layers[: len(base)] != base:
                return None
        self.emit(StageEvent(job.image, "note", f"unchanged: {job.tag} already holds this build's content "
                                                f"({labels[CONTENT_LABEL][:19]}) and release stamp; not built again "
                                                "(--no-cache builds it)"))
        return held.id

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
                                  labels=labels, platform=job.platform)
