"""Promotion: a release's candidate images become its release tags, all of them or none.

The images of a release are pushed under candidate tags (RELEASE-CANDIDATE-IMAGE, `push --candidate`), each job
its own entry. `build.py promote` then checks that every image of the matrix passed and was pushed, and only then
points each release tag at its candidate's digest with the registry API's manifest PUT: the manifest bytes are
copied, no layer is pulled or pushed. A refused release writes no release tag. A promotion cut short (a registry
that dies) is finished by running promote again: tags already at their digest are left as they are.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import requests

from ..errors import UserError
from ..events import EventSink, StageEvent
from ..manifest import ReleaseManifest
from ..registry import RegistryClient, split_reference

T = TypeVar("T")


class PromotionRefused(Exception):
    """The release is not complete or a release tag points elsewhere: nothing was promoted."""


@dataclass
class Promotion:
    image: str
    digest: str
    candidate_tag: str  # repository:tag the image was pushed to
    release_tag: str  # repository:tag it becomes
    tag: str  # the release tag alone: what the manifest PUT names
    state: str = "pending"  # pending, unchanged (already there), promoted, failed
    error: str | None = None


def plan(candidates: ReleaseManifest, expected: list[str]) -> list[Promotion]:
    """One promotion per image of the release; refused unless the manifest is a candidates' one holding every image
    the matrix makes (a failed or missing entry leaves its images out of the merged manifest). Every tag is derived
    from the release and the image name (manifest.ReleaseManifest), never taken from the file."""
    if not candidates.candidate:
        raise UserError("this manifest holds no candidate images (push with --candidate ID, merge with build.py manifest)")
    images = candidates.by_name()
    missing = [name for name in expected if name not in images]
    if missing:
        raise PromotionRefused(f"release {candidates.release}: {len(missing)} of {len(expected)} images "
                               f"did not pass or were not pushed ({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}); "
                               "no release tag was written")
    repository = candidates.repository
    return [Promotion(name, images[name].digest, f"{repository}:{candidates.pushed_tag(name)}",
                      f"{repository}:{candidates.release_tag(name)}", candidates.release_tag(name)) for name in expected]


class Promoter:
    def __init__(self, registry: RegistryClient, repository: str, emit: EventSink, *, force: bool = False,
                 retries: int = 3, backoff: float = 1.0) -> None:
        self.registry, self.name = registry, split_reference(repository)[1]
        self.emit, self.force, self.retries, self.backoff = emit, force, retries, backoff

    def check(self, promotions: list[Promotion]) -> None:
        """Before any PUT: a release tag that points at another image refuses the whole release (unless --force)."""
        conflicts = []
        for promotion in promotions:
            try:
                current = self._retrying(f"reading {promotion.release_tag}",
                                         lambda p=promotion: self.registry.digest(self.name, p.tag))
            except requests.RequestException as exc:
                raise PromotionRefused(f"{exc}; no release tag was written") from None
            if current == promotion.digest:
                promotion.state = "unchanged"
            elif current is not None and not self.force:
                conflicts.append(f"{promotion.release_tag} already points at {current}, not {promotion.digest}")
        if conflicts:
            raise PromotionRefused(f"release tags are immutable: {'; '.join(conflicts[:3])}; no release tag was written "
                                   "(--force moves them)")

    def promote(self, promotions: list[Promotion]) -> None:
        for promotion in promotions:
            self.emit(StageEvent(promotion.image, "queued", stage="promote"))
        for promotion in promotions:
            if promotion.state == "unchanged":
                self.emit(StageEvent(promotion.image, "unchanged", f"{promotion.release_tag}@{promotion.digest}",
                                     stage="promote"))
                continue
            self.emit(StageEvent(promotion.image, "started", promotion.release_tag, stage="promote"))
            try:
                self._promote_one(promotion)
                promotion.state = "promoted"
            except requests.RequestException as exc:
                promotion.state, promotion.error = "failed", str(exc)[:300]
            self.emit(StageEvent(promotion.image, "pushed" if promotion.state == "promoted" else "failed",
                                 promotion.error or f"{promotion.release_tag}@{promotion.digest}", stage="promote"))

    def _promote_one(self, promotion: Promotion) -> None:
        """The candidate's manifest, byte for byte, PUT under the release tag; the registry must answer its digest."""
        body, media_type = self._retrying(f"reading {promotion.candidate_tag}",
                                          lambda: self.registry.manifest(self.name, promotion.digest))
        read = f"sha256:{hashlib.sha256(body).hexdigest()}"
        if read != promotion.digest:  # what is PUT is what was tested, whatever the registry answered
            raise requests.RequestException(f"the registry answered {promotion.digest} with a manifest whose digest "
                                            f"is {read}; nothing was written")
        answered = self._retrying(f"writing {promotion.release_tag}",
                                  lambda: self.registry.put_manifest(self.name, promotion.tag, body, media_type))
        if answered != promotion.digest:
            raise requests.RequestException(f"the registry stored {answered}, not {promotion.digest}")

    def _retrying(self, what: str, action: Callable[[], T]) -> T:
        """Connection errors and 5xx answers are retried with backoff; other answers are final."""
        delay = self.backoff
        for attempt in range(1, self.retries + 2):
            try:
                return action()
            except requests.RequestException as exc:
                status = exc.response.status_code if exc.response is not None else None
                if (status is not None and status < 500) or attempt > self.retries:
                    raise requests.RequestException(f"{what} failed after {attempt} attempt(s): {exc}") from None
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")


def release_manifest(candidates: ReleaseManifest, promotions: list[Promotion]) -> ReleaseManifest:
    """The release manifest: the candidates' images that were promoted, under their release tags (the digests are
    the same); their SBOMs are the candidates', copied beside the release manifest when it is written."""
    promoted = {p.image for p in promotions}
    return replace(candidates.promoted(), images=tuple(i for i in candidates.images if i.image in promoted))
