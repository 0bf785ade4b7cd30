"""Proof that travels with the image, checked by a client this project did not write. The CPU entry's release is pushed
as candidates with --sign-key (each image attested: SBOM, provenance, smoke results) to the real registry (distribution
2.8, TLS, htpasswd), promoted with --sign-key (every release tag signed), and skopeo (Debian trixie's 1.18, with
sigstore; scripts/install-skopeo.sh) copies each release tag under a containers policy.json of type sigstoreSigned:
every promoted tag passes, and a tag re-pushed after signing, a signature of another key and a candidate tag (signed
for no tag of its own) are refused. `build.py verify` prints each tag's attestations and exits 1 on each tampering,
an attestation whose subject was swapped included."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from torchimages.publish.attachments import fallback_tag
from torchimages.registry import RegistryClient

from ...buildpy import build_py
from ..conftest import CANDIDATE, RELEASE, ROOT, Registry, as_release_user

pytestmark = [pytest.mark.lane("main")]

REPOSITORY = "ml/signed"
IMAGES = ("torch2.13.0-cpu-py3.11", "torch2.13.0-cpu-py3.11-jupyter", "torch2.13.0-cpu-py3.11-ssh")
OCI_MANIFEST, OCI_INDEX = "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class SignedRelease:
    registry: Registry
    folder: Path  # under /tmp: what skopeo's chroot sees
    public_key: Path
    release: dict
    seconds: dict[str, float]

    @property
    def client(self) -> RegistryClient:
        return RegistryClient(self.registry.host, username=self.registry.user, password=self.registry.password,
                              ca=self.registry.folder / "ca.crt")

    def tag(self, image: str, candidate: bool = False) -> str:
        return f"{self.registry.host}/{REPOSITORY}:{RELEASE}-{f'{CANDIDATE}-' if candidate else ''}{image}"


@pytest.fixture(scope="module")
def skopeo() -> Path:
    result = subprocess.run(["bash", str(ROOT / "scripts" / "install-skopeo.sh")], capture_output=True, text=True,
                            timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def signed(registry: Registry, tested_report: Path, tmp_path_factory: pytest.TempPathFactory) -> SignedRelease:
    """The CPU entry's release pushed as signed candidates and promoted with the same key, each step timed."""
    folder = tmp_path_factory.mktemp("signed")
    assert str(folder).startswith("/tmp/")
    assert build_py("keygen", "--out", str(folder / "keys"), cwd=ROOT, timeout=60).returncode == 0
    report = folder / "report.json"
    report.write_text(tested_report.read_text())
    common = ("--registry", f"{registry.host}/{REPOSITORY}", "--plain", "--sign-key", str(folder / "keys" / "cosign.key"))
    started = time.monotonic()
    pushed = as_release_user("push", "--tag", RELEASE, "--report", str(report), "--candidate", CANDIDATE,
                             "--manifest", str(folder / "candidates.json"), *common, registry=registry, cwd=ROOT)
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    seconds = {"push": time.monotonic() - started}
    started = time.monotonic()
    promoted = as_release_user("promote", "--tag", RELEASE, "--candidates", str(folder / "candidates.json"),
                               "--manifest", str(folder / "release.json"), "--matrix", str(cpu_matrix(folder)),
                               *common, registry=registry, cwd=ROOT)
    assert promoted.returncode == 0, promoted.stderr[-3000:]
    seconds["promote"] = time.monotonic() - started
    return SignedRelease(registry, folder, folder / "keys" / "cosign.pub", json.loads((folder / "release.json").read_text()),
                         seconds)


def cpu_matrix(folder: Path) -> Path:
    import yaml

    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["images"] = [entry for entry in data["images"] if entry["flavor"] == "cpu"]
    path = folder / "cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def policy(release: SignedRelease, public_key: Path, name: str) -> list[str]:
    """skopeo's options for a policy.json that admits only images signed with `public_key` (the lines a cluster's
    containers policy holds, docs/releasing.md), and the registry's CA and credentials."""
    folder = release.folder / name
    (folder / "registries.d").mkdir(parents=True, exist_ok=True)
    (folder / "certs").mkdir(exist_ok=True)
    shutil.copy(release.registry.folder / "ca.crt", folder / "certs" / "ca.crt")
    shutil.copy(public_key, folder / "cosign.pub")
    rule = {"type": "sigstoreSigned", "keyPath": str(folder / "cosign.pub"),
            "signedIdentity": {"type": "matchRepoDigestOrExact"}}
    (folder / "policy.json").write_text(json.dumps({
        "default": [{"type": "reject"}],
        "transports": {"docker": {f"{release.registry.host}/{REPOSITORY}": [rule]},
                       "dir": {"": [{"type": "insecureAcceptAnything"}]}}}))
    (folder / "registries.d" / "torchimages.yaml").write_text(
        f"docker:\n  {release.registry.host}:\n    use-sigstore-attachments: true\n")
    return ["--policy", str(folder / "policy.json"), "--registries.d", str(folder / "registries.d"),
            "--src-cert-dir", str(folder / "certs"), "--src-creds", f"{release.registry.user}:{release.registry.password}"]


def skopeo_copy(skopeo: Path, release: SignedRelease, options: list[str], reference: str) -> subprocess.CompletedProcess[str]:
    target = release.folder / f"copy-{hashlib.sha256(reference.encode()).hexdigest()[:12]}"
    shutil.rmtree(target, ignore_errors=True)
    return subprocess.run([str(skopeo), "copy", *options, f"docker://{reference}", f"dir:{target}"], capture_output=True,
                          text=True, timeout=600, check=False)


def verify(release: SignedRelease, reference: str, key: Path | None = None) -> subprocess.CompletedProcess[str]:
    return build_py("verify", reference, "--key", str(key or release.public_key), "--registry-user",
                    release.registry.user, "--registry-ca", str(release.registry.folder / "ca.crt"), cwd=ROOT,
                    timeout=120, env={**os.environ, "TORCHIMAGES_REGISTRY_PASSWORD": release.registry.password})


def test_skopeo_copies_every_promoted_tag_under_the_release_policy(skopeo: Path, signed: SignedRelease) -> None:
    options = policy(signed, signed.public_key, "policy")
    for image in IMAGES:
        copied = skopeo_copy(skopeo, signed, options, signed.tag(image))
        assert copied.returncode == 0, copied.stderr
    assert signed.release["signed_by"]["fingerprint"] in (signed.folder / "release.md").read_text()
    assert all(item["signature"] for item in signed.release["images"])


def test_skopeo_refuses_an_unsigned_candidate_tag_and_another_keys_signature(skopeo: Path,
                                                                              signed: SignedRelease) -> None:
    options = policy(signed, signed.public_key, "policy")
    candidate = skopeo_copy(skopeo, signed, options, signed.tag(IMAGES[0], candidate=True))
    assert candidate.returncode != 0 and "Source image rejected" in candidate.stderr, candidate.stderr
    assert build_py("keygen", "--out", str(signed.folder / "other"), cwd=ROOT, timeout=60).returncode == 0
    other = policy(signed, signed.folder / "other" / "cosign.pub", "other-policy")
    refused = skopeo_copy(skopeo, signed, other, signed.tag(IMAGES[0]))
    assert refused.returncode != 0 and "Source image rejected" in refused.stderr, refused.stderr
    assert verify(signed, signed.tag(IMAGES[0]), signed.folder / "other" / "cosign.pub").returncode == 1


def repush_changed(release: SignedRelease, image: str) -> None:
    """The release tag of `image` pointed at a changed manifest (an annotation added): an image pushed over the tag
    after it was signed."""
    client = release.client
    body, media_type = client.manifest(REPOSITORY, f"{RELEASE}-{image}")
    changed = json.loads(body)
    changed["annotations"] = {"changed": "after signing"}
    if media_type.startswith("application/vnd.docker"):
        changed["mediaType"] = OCI_MANIFEST  # only OCI manifests carry annotations
        changed["config"]["mediaType"] = "application/vnd.oci.image.config.v1+json"
        for layer in changed["layers"]:
            layer["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
    client.put_manifest(REPOSITORY, f"{RELEASE}-{image}", json.dumps(changed).encode(), OCI_MANIFEST)


def test_a_tag_repushed_after_signing_is_refused_by_skopeo_and_verify(skopeo: Path, signed: SignedRelease) -> None:
    image = IMAGES[2]
    before = verify(signed, signed.tag(image))
    assert before.returncode == 0, before.stderr
    repush_changed(signed, image)
    refused = skopeo_copy(skopeo, signed, policy(signed, signed.public_key, "policy"), signed.tag(image))
    assert refused.returncode != 0 and "Source image rejected" in refused.stderr, refused.stderr
    result = verify(signed, signed.tag(image))
    assert result.returncode == 1 and "is not signed" in result.stderr, result.stderr


def test_verify_prints_each_tags_attestations(signed: SignedRelease) -> None:
    for image in IMAGES[:2]:
        result = verify(signed, signed.tag(image))
        assert result.returncode == 0 and f"verified: {signed.tag(image)}" in result.stdout, result.stderr
        out = result.stdout
        assert "attestation https://spdx.dev/Document:" in out and " deb" in out and " pypi" in out, out
        assert f"attestation https://slsa.dev/provenance/v1: release {RELEASE}, {image} (linux/amd64): torch 2.13.0" \
            in out and "FROM " in out and "wheels" in out, out
        assert "attestation https://in-toto.io/attestation/test-result/v0.1: WARNED:" in out, out
        assert "for lack of a GPU" in out, out


def test_verify_refuses_an_attestation_whose_subject_was_swapped(signed: SignedRelease) -> None:
    """A tamperer rewrites an attestation's statement to name another image (the envelope's signature kept), uploads it
    as a new blob and artifact and points the fallback index at it: the signature no longer verifies."""
    client = signed.client
    digest = next(i["digest"] for i in signed.release["images"] if i["image"] == IMAGES[1])
    index_body, _ = client.manifest(REPOSITORY, fallback_tag(digest))
    index = json.loads(index_body)
    artifact_body, _ = client.manifest(REPOSITORY, index["manifests"][0]["digest"])
    artifact = json.loads(artifact_body)
    envelope = json.loads(client.blob(REPOSITORY, artifact["layers"][0]["digest"], 1 << 25))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "e" * 64
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    forged = json.dumps(envelope).encode()
    client.put_blob(REPOSITORY, forged)
    artifact["layers"][0].update(digest=f"sha256:{hashlib.sha256(forged).hexdigest()}", size=len(forged))
    new_artifact = json.dumps(artifact).encode()
    artifact_digest = f"sha256:{hashlib.sha256(new_artifact).hexdigest()}"
    client.put_manifest(REPOSITORY, artifact_digest, new_artifact, OCI_MANIFEST)
    index["manifests"][0].update(digest=artifact_digest, size=len(new_artifact))
    client.put_manifest(REPOSITORY, fallback_tag(digest), json.dumps(index).encode(), OCI_INDEX)
    result = verify(signed, signed.tag(IMAGES[1]))
    assert result.returncode == 1 and "does not verify with this key" in result.stderr, result.stderr

