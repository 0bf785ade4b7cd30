"""Proof beside each image in the registry: the attestations push makes of what was proven, the signatures promote
makes of what is released, and the check promote makes of a candidate's attestations before it releases it.

Everything here is by digest: an image's attestations are statements about its manifest digest, a signature names the
digest and the release tag it was made for. A candidate promoted keeps its digest, so the attestations made at push
time are the release's."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import requests

from ..errors import visible
from ..events import EventSink, StageEvent
from ..manifest import ManifestImage, ReleaseManifest
from ..report import ImageRecord
from . import attest, signing
from .attachments import AttachmentError, Attachments, Subject, signature_tag


class ProofError(Exception):
    """A signature or attestation could not be made, written or verified; one line, nothing further is promoted."""


def subject_of(attachments: Attachments, digest: str) -> Subject:
    """The image's manifest as the registry holds it, hashed against its digest: what an attestation's subject names."""
    body, media_type = attachments.registry.manifest(attachments.name, digest)
    if f"sha256:{hashlib.sha256(body).hexdigest()}" != digest:
        raise ProofError(f"the registry answered {digest} with another manifest")
    return Subject(digest, media_type.split(";")[0].strip(), len(body))


@dataclass(frozen=True)
class Attester:
    """Signs and attaches the attestations of a release's pushed images with one key."""

    attachments: Attachments
    key: signing.SigningKey

    def attest_image(self, made: ReleaseManifest, item: ManifestImage, record: ImageRecord,
                     sbom: bytes | None) -> list[str]:
        """The image's SBOM, provenance and test result, each signed and attached to its digest; their types."""
        predicates: list[tuple[str, dict[str, object]]] = []
        if sbom is not None:
            predicates.append((attest.SBOM_TYPE, attest.sbom_predicate(sbom)))
        predicates += [(attest.PROVENANCE_TYPE, attest.provenance_predicate(record, item, made.release)),
                       (attest.TEST_RESULT_TYPE, attest.test_result_predicate(record))]
        subject = subject_of(self.attachments, item.digest)
        for predicate_type, predicate in predicates:
            statement = signing.statement(made.repository, item.digest, predicate_type, predicate)
            self.attachments.attach(subject, signing.envelope(self.key, statement), predicate_type)
        return [predicate_type for predicate_type, _ in predicates]

    def attest_release(self, made: ReleaseManifest, records: dict[str, ImageRecord], sboms: dict[str, bytes],
                       emit: EventSink) -> bool:
        """Every pushed image's attestations; whether all were written (a failure is its image's event)."""
        ok = True
        for item in made.images:
            try:
                types = self.attest_image(made, item, records[item.image], sboms.get(item.image))
                emit(StageEvent(item.image, "note", f"attested: {', '.join(t.rsplit('/', 2)[-2] for t in types)}",
                                stage="push"))
            except (requests.RequestException, AttachmentError, ProofError, ValueError) as exc:
                ok = False
                emit(StageEvent(item.image, "failed", f"attestations not written: {visible(str(exc))[:300]}",
                                stage="push"))
        return ok


@dataclass(frozen=True)
class Signed:
    """A digest signed for a release tag, and where the signature is (the .sig manifest's digest)."""

    reference: str  # REPOSITORY:TAG
    digest: str
    signature: str


def sign(attachments: Attachments, key: signing.SigningKey, targets: Sequence[tuple[str, str]], release: str) -> list[Signed]:
    """Each (REPOSITORY:TAG, digest) signed for that tag in cosign's key-based format; any failure raises ProofError
    (promote then writes no release tag)."""
    signed = []
    for reference, digest in targets:
        try:
            written = signed_already(attachments, key.public, reference, digest)
            if written is None:
                payload = signing.simple_signing_payload(reference, digest, release)
                written = attachments.add_signature(digest, payload, key.sign(payload))
        except (requests.RequestException, AttachmentError) as exc:
            raise ProofError(f"signing {reference} ({digest}) failed: {visible(str(exc))[:300]}") from None
        signed.append(Signed(reference, digest, written))
    return signed


def signed_already(attachments: Attachments, public: signing.PublicKey, reference: str, digest: str) -> str | None:
    """The signature manifest's digest when `digest` is signed for `reference` with this key already (a promotion run
    again signs nothing twice), else None."""
    for payload, signature in attachments.signatures(digest):
        try:
            if signing.verify_simple_signing(public, payload, signature, digest).reference == reference:
                return attachments.registry.digest(attachments.name, signature_tag(digest))
        except signing.SignatureInvalid:
            continue
    return None


def attested_types(attachments: Attachments, public: signing.PublicKey, digest: str) -> set[str]:
    """The predicate types of the attestations of `digest` that verify with the key and name that digest; an
    attestation that does not verify raises ProofError (tampered, or another key's)."""
    try:
        envelopes = attachments.attestations(digest)
    except (requests.RequestException, AttachmentError) as exc:
        raise ProofError(f"the attestations of {digest} could not be read: {visible(str(exc))[:300]}") from None
    found = set()
    for raw in envelopes:
        try:
            found.add(signing.verify_envelope(public, raw, digest).predicate_type)
        except signing.SignatureInvalid as exc:
            raise ProofError(f"an attestation of {digest}: {exc}") from None
    return found


def check_attested(attachments: Attachments, public: signing.PublicKey, images: Sequence[tuple[str, str]]) -> None:
    """Each (image, digest) has a verified provenance and test result (and whatever else it has verifies): what
    promote asks of a candidate before releasing it."""
    for image, digest in images:
        found = attested_types(attachments, public, digest)
        missing = [t for t in (attest.PROVENANCE_TYPE, attest.TEST_RESULT_TYPE) if t not in found]
        if missing:
            raise ProofError(f"{image} ({digest}) has no attestation of {', '.join(missing)} signed with this key: push "
                             "its candidates with --sign-key")
