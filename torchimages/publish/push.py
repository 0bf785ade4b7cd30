"""The publish stage: push what passed its smoke suite, read each digest back, write the release manifest.

The SDK does not raise on push errors (auth, permission, blob upload unknown): they arrive inside the
stream, so every stream is read to its end and checked. Transient errors are retried with bounded
backoff. Release tags are immutable: a tag that already points at another image is refused unless
forced; an identical image is not pushed again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TypeVar

import requests

from ..engine import ENGINE_ERRORS, Engine, pull_floor
from ..errors import UserError
from ..events import EventSink, Kind, StageEvent, ignore
from ..files import contained
from ..input.specs import Release
from ..manifest import BuiltFrom, ManifestImage, ReleaseManifest, SbomFile, SmokeCounts
from ..registry import Credentials, registry_client, split_reference
from ..report import ImageRecord, PushStage, Report

T = TypeVar("T")
TRANSIENT = ("connection refused", "connection reset", "timeout", "eof", "502", "503", "504", "blob upload unknown",
             "no such host", "i/o timeout", "tls handshake")
DENIED = ("unauthorized", "authentication required", "denied", "401", "403", "incorrect username or password")


class PushError(Exception):
    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass
class PushOutcome:
    image: str
    reference: str  # repository:tag pushed to
    digest: str | None = None
    size: int | None = None
    pushed: bool = False  # False when the registry already held this exact image
    error: str | None = None
    attempts: int = 0
    candidate: str | None = None
    tried: bool = True  # False: not pushed, by the rules (a failed suite, over budget, its base not pushed)
    min_docker: str | None = None  # the oldest Docker engine that pulls it, from its layers' media types (zstd: 23.0)

    def stage(self) -> PushStage:
        return PushStage(reference=self.reference, digest=self.digest, size=self.size, pushed=self.pushed,
                         error=self.error, attempts=self.attempts, candidate=self.candidate, min_docker=self.min_docker)


class Publisher:
    def __init__(self, engine: Engine, repository: str, release: Release, *, credentials: Credentials | None,
                 ca: Path | None = None, force: bool = False, retries: int = 3, backoff: float = 1.0,
                 emit: EventSink = ignore) -> None:
        self.engine, self.repository, self.credentials = engine, repository, credentials
        host, self.name = split_reference(repository)
        self.registry = registry_client(host, credentials, ca)
        self.force, self.retries, self.backoff, self.emit = force, retries, backoff, emit
        self.release = release  # a candidate's pushes go to RELEASE-CANDIDATE-IMAGE; `promote` makes them release tags

    def check_login(self) -> None:
        """Fail early, before anything is pushed, when the registry refuses these credentials."""
        try:
            response = self.registry.get("/v2/", headers={})
        except requests.RequestException as exc:
            raise UserError(f"registry {self.registry.base} does not answer: {exc}") from None
        if response.status_code in (401, 403):
            raise UserError(f"registry {self.registry.base} refused the credentials (HTTP {response.status_code}): "
                            "check --registry-user and the password, or docker login") from None

    def publish(self, report: Report) -> list[PushOutcome]:
        """Push every image whose smoke suite passed; a failed base stops its variants."""
        if report.release != self.release.tag:  # its images would go under another release's tags
            raise UserError(f"the report is of release {report.release}, not {self.release.tag}")
        outcomes: list[PushOutcome] = []
        failed_entries: set[tuple[str, str]] = set()  # (entry, platform) whose base was not pushed
        for record in report.images:
            self.emit(StageEvent(record.image, "queued", stage="push"))
        for record in report.images:
            tag = self.release.image_tag(record.image)
            reference = f"{self.repository}:{tag}"
            if why := not_pushed_because(record, failed_entries):
                outcome = PushOutcome(record.image, reference, error=f"not pushed: {why}", tried=False)
            else:
                self.emit(StageEvent(record.image, "started", reference, stage="push"))
                outcome = self._publish_one(record, tag)
            outcome.candidate = self.release.candidate
            if outcome.error and record.variant == "base":
                failed_entries.add((record.entry, record.platform))
            record.push = outcome.stage()
            outcomes.append(outcome)
            self.emit(StageEvent(record.image, end_of(outcome), outcome.error or f"{outcome.reference}@{outcome.digest}",
                                 stage="push"))
        return outcomes

    def _publish_one(self, record: ImageRecord, tag: str) -> PushOutcome:
        repository = self.repository
        reference = f"{repository}:{tag}"
        outcome = PushOutcome(record.image, reference)
        try:
            local_id = self.engine.image_id(record.tag)
            if local_id is None:
                outcome.error = f"{record.tag} is not on this engine: build and test it again before pushing"
                return outcome
            tested = tested_image_id(record)
            if tested and local_id != tested:
                outcome.error = (f"refused: {record.tag} now points at {local_id[:19]}, not the image its smoke suite "
                                 f"tested ({tested[:19]}); test it again before pushing")
                return outcome
            remote = self._retrying(outcome, f"reading {reference}", lambda: self.registry.tag(self.name, tag))
            # The same image: on the classic store its ID is its configuration's digest, on the containerd store
            # its manifest's (docs/engines.md)
            if remote and local_id in (remote.config_digest, remote.digest):
                outcome.digest, outcome.min_docker = remote.digest, pull_floor(remote.layer_types)
                return outcome
            if remote and not self.force:
                outcome.error = (f"refused: {reference} already points at another image ({remote.digest}); release "
                                 "tags are immutable: choose a new --tag, or --force to move it")
                return outcome
            self.engine.tag(local_id, repository, tag)  # by ID: the tested image, even if record.tag moves now
            outcome.digest, outcome.size = self._retrying(outcome, f"pushing {reference}",
                                                          lambda: self._push(record.image, repository, tag))
            outcome.pushed = True
            readback = self._retrying(outcome, f"reading {reference}", lambda: self.registry.tag(self.name, tag))
            if readback is None or readback.digest != outcome.digest:
                outcome.error = f"the registry reports {readback.digest if readback else 'no such tag'} after the push"
            else:  # what its layers need, as the registry serves them to a pull (--compression zstd: Docker 23.0)
                outcome.min_docker = pull_floor(readback.layer_types)
        except PushError as exc:
            outcome.error = str(exc)
        except ENGINE_ERRORS as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
        return outcome

    def _retrying(self, outcome: PushOutcome, what: str, action: Callable[[], T]) -> T:
        """Run `action`, retrying transient failures (connection, 5xx, blob upload unknown) with backoff."""
        delay, attempt = self.backoff, 0
        while True:
            attempt += 1
            outcome.attempts += 1
            try:
                return action()
            except (PushError, requests.ConnectionError, requests.Timeout, requests.HTTPError) as exc:
                transient = transient_failure(exc)
                if not transient or attempt > self.retries:
                    raise PushError(f"{what} failed after {attempt} attempt(s): {exc}", transient=transient) from None
                self.emit(StageEvent(outcome.image, "note", f"{what}: attempt {attempt} failed ({str(exc)[:200]}); "
                                     f"retrying in {delay:.1f} s", stage="push"))
                time.sleep(delay)
                delay *= 2

    def _push(self, image: str, repository: str, tag: str) -> tuple[str, int | None]:
        """One push, streamed; errors inside the stream raise PushError."""
        auth = self.credentials.auth_config() if self.credentials else None
        digest, size = None, None
        try:
            for chunk in self.engine.push(repository, tag, auth):
                if "error" in chunk:
                    message = str((chunk.get("errorDetail") or {}).get("message") or chunk["error"])
                    raise PushError(message, transient=is_transient(message))
                if chunk.get("status") in ("Pushed", "Layer already exists", "Mounted from"):
                    self.emit(StageEvent(image, "log", f"layer {chunk.get('id')}: {chunk['status']}", stage="push"))
                aux = chunk.get("aux") or {}
                if "Digest" in aux:
                    digest, size = aux["Digest"], aux.get("Size")
                elif digest is None and (said := pushed_digest(chunk, tag)):
                    digest, size = said
        except ENGINE_ERRORS as exc:
            raise PushError(str(exc), transient=is_transient(str(exc))) from None
        if digest is None:
            raise PushError("the push stream ended without a digest", transient=True)
        return digest, size


# The last status line of a push: "TAG: digest: sha256:... size: N". The containerd image store (Docker 26) says the
# digest only so; the classic store also sends it as `aux`.
PUSHED = re.compile(r"^(?P<tag>[\w][\w.-]{0,127}): digest: (?P<digest>sha256:[0-9a-f]{64}) size: (?P<size>[0-9]{1,12})$")


def pushed_digest(chunk: dict[str, object], tag: str) -> tuple[str, int] | None:
    """The digest and manifest size a push's status line gives for `tag`; None for any other line."""
    found = PUSHED.match(str(chunk.get("status") or ""))
    if not found or found["tag"] != tag:
        return None
    return found["digest"], int(found["size"])


def not_pushed_because(record: ImageRecord, failed_entries: set[tuple[str, str]]) -> str | None:
    """Why the rules keep an image from the registry: its suite failed, it is over budget, its base (of its platform)
    was not pushed."""
    if not record.smoke_passed:
        return "its smoke suite did not pass in this run"
    if not record.releasable:
        return f"over its size budget: {record.over_budget}"
    if (record.entry, record.platform) in failed_entries:
        return f"its base {record.entry} ({record.platform}) was not pushed"
    return None


def end_of(outcome: PushOutcome) -> Kind:
    """The push event that ends an image: pushed, unchanged (the registry held it), skipped (not tried) or failed."""
    if outcome.error:
        return "failed" if outcome.tried else "skipped"
    return "pushed" if outcome.pushed else "unchanged"


def tested_image_id(record: ImageRecord) -> str | None:
    """The ID of the image the smoke suite ran (recorded since the suite runs by ID), else the one built."""
    return (record.smoke.image_id if record.smoke else None) or record.image_id


def transient_failure(exc: Exception) -> bool:
    """Whether a failed call is worth another try: as the push stream said, or a dropped connection, a timeout or the
    registry's 5xx answer (a 4xx answer is final)."""
    if isinstance(exc, PushError):
        return exc.transient
    if isinstance(exc, requests.HTTPError):
        return exc.response is not None and exc.response.status_code >= 500
    return True


def is_transient(message: str) -> bool:
    lowered = message.lower()
    return not any(marker in lowered for marker in DENIED) and any(marker in lowered for marker in TRANSIENT)


def manifest(reports: list[Report], repository: str) -> ReleaseManifest:
    """The release manifest from one or more reports (separate per-image runs merge into the same result): each image
    the report records as pushed, with the digest the registry confirmed."""
    releases = {report.release for report in reports}
    if len(releases) != 1:
        raise UserError(f"reports of different releases cannot be merged: {sorted(releases)}")
    release = releases.pop()
    candidates = {r.push.candidate for report in reports for r in report.images if r.push and r.push.ok}
    if len(candidates) > 1:
        raise UserError(f"reports of different candidates cannot be merged: {sorted(map(str, candidates))}")
    made = ReleaseManifest(release=release, repository=repository, images=(),
                           candidate=candidates.pop() if candidates else None)
    images: dict[str, ManifestImage] = {}
    for report in reports:
        for record in report.images:
            if record.push and record.push.ok:
                images[record.image] = manifest_image(record, report, made)
    return replace(made, images=tuple(images[name] for name in sorted(images)))


def manifest_image(record: ImageRecord, report: Report, made: ReleaseManifest) -> ManifestImage:
    """One pushed image of a report; its push must be where this manifest's tags say, and its SBOM beside the report."""
    if record.smoke is None:
        raise UserError(f"{record.image}: the report records a push but no smoke results; merge the reports of runs "
                        "that ran the smoke suite")
    assert record.push is not None and record.push.digest is not None
    expected = f"{made.repository}:{made.pushed_tag(record.image)}"
    if record.push.reference != expected:
        raise UserError(f"{report.folder}: {record.image} was pushed to {record.push.reference}, not {expected}: merge "
                        "reports of pushes to this --registry")
    sbom = None
    if record.sbom and report.folder:
        file = contained(report.folder, record.sbom.path)
        if file is None:
            raise UserError(f"{report.folder}: the SBOM path of {record.image} leads out of the report's folder")
        sbom = SbomFile(file=file, sha256=record.sbom.sha256, packages=record.sbom.packages)
    smoke = record.smoke
    return ManifestImage(image=record.image, variant=record.variant, digest=record.push.digest,
                         versions=record.versions, size_bytes=record.size_bytes, layers=record.layers,
                         content_digest=record.content_digest, sbom=sbom, platform=record.platform,
                         runs_on=runs_on(record),
                         wheels=tuple(record.wheels) if record.wheels is not None else None,
                         smoke=SmokeCounts(smoke.passed, smoke.failed, smoke.skipped, smoke.skipped_no_gpu),
                         built_from=built_from(record),
                         source_date_epoch=(record.materials or {}).get("source_date_epoch"),
                         audit=asdict(record.audit) if record.audit else None)


def runs_on(record: ImageRecord) -> dict[str, str] | None:
    """What a host needs for the image: what its build recorded, and the oldest Docker engine that pulls what was
    pushed, where its layers need a newer one than this tool supports (min_docker; `build.py fit --docker`)."""
    floor = record.push.min_docker if record.push else None
    if floor is None:
        return record.runs_on
    return {**(record.runs_on or {}), "min_docker": floor}


def built_from(record: ImageRecord) -> BuiltFrom | None:
    """A base image's FROM, as its build's materials name it (a variant's FROM is its base, in the same release)."""
    materials = record.materials or {}
    if record.variant != "base" or not materials.get("from"):
        return None
    return BuiltFrom(image=materials["from"], id=materials.get("from_id"))
