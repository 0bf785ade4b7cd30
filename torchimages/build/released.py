"""`build --from-release MANIFEST`: a release rebuilt from what it recorded.

Each image is built from the rendered contexts as any build is, with two inputs taken from the release instead of
resolved anew. A base image is built FROM the image its release build named (the manifest's `built_from`: pinned by
digest where the release pinned it), and an image of another ID under that name is refused before any build. Every pip
install step installs exactly the wheels its step locked (the release's lock assets, each line naming its step), in
pip's hash-checking mode: the build context's `build-config/wheel-lock/STEP.txt`, which the templates install instead
of the step's requirements when the folder is there (macros.j2: locked_or). A locked wheel that no source of the build
serves with its sha256 (its --wheelhouse; its indexes unless --offline) is refused before any build, one line each.
And each image's environment files get the time its release gave them (the manifest's `source_date_epoch`,
SOURCE_DATE_EPOCH): the same wheels then make the same layers, which the rebuild can be checked by.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import manifest, wheellock
from ..engine import Engine
from ..errors import UserError
from ..input.grammar import DIGEST
from ..manifest import BuiltFrom
from ..wheellock import STEPS, Fetch, LockedWheel
from .inputs import BuildInputs
from .jobs import BuildJob

LOCKS = "wheel-lock"  # the folder of a context's build-config/ that makes each pip step install its lock


@dataclass(frozen=True)
class ReleasedImage:
    image: str
    built_from: BuiltFrom | None
    wheels: tuple[LockedWheel, ...] | None  # None: the release recorded no lock for it
    source_date_epoch: int | None  # None: the release recorded none (built with the settings' one, or before it)

    def step_locks(self) -> dict[str, str]:
        """Each step's lock (empty for a step that installed nothing, as pip then does again): every step is written,
        and the image's Dockerfile installs the ones its own stages run."""
        wheels = self.wheels or ()
        return {step: wheellock.lock_text(wheel for wheel in wheels if wheel.step == step) for step in STEPS}


@dataclass(frozen=True)
class FromRelease:
    path: Path
    release: str
    images: dict[str, ReleasedImage]

    @classmethod
    def read(cls, path: Path) -> FromRelease:
        """The release's manifest and its lock assets, every field checked (manifest.read)."""
        made = manifest.read(path)
        images = {item.image: ReleasedImage(item.image, item.built_from,
                                            None if item.wheels is None
                                            else tuple(wheellock.parse_line(line) for line in item.wheels),
                                            item.source_date_epoch)
                  for item in made.images}
        return cls(path, made.release, images)

    def problems(self, jobs: Iterable[BuildJob]) -> list[str]:
        """Why these builds cannot be rebuilt from this release, a line an image: not in it, no lock, a lock whose
        lines do not name their steps, a base image without the image it was built FROM."""
        lines = []
        for job in jobs:
            released = self.images.get(job.image)
            if released is None:
                lines.append(f"{job.image} is not an image of release {self.release} ({self.path}): select the images "
                             "it holds (--only)")
            elif released.wheels is None:
                lines.append(f"{job.image}: release {self.release} records no wheel lock for it (released by a version "
                             "of this tool that kept none)")
            elif unmarked := [wheel.pin for wheel in released.wheels if wheel.step not in STEPS]:
                lines.append(f"{job.image}: its lock does not say which pip step installed {', '.join(unmarked[:3])} "
                             f"(lines without `STEP: `; steps are {', '.join(STEPS)})")
            elif job.variant == "base" and released.built_from is None:
                lines.append(f"{job.image}: release {self.release} does not record the image it was built FROM")
        return lines

    def wheels(self, jobs: Iterable[BuildJob]) -> list[LockedWheel]:
        """The locked wheels of these builds, each once."""
        return wheellock.merged([list(self.images[job.image].wheels or ()) for job in jobs])

    def step_locks(self, image: str) -> dict[str, str]:
        return self.images[image].step_locks()

    def source_date_epoch(self, image: str) -> int | None:
        """The time the release's build gave the image's environment files, to give them again (build.jobs)."""
        return self.images[image].source_date_epoch

    def base_of(self, image: str) -> str | None:
        built_from = self.images[image].built_from
        return built_from.image if built_from else None


def check(released: FromRelease, jobs: list[BuildJob], sources: list[wheellock.Source], engine: Engine,
          base_for: Callable[[str], str | None]) -> list[LockedWheel]:
    """Refuse, before any build, a rebuild that cannot give the release's images: an image it does not hold, a locked
    wheel no source serves with its sha256, a FROM image that is not the one the release was built from. The locked
    wheels of these builds, each once, when none is refused."""
    lines = released.problems(jobs)
    wheels = [] if lines else released.wheels(jobs)
    if not lines:
        lines = wheellock.unserved(wheels, sources)
        lines += base_problems(released, [job for job in jobs if job.variant == "base"], engine, base_for)
    if lines:
        raise UserError([f"--from-release {released.path}: {line}" for line in lines])
    return wheels


def base_problems(released: FromRelease, jobs: list[BuildJob], engine: Engine,
                  base_for: Callable[[str], str | None]) -> list[str]:
    """Each base build's FROM (--base-image, else the release's) must be the image the release was built from: by its
    digest where the release pinned one (the engine checks that as it pulls), else by the ID it had then."""
    lines = []
    for job in jobs:
        built_from = released.images[job.image].built_from
        assert built_from is not None  # problems() refused a base image without it
        reference = base_for(job.platform) or built_from.image
        pinned = reference.rpartition("@")[2]
        if DIGEST.fullmatch(pinned) and reference == built_from.image:
            continue
        found, pulled = engine.image_id(reference), None
        if found is None:
            pulled = engine.pull(reference, None)
            found = engine.image_id(reference)
        if found is None:
            lines.append(f"{job.image} was built FROM {built_from.image}; {reference} is not on this engine and its "
                         f"pull failed ({pulled}): load that image, or give --base-image REF of it")
        elif built_from.id is not None and found != built_from.id:
            lines.append(f"{job.image} was built FROM {built_from.image}, then {built_from.id}; {reference} is {found} "
                         "on this engine: load that image, or give --base-image REF@DIGEST of it (an ID is the config "
                         "digest on the classic store, the manifest digest on the containerd store)")
    return lines


def build_sources(inputs: BuildInputs, jobs: list[BuildJob], fetch: Fetch) -> list[wheellock.Source]:
    """Where these builds' pip looks: the --wheelhouse, then (unless --offline) the package index (--pip-index-url, else
    PyPI) and the torch index (--torch-index-url, else each entry's)."""
    wheelhouses = [wheellock.Wheelhouse(inputs.wheelhouse)] if inputs.wheelhouse else []
    if inputs.offline:
        return wheelhouses
    torch_indexes = [inputs.torch_index_url] if inputs.torch_index_url else sorted(
        {job.spec.torch_index for job in jobs if job.spec.torch_index})
    urls = dict.fromkeys([inputs.pip_index_url or wheellock.PYPI, *torch_indexes])
    return [*wheelhouses, *(wheellock.Index(url, fetch) for url in urls)]
