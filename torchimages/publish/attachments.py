"""Signatures and attestations stored beside an image in its registry, by the image's digest, never inside its index.

- A signature goes where cosign's key-based flow puts it and skopeo (`use-sigstore-attachments: true`) looks: an OCI
  manifest under the tag `sha256-HEX.sig`, one layer per signature, each layer the simple signing payload with its
  base64 signature in the annotation `dev.cosignproject.cosign/signature`.
- An attestation is an OCI artifact manifest (`artifactType` the DSSE envelope's media type, one layer: the envelope)
  whose `subject` is the image. On a registry with the referrers API that is all; on one without (distribution 2.8,
  Debian's docker-registry) the OCI 1.1 fallback tag `sha256-HEX` holds an image index listing the image's artifacts,
  which `oras discover` reads.

Every manifest read back is hashed against the digest it was asked for, and every blob against its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass

from ..input.grammar import digest_problem
from ..registry import RegistryClient
from . import signing

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
EMPTY_MEDIA = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
MAX_BLOB = 32 << 20  # an SBOM of a CUDA image is a few MB; nothing attached comes near this


class AttachmentError(Exception):
    """What the registry holds beside an image cannot be read as a signature or an attestation."""


def signature_tag(digest: str) -> str:
    """sha256:HEX -> sha256-HEX.sig (cosign's tag for an image's signatures)."""
    return f"{digest.replace(':', '-')}.sig"


def fallback_tag(digest: str) -> str:
    """sha256:HEX -> sha256-HEX (the OCI 1.1 referrers tag schema)."""
    return digest.replace(":", "-")


def encoded(document: dict[str, object]) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def descriptor(media_type: str, content: bytes, **extra: object) -> dict[str, object]:
    return {"mediaType": media_type, "digest": digest_of(content), "size": len(content), **extra}


@dataclass(frozen=True)
class Subject:
    """The image (or image index) things are attached to: its manifest's digest, media type and size."""

    digest: str
    media_type: str
    size: int


class Attachments:
    """Read and write one repository's signatures and attestations."""

    def __init__(self, registry: RegistryClient, name: str) -> None:
        self.registry, self.name = registry, name

    # --- signatures -------------------------------------------------------------------------------------------

    def add_signature(self, digest: str, payload: bytes, signature: bytes) -> str:
        """The signature stored under sha256-HEX.sig beside the others there (a signature with the same payload and
        key replaces none: it is the same layer); the digest of the .sig manifest written."""
        layers = [layer for layer in self._signature_layers(digest) if layer.get("digest") != digest_of(payload)]
        self.registry.put_blob(self.name, payload)
        layers.append(descriptor(signing.SIMPLE_SIGNING_MEDIA, payload, annotations={
            signing.SIGNATURE_ANNOTATION: base64_of(signature)}))
        config = encoded({"architecture": "", "config": {}, "created": "0001-01-01T00:00:00Z", "os": "",
                          "history": [{"created": "0001-01-01T00:00:00Z"}],
                          "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}})
        self.registry.put_blob(self.name, config)
        manifest = encoded({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": descriptor(OCI_CONFIG, config),
                            "layers": layers})
        return self.registry.put_manifest(self.name, signature_tag(digest), manifest, OCI_MANIFEST)

    def signatures(self, digest: str) -> list[tuple[bytes, str]]:
        """(payload, base64 signature) of every signature stored for `digest`; none when there is no .sig tag."""
        found = []
        for layer in self._signature_layers(digest):
            annotations = layer.get("annotations")
            annotation = annotations.get(signing.SIGNATURE_ANNOTATION) if isinstance(annotations, dict) else None
            if layer.get("mediaType") == signing.SIMPLE_SIGNING_MEDIA and isinstance(annotation, str):
                found.append((self._blob(str(layer["digest"])), annotation))
        return found

    def _signature_layers(self, digest: str) -> list[dict[str, object]]:
        body = self._manifest_or_none(signature_tag(digest))
        return layers_of(body) if body is not None else []

    # --- attestations -------------------------------------------------------------------------------------------

    def attach(self, subject: Subject, envelope: bytes, predicate_type: str) -> str:
        """An attestation's envelope as an artifact manifest whose subject is the image, listed under the fallback tag
        where the registry has no referrers API; the artifact manifest's digest."""
        self.registry.put_blob(self.name, EMPTY)
        self.registry.put_blob(self.name, envelope)
        annotations = {PREDICATE_ANNOTATION: predicate_type}
        manifest = encoded({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": signing.DSSE_MEDIA,
            "config": descriptor(EMPTY_MEDIA, EMPTY, data="e30="),
            "layers": [descriptor(signing.DSSE_MEDIA, envelope, annotations=annotations)],
            "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size},
            "annotations": annotations})
        artifact = self.registry.put_manifest(self.name, digest_of(manifest), manifest, OCI_MANIFEST)
        if self.registry.referrers(self.name, subject.digest) is None:
            self._list_in_fallback(subject.digest, descriptor(OCI_MANIFEST, manifest, artifactType=signing.DSSE_MEDIA,
                                                              annotations=annotations))
        return artifact

    def _list_in_fallback(self, digest: str, entry: dict[str, object]) -> None:
        """The fallback index of `digest` with `entry` added (entries of other artifacts kept, this one once)."""
        body = self._manifest_or_none(fallback_tag(digest))
        manifests = [m for m in (manifests_of(body) if body is not None else []) if m.get("digest") != entry["digest"]]
        index = encoded({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*manifests, entry]})
        self.registry.put_manifest(self.name, fallback_tag(digest), index, OCI_INDEX)

    def attestations(self, digest: str) -> list[bytes]:
        """Every DSSE envelope attached to `digest`: through the referrers API, else the fallback tag."""
        listed = self.registry.referrers(self.name, digest)
        if listed is None:
            listed = self._manifest_or_none(fallback_tag(digest))
        envelopes = []
        for entry in manifests_of(listed) if listed is not None else []:
            if entry.get("artifactType") != signing.DSSE_MEDIA:
                continue
            artifact = self._manifest(str(entry.get("digest")))
            for layer in layers_of(artifact):
                if layer.get("mediaType") == signing.DSSE_MEDIA:
                    envelopes.append(self._blob(str(layer["digest"])))
        return envelopes

    # --- reads, each hashed -------------------------------------------------------------------------------------

    def _manifest_or_none(self, tag: str) -> bytes | None:
        if self.registry.digest(self.name, tag) is None:
            return None
        body, _media_type = self.registry.manifest(self.name, tag)
        return body

    def _manifest(self, digest: str) -> bytes:
        if digest_problem(digest):
            raise AttachmentError(f"a listed artifact has no digest ({digest[:80]!r})")
        body, _media_type = self.registry.manifest(self.name, digest)
        if f"sha256:{hashlib.sha256(body).hexdigest()}" != digest:
            raise AttachmentError(f"the registry answered {digest} with another manifest")
        return body

    def _blob(self, digest: str) -> bytes:
        if digest_problem(digest):
            raise AttachmentError(f"a layer has no digest ({digest[:80]!r})")
        return self.registry.blob(self.name, digest, MAX_BLOB)


def base64_of(data: bytes) -> str:
    return base64.b64encode(data).decode()


def digest_of(content: bytes) -> str:
    return f"sha256:{hashlib.sha256(content).hexdigest()}"


def json_object(body: bytes, what: str) -> dict[str, object]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise AttachmentError(f"{what} is not a JSON object")
    return data


def layers_of(body: bytes) -> list[dict[str, object]]:
    layers = json_object(body, "a signature or attestation manifest").get("layers")
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise AttachmentError("a signature or attestation manifest lists no layers")
    return layers


def manifests_of(body: bytes) -> list[dict[str, object]]:
    manifests = json_object(body, "a referrers index").get("manifests")
    if not isinstance(manifests, list) or not all(isinstance(m, dict) for m in manifests):
        raise AttachmentError("a referrers index lists no manifests")
    return manifests
