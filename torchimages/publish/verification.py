"""`build.py verify REF --key PUB.pem`: whether what a reference resolves to was signed and attested with the key.

The reference is resolved to a digest through the registry (the manifest is hashed: the digest is of the bytes read).
It is valid when a signature made with the key names that digest and the reference (its tag exactly, or, for a
reference by digest, its repository), and every attestation attached to the digest verifies with the key and is about
that digest, with its provenance and smoke results among them. An image index is verified by its own signature; with
`--platform` the host's image in it is verified too, attestations included. What the attestations say is printed:
versions, smoke counts, the FROM image by ID, the SBOM's packages. Exit 0 when valid, 1 when not (unsigned, tampered,
another key), 2 for bad input.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

import requests

from ..errors import UserError, visible
from ..input.grammar import DIGEST, PLATFORMS, VERSION_KEYS, image_reference_problem
from ..registry import RegistryClient
from . import attest, signing
from .attachments import AttachmentError, Attachments, manifests_of
from .promote import IMAGE_MANIFEST_TYPES, INDEX_TYPE

INDEX_TYPES = (INDEX_TYPE, "application/vnd.docker.distribution.manifest.list.v2+json")


@dataclass(frozen=True)
class Reference:
    """HOST[:PORT]/PATH with a tag or a digest, as the registry API names its parts."""

    host: str
    name: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        return f"{self.host}/{self.name}"

    def __str__(self) -> str:
        return self.repository + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse_reference(value: str) -> Reference:
    """A reference with its registry host, through the grammar: REPOSITORY:TAG or REPOSITORY@sha256:DIGEST."""
    if why := image_reference_problem(value):
        raise UserError(f"verify {why}")
    rest, _, digest = value.partition("@")
    host, _, path = rest.partition("/")
    if not path or not ("." in host or ":" in host or host == "localhost"):
        raise UserError(f"verify {visible(value)!r}: name the registry too (HOST[:PORT]/PATH:TAG), e.g. "
                        "registry.example.com/ml/pytorch:v2.7-torch2.3.1-cu121-cudnn8.9-py3.11")
    name, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    if digest and not DIGEST.fullmatch(digest):
        raise UserError(f"verify {visible(value)!r}: only sha256 digests are verified")
    if not tag and not digest:
        raise UserError(f"verify {visible(value)!r}: give a tag or a digest (what was signed)")
    return Reference(host, name, tag or None, digest or None)


@dataclass
class Verdict:
    """What was found, line by line, and whether everything verified."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(visible(line))

    def refuse(self, problem: str) -> None:
        self.problems.append(visible(problem))

    @property
    def valid(self) -> bool:
        return not self.problems


class Verifier:
    def __init__(self, registry: RegistryClient, reference: Reference, public: signing.PublicKey) -> None:
        self.registry, self.reference, self.public = registry, reference, public
        self.attachments = Attachments(registry, reference.name)

    def run(self, platform: str | None) -> Verdict:
        verdict = Verdict()
        verdict.say(f"key {self.public.fingerprint}")
        try:
            digest, media_type, body = self.resolve(self.reference.digest or str(self.reference.tag))
            verdict.say(f"{self.reference} -> {digest} ({media_type})")
            self.check_signature(verdict, digest, exact=self.reference.tag is not None)
            if media_type in INDEX_TYPES:
                self.follow_index(verdict, body, platform)
            else:
                self.check_attestations(verdict, digest)
        except (requests.RequestException, AttachmentError) as exc:
            verdict.refuse(f"the registry: {exc}")
        return verdict

    def resolve(self, reference: str) -> tuple[str, str, bytes]:
        try:
            body, header = self.registry.manifest(self.reference.name, reference)
        except requests.HTTPError as exc:
            if exc.response is not None and exc.response.status_code == 404:
                raise UserError(f"verify {self.reference}: the registry has no such tag or digest") from None
            raise
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
        if DIGEST.fullmatch(reference) and digest != reference:
            raise AttachmentError(f"the registry answered {reference} with a manifest whose digest is {digest}")
        try:
            media_type = json.loads(body).get("mediaType") or header.split(";")[0].strip()
        except (ValueError, AttributeError, RecursionError):
            raise AttachmentError(f"{reference}: the registry answered no JSON manifest") from None
        if media_type not in (*INDEX_TYPES, *IMAGE_MANIFEST_TYPES):
            raise AttachmentError(f"{reference} is {str(media_type)[:80]}, not an image or an image index")
        return digest, str(media_type), body

    def check_signature(self, verdict: Verdict, digest: str, *, exact: bool) -> None:
        """A signature with the key naming `digest`, for the reference's tag (`exact`) or repository."""
        found = self.attachments.signatures(digest)
        if not found:
            verdict.refuse(f"{digest} is not signed (no signature under {digest.replace(':', '-')}.sig)")
            return
        wanted = f"{self.reference.repository}:{self.reference.tag}" if exact else None
        failures = []
        for payload, signature in found:
            try:
                signed = signing.verify_simple_signing(self.public, payload, signature, digest)
            except signing.SignatureInvalid as exc:
                failures.append(str(exc))
                continue
            if why := identity_mismatch(signed.reference, wanted, self.reference.repository):
                failures.append(why)
                continue
            verdict.say(f"signature: {digest} signed for {signed.reference} (release {signed.release or '?'})")
            return
        verdict.refuse(f"{digest}: no signature verifies with this key ({'; '.join(sorted(set(failures)))[:300]})")

    def follow_index(self, verdict: Verdict, body: bytes, platform: str | None) -> None:
        members = {f"{m['platform'].get('os')}/{m['platform'].get('architecture')}": m.get("digest")
                   for m in manifests_of(body) if isinstance(m.get("platform"), dict)}
        verdict.say(f"image index of {', '.join(sorted(members))}")
        if platform is None:
            verdict.say("give --platform to verify one platform's image and its attestations")
            return
        member = members.get(platform)
        if not isinstance(member, str) or not DIGEST.fullmatch(member):
            verdict.refuse(f"the index holds no {platform} image")
            return
        digest, media_type, _body = self.resolve(member)
        verdict.say(f"{platform}: {digest} ({media_type})")
        self.check_signature(verdict, digest, exact=False)
        self.check_attestations(verdict, digest)

    def check_attestations(self, verdict: Verdict, digest: str) -> None:
        envelopes = self.attachments.attestations(digest)
        found: dict[str, signing.Attestation] = {}
        for raw in envelopes:
            try:
                attestation = signing.verify_envelope(self.public, raw, digest)
            except signing.SignatureInvalid as exc:
                verdict.refuse(f"an attestation of {digest}: {exc}")
                continue
            found[attestation.predicate_type] = attestation
        for predicate_type in (attest.PROVENANCE_TYPE, attest.TEST_RESULT_TYPE):
            if predicate_type not in found:
                verdict.refuse(f"{digest} has no {predicate_type} attestation signed with this key")
        for predicate_type, attestation in found.items():
            verdict.say(f"attestation {predicate_type}: {summary(predicate_type, attestation.predicate)}")


def identity_mismatch(signed: str, exact: str | None, repository: str) -> str | None:
    """A signature names the reference it was made for: a tag must be that tag (as skopeo's matchRepoDigestOrExact
    asks); a digest, any reference in the same repository."""
    if exact is not None:
        return None if signed == exact else f"the signature is for {signed}, not {exact}"
    if signed.startswith((f"{repository}:", f"{repository}@")) or signed == repository:
        return None
    return f"the signature is for {signed}, another repository than {repository}"


def summary(predicate_type: str, predicate: dict[str, object]) -> str:
    """One line of what an attestation says, from its (verified) predicate."""
    try:
        if predicate_type == attest.SBOM_TYPE:
            kinds = Counter(str(ref.get("referenceLocator", "")).split("/")[0].removeprefix("pkg:")
                            for package in predicate.get("packages", []) for ref in package.get("externalRefs", [])
                            if ref.get("referenceType") == "purl")
            return f"{len(predicate.get('packages', []))} packages ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})"
        if predicate_type == attest.PROVENANCE_TYPE:
            definition, run = predicate["buildDefinition"], predicate["runDetails"]
            external, versions = definition["externalParameters"], definition["externalParameters"].get("versions", {})
            dependencies = definition.get("resolvedDependencies", [])
            base = next((d for d in dependencies if str(d.get("uri", "")).startswith("docker-image://")), {})
            wheels = sum(1 for d in dependencies if str(d.get("uri", "")).startswith("wheel:"))
            said = ", ".join(f"{k} {versions[k]}" for k in VERSION_KEYS if versions.get(k))
            return (f"release {external.get('release')}, {external.get('image')} ({external.get('platform')}): {said}; "
                    f"FROM {str(base.get('uri', '?')).removeprefix('docker-image://')} "
                    f"sha256:{base.get('digest', {}).get('sha256', '?')}; {wheels} wheels; built by "
                    f"{run['builder']['version'].get('builder')} on engine {run['builder']['version'].get('engine')}")
        if predicate_type == attest.TEST_RESULT_TYPE:
            return (f"{predicate.get('result')}: {len(predicate.get('passedTests', []))} passed, "
                    f"{len(predicate.get('failedTests', []))} failed, {len(predicate.get('warnedTests', []))} skipped "
                    f"({len(predicate.get('skippedForLackOfGpu', []))} for lack of a GPU)")
    except (KeyError, TypeError, AttributeError):
        return "(its predicate is not in the shape this tool writes)"
    return f"{len(json.dumps(predicate))} bytes"


def check_platform(platform: str | None) -> None:
    if platform is not None and platform not in PLATFORMS:
        raise UserError(f"--platform {visible(platform)!r}: not a platform; valid: {', '.join(PLATFORMS)}")
