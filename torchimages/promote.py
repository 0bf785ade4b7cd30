"""Promotion: a release's candidate images become its release tags, all of them or none.

The images of a release are pushed under candidate tags (RELEASE-CANDIDATE-IMAGE, `push --candidate`), each job
its own entry. `build.py promote` then checks that every image of the matrix passed and was pushed, and only then
points each release tag at its candidate's digest with the registry API's manifest PUT: the manifest bytes are
copied, no layer is pulled or pushed. A refused release writes no release tag. A promotion cut short (a registry
that dies) is finished by running promote again: tags already at their digest are left as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests

from .errors import UserError
from .events import EventSink, StageEvent
from .registry import RegistryClient, split_reference

T = TypeVar("T")


class PromotionRefused(Exception):
    """The release is not complete or a release tag points elsewhere: nothing was promoted."""


@dataclass
class Promotion:
    image: str
    digest: str
    candidate_tag: str  # repository:tag the image was pushed to
    release_tag: str  # repository:tag it becomes
    state: str = "pending"  # pending, unchanged (already there), promoted, failed
    error: str | None = None

    @property
    def tag(self) -> str:
        return self.release_tag.rsplit(":", 1)[1]


def plan(manifest: dict[str, Any], expected: list[str]) -> list[Promotion]:
    """One promotion per image of the release; refused unless the manifest is a candidate one holding every image
    the matrix makes (a failed or missing entry leaves its images out of the merged manifest)."""
    if not manifest.get("candidate"):
        raise UserError("this manifest holds no candidate images (push with --candidate ID, merge with build.py manifest)")
    images = {image["image"]: image for image in manifest["images"]}
    missing = [name for name in expected if name not in images]
    if missing:
        raise PromotionRefused(f"release {manifest['release']}: {len(missing)} of {len(expected)} images "
                               f"did not pass or were not pushed ({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}); "
                               "no release tag was written")
    return [Promotion(name, images[name]["digest"], images[name]["tag"], images[name]["release_tag"]) for name in expected]


class Promoter:
    def __init__(self, registry: RegistryClient, repository: str, emit: EventSink, *, force: bool = False,
                 retries: int = 3, backoff: float = 1.0) -> None:
        self.registry, self.name = registry, split_reference(repository)[1]
        self.emit, self.force, self.retries, self.backoff = emit, force, retries, backoff

    def check(self, promotions: list[Promotion]) -> None:
        """Before any PUT: a release tag that points at another image refuses the whole release (unless --force)."""
        conflicts = []
        for promotion in promotions:
            current = self._retrying(f"reading {promotion.release_tag}",
                                     lambda p=promotion: self.registry.digest(self.name, p.tag))
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


def release_manifest(candidates: dict[str, Any], promotions: list[Promotion], *, folder: Path) -> dict[str, Any]:
    """The release manifest: the candidate manifest with each image's release tag (the digests are the same); each
    SBOM is taken from beside the candidate manifest (`folder`), to be copied beside the release manifest."""
    tags = {p.image: p.release_tag for p in promotions}
    images = [{**image, "tag": tags[image["image"]]} for image in candidates["images"] if image["image"] in tags]
    for image in images:
        if image.get("sbom", {}).get("path"):
            sbom = dict(image["sbom"])
            source = folder / sbom.pop("path")
            image["sbom"] = {**sbom, "source": str(source)}
    return {**candidates, "candidate": None, "promoted_from": candidates["candidate"], "images": images}
