"""Promotion: a release's candidate images become its release tags, all of them or none.

The images of a release are pushed under candidate tags (RELEASE-CANDIDATE-IMAGE, `push --candidate`), each job
its own entry. `build.py promote` then checks that every image of the matrix passed and was pushed, and only then
points each release tag at its candidate's digest with the registry API's manifest PUT: the manifest bytes are
copied, no layer is pulled or pushed. A refused release writes no release tag. A promotion cut short (a registry
that dies) is finished by running promote again: tags already at their digest are left as they are.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import requests

from ..errors import UserError
from ..events import EventSink, StageEvent
from ..input.grammar import architecture
from ..manifest import ManifestIndex, ReleaseManifest
from ..registry import RegistryClient, split_reference

T = TypeVar("T")
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
VARIANTS = {"arm64": "v8"}  # the OCI image index's platform variant for each architecture that has one


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


@dataclass
class IndexPromotion:
    """The release tag of an image built for several platforms (RELEASE-NAME): an OCI image index whose entries are the
    platforms' candidate manifests, by digest. `body` and `digest` are made from what the registry holds (prepare)."""

    name: str
    release_tag: str  # repository:tag
    tag: str
    members: tuple[tuple[str, str, str], ...]  # (platform, image, the image's manifest digest)
    body: bytes = b""
    digest: str = ""
    state: str = "pending"  # pending, unchanged, promoted, failed
    error: str | None = None


def index_plan(candidates: ReleaseManifest, indexed: dict[str, list[tuple[str, str]]]) -> list[IndexPromotion]:
    """One index per image name that the matrix builds for several platforms (name -> [(platform, image)]); every
    member is in the candidates' manifest, as plan() checked."""
    images = candidates.by_name()
    repository = candidates.repository
    return [IndexPromotion(name, f"{repository}:{candidates.release_tag(name)}", candidates.release_tag(name),
                           tuple((platform, image, images[image].digest) for platform, image in members))
            for name, members in indexed.items()]


def index_body(members: list[tuple[str, str, int, str]]) -> bytes:
    """The OCI image index of (platform, media type, size, digest) entries, in their order; the same members always
    make the same bytes, so a promotion run again finds its index in place."""
    manifests = [{"mediaType": media_type, "digest": digest, "size": size, "platform": oci_platform(platform)}
                 for platform, media_type, size, digest in members]
    index = {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests}
    return json.dumps(index, sort_keys=True, separators=(",", ":")).encode()


def oci_platform(platform: str) -> dict[str, str]:
    """linux/arm64 -> {"architecture": "arm64", "os": "linux", "variant": "v8"}."""
    arch = architecture(platform)
    found = {"architecture": arch, "os": platform.partition("/")[0]}
    return {**found, "variant": VARIANTS[arch]} if arch in VARIANTS else found


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

    def prepare(self, indexes: list[IndexPromotion]) -> None:
        """Each index's bytes, from its members' manifests as the registry holds them (media type, size), each checked
        against its digest: made before any PUT, so check() can compare them with what the tags hold."""
        for index in indexes:
            members = []
            for platform, image, digest in index.members:
                try:
                    body, media_type = self._retrying(f"reading {image}", lambda d=digest: self.registry.manifest(self.name, d))
                except requests.RequestException as exc:
                    raise PromotionRefused(f"{exc}; no release tag was written") from None
                if f"sha256:{hashlib.sha256(body).hexdigest()}" != digest:
                    raise PromotionRefused(f"the registry answered {image}'s digest {digest} with another manifest; no "
                                           "release tag was written")
                members.append((platform, media_type.split(";")[0].strip(), len(body), digest))
            index.body = index_body(members)
            index.digest = f"sha256:{hashlib.sha256(index.body).hexdigest()}"

    def check(self, promotions: list[Promotion], indexes: Sequence[IndexPromotion] = ()) -> None:
        """Before any PUT: a release tag that points at another image (or index) refuses the whole release (unless
        --force)."""
        conflicts = []
        for promotion in [*promotions, *indexes]:
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

    def promote_indexes(self, indexes: list[IndexPromotion]) -> None:
        """Each index PUT under its release tag, after every image of the release was promoted."""
        for index in indexes:
            if index.state == "unchanged":
                self.emit(StageEvent(index.name, "unchanged", f"{index.release_tag}@{index.digest}", stage="promote"))
                continue
            self.emit(StageEvent(index.name, "started", f"{index.release_tag} (image index)", stage="promote"))
            try:
                answered = self._retrying(f"writing {index.release_tag}", lambda i=index: self.registry.put_manifest(
                    self.name, i.tag, i.body, INDEX_TYPE))
                if answered != index.digest:
                    raise requests.RequestException(f"the registry stored {answered}, not {index.digest}")
                index.state = "promoted"
            except requests.RequestException as exc:
                index.state, index.error = "failed", str(exc)[:300]
            platforms = ", ".join(platform for platform, _image, _digest in index.members)
            self.emit(StageEvent(index.name, "pushed" if index.state == "promoted" else "failed",
                                 index.error or f"{index.release_tag}@{index.digest} ({platforms})", stage="promote"))

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


def release_manifest(candidates: ReleaseManifest, promotions: list[Promotion],
                     indexes: Sequence[IndexPromotion] = (), *, keep_images: bool = False) -> ReleaseManifest:
    """The release manifest: the candidates' images that were promoted, under their release tags (the digests are
    the same), and the image indexes written; their SBOMs are the candidates', copied beside the release manifest
    when it is written. `keep_images`: a release pushed as itself, whose images are already under their tags."""
    written = tuple(ManifestIndex(index.name, index.digest, tuple((platform, image) for platform, image, _ in index.members))
                    for index in indexes)
    if keep_images:
        return replace(candidates, indexes=written)
    promoted = {p.image for p in promotions}
    return replace(candidates.promoted(), images=tuple(i for i in candidates.images if i.image in promoted),
                   indexes=written)
