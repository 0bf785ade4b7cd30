"""Promotion: a release's candidate images become its release tags, all of them or none.

The images of a release are pushed under candidate tags (RELEASE-CANDIDATE-IMAGE, `push --candidate`), each job
its own entry. `build.py promote` then checks that every image of the matrix passed and was pushed, and only then
points each release tag at its candidate's digest with the registry API's manifest PUT: the manifest bytes are
copied, no layer is pulled or pushed. A refused release writes no release tag. A promotion cut short (a registry
that dies) is finished by running promote again: tags already at their digest are left as they are.

What a release tag or an image index says must be true of the bytes it points at, so before the first PUT every
candidate is inspected (`Promoter.inspect`): its platform is the one the matrix builds that image for (and the one its
name says); no digest stands for two platforms; its manifest, read by digest and hashed, is one image's manifest (never
an index), whose media type is read from those bytes, not from a header the digest does not cover; and its config
blob, hashed too, says the os, architecture and variant the image is promoted for. An index built from that can send
an arm64 host nothing but the arm64 image.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import requests

from ..errors import UserError, visible
from ..events import EventSink, StageEvent
from ..input.grammar import DEFAULT_PLATFORM, architecture, digest_problem, image_platform_problem
from ..input.specs import image_tag
from ..manifest import ManifestIndex, ReleaseManifest
from ..registry import RegistryClient, split_reference

T = TypeVar("T")
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IMAGE_MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json", OCI_MANIFEST)
VARIANTS = {"arm64": "v8"}  # the OCI image index's platform variant for each architecture that has one
MAX_CONFIG_BYTES = 4 << 20  # an image's config is a few kB; a larger answer is not read


class PromotionRefused(Exception):
    """The release is not complete or a release tag points elsewhere: nothing was promoted."""


@dataclass
class Promotion:
    image: str
    digest: str
    candidate_tag: str  # repository:tag the image was pushed to
    release_tag: str  # repository:tag it becomes
    tag: str  # the release tag alone: what the manifest PUT names
    platform: str = DEFAULT_PLATFORM  # what the matrix builds it for
    state: str = "pending"  # pending, unchanged (already there), promoted, failed
    error: str | None = None
    body: bytes = b""  # its manifest as the registry holds it, hashed to its digest (inspect)
    media_type: str = ""  # read from those bytes


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


def index_plan(promotions: Sequence[Promotion], indexed: dict[str, list[tuple[str, str]]],
               repository: str, release: str) -> list[IndexPromotion]:
    """One index per image name that the matrix builds for several platforms (name -> [(platform, image)]), over the
    promotions of its platforms' images, which plan() made and checked."""
    images = {promotion.image: promotion for promotion in promotions}
    plans = []
    for name, members in indexed.items():
        for platform, image in members:
            if images[image].platform != platform:
                raise PromotionRefused(f"{image} is promoted for {images[image].platform}, but the index {name} lists "
                                       f"it for {platform}; no release tag was written")
        tag = image_tag(release, name)
        plans.append(IndexPromotion(name, f"{repository}:{tag}", tag,
                                    tuple((platform, image, images[image].digest) for platform, image in members)))
    return plans


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


def plan(candidates: ReleaseManifest, expected: dict[str, str]) -> list[Promotion]:
    """One promotion per image of the release (`expected`: image -> the platform the matrix builds it for); refused
    unless the manifest is a candidates' one holding every image the matrix makes (a failed or missing entry leaves
    its images out of the merged manifest), each recorded for the platform the matrix builds it for, and no digest
    for two platforms. Every tag is derived from the release and the image name (manifest.ReleaseManifest), never
    taken from the file."""
    if not candidates.candidate:
        raise UserError("this manifest holds no candidate images (push with --candidate ID, merge with build.py manifest)")
    images = candidates.by_name()
    missing = [name for name in expected if name not in images]
    if missing:
        raise PromotionRefused(f"release {candidates.release}: {len(missing)} of {len(expected)} images "
                               f"did not pass or were not pushed ({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}); "
                               "no release tag was written")
    for name, platform in expected.items():
        recorded = images[name].platform
        if recorded != platform or image_platform_problem(name, recorded):
            raise PromotionRefused(f"{name} is recorded as {recorded} in the candidates' manifest, but the matrix builds "
                                   f"it for {platform}; no release tag was written")
    platforms_of: dict[str, set[str]] = {}
    for name in expected:
        platforms_of.setdefault(images[name].digest, set()).add(images[name].platform)
    if twice := next((d for d, found in platforms_of.items() if len(found) > 1), None):
        raise PromotionRefused(f"the digest {twice} is listed for {' and '.join(sorted(platforms_of[twice]))}: one image "
                               "cannot be two platforms' image; no release tag was written")
    repository = candidates.repository
    return [Promotion(name, images[name].digest, f"{repository}:{candidates.pushed_tag(name)}",
                      f"{repository}:{candidates.release_tag(name)}", candidates.release_tag(name), platform)
            for name, platform in expected.items()]


def image_manifest(body: bytes, what: str) -> tuple[str, str]:
    """(media type, config digest) of one image's manifest, from its own bytes; anything else refuses the release."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # the registry's bytes: not JSON, or nested past Python's limit
        data = None
    if not isinstance(data, dict):
        raise PromotionRefused(f"{what}: the registry holds no JSON manifest under its digest; no release tag was written")
    media_type = data.get("mediaType") or (OCI_MANIFEST if "config" in data and "manifests" not in data else None)
    if media_type not in IMAGE_MANIFEST_TYPES or "manifests" in data:
        said = visible(str(media_type))[:80] if media_type else "no image manifest"
        raise PromotionRefused(f"{what}: its digest is {said}, not one image's manifest ({', '.join(IMAGE_MANIFEST_TYPES)}); "
                               "an index lists images, never another index; no release tag was written")
    config = data.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(digest, str) or digest_problem(digest):
        raise PromotionRefused(f"{what}: its manifest names no config digest; no release tag was written")
    return str(media_type), digest


def config_platform_problem(config: bytes, platform: str) -> str | None:
    """Why an image config's os, architecture and variant are not `platform`'s (a config without a variant stands for
    its architecture's default, v8 for arm64, as containerd reads it), or None."""
    try:
        data = json.loads(config)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return "its config is not a JSON object"
    wanted = oci_platform(platform)
    found = {key: data.get(key) for key in ("os", "architecture")}
    found["variant"] = data.get("variant") or VARIANTS.get(str(found["architecture"]))
    if found != {**wanted, "variant": wanted.get("variant")}:
        said = "/".join(visible(str(found[k]))[:20] for k in ("os", "architecture", "variant") if found[k])
        return f"its config says {said}, not {platform}"
    return None


class Promoter:
    def __init__(self, registry: RegistryClient, repository: str, emit: EventSink, *, force: bool = False,
                 retries: int = 3, backoff: float = 1.0) -> None:
        self.registry, self.name = registry, split_reference(repository)[1]
        self.emit, self.force, self.retries, self.backoff = emit, force, retries, backoff

    def inspect(self, promotions: Sequence[Promotion]) -> None:
        """Each candidate's manifest read by digest and hashed, one image's manifest, its config blob hashed and of the
        platform it is promoted for: all before any PUT, and what is PUT later is these bytes."""
        for promotion in promotions:
            what = f"{promotion.image} ({promotion.digest})"
            try:
                body, _header = self._retrying(f"reading {promotion.candidate_tag}",
                                               lambda p=promotion: self.registry.manifest(self.name, p.digest))
                if f"sha256:{hashlib.sha256(body).hexdigest()}" != promotion.digest:
                    raise PromotionRefused(f"the registry answered {promotion.image}'s digest {promotion.digest} with "
                                           "another manifest; no release tag was written")
                media_type, config_digest = image_manifest(body, what)
                config = self._retrying(f"reading {promotion.image}'s config", lambda d=config_digest: self.registry.blob(
                    self.name, d, MAX_CONFIG_BYTES))
            except requests.RequestException as exc:
                raise PromotionRefused(f"{exc}; no release tag was written") from None
            if why := config_platform_problem(config, promotion.platform):
                raise PromotionRefused(f"{what}: {why}; an index would send {promotion.platform} hosts another "
                                       "platform's image; no release tag was written")
            promotion.body, promotion.media_type = body, media_type

    def prepare(self, indexes: list[IndexPromotion], promotions: Sequence[Promotion]) -> None:
        """Each index's bytes, from its members as inspect read them (media type from their bytes, size): made before any
        PUT, so check() can compare them with what the tags hold."""
        inspected = {promotion.image: promotion for promotion in promotions}
        for index in indexes:
            members = []
            for platform, image, digest in index.members:
                member = inspected[image]
                if not member.body or member.digest != digest:
                    raise PromotionRefused(f"{image} was not inspected before its index {index.name}; no release tag "
                                           "was written")
                members.append((platform, member.media_type, len(member.body), digest))
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
        """The candidate's manifest, the bytes inspect hashed to its digest, PUT under the release tag with the media type
        those bytes say; the registry must answer its digest."""
        if not promotion.body:
            raise requests.RequestException(f"{promotion.image} was not inspected; nothing was written")
        answered = self._retrying(f"writing {promotion.release_tag}", lambda: self.registry.put_manifest(
            self.name, promotion.tag, promotion.body, promotion.media_type))
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
