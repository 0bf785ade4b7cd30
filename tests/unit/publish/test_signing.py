"""Keys, signatures and attestations: what is signed, where it is stored beside the image, and that every kind of
tampering is refused: a payload or envelope changed, another key, a signature for another digest or reference, an
attestation whose subject was swapped. skopeo, a client this project did not write, verifies the same signatures in
tests/integration/publish/test_signatures.py."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from torchimages import manifest
from torchimages.errors import UserError
from torchimages.manifest import ManifestImage, ReleaseManifest, SignedBy, SmokeCounts
from torchimages.publish import attest, signing
from torchimages.publish.attachments import Attachments, Subject, fallback_tag, signature_tag
from torchimages.publish.proofs import Attester
from torchimages.publish.verification import Reference, Verifier, identity_mismatch, parse_reference
from torchimages.registry import RegistryClient

from ...buildpy import build_py
from ..conftest import ROOT, tls_server
from ..release_files import pushed_record
from .registry_stand_in import Registry, digest_of

IMAGE = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"digest": "sha256:" + "c" * 64}, "layers": []}).encode()
DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"


def new_key() -> signing.SigningKey:
    return signing.SigningKey(ec.generate_private_key(ec.SECP256R1()))


# --- keys -----------------------------------------------------------------------------------------------------


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_replaces_one(tmp_path: Path) -> None:
    result = build_py("keygen", "--out", str(tmp_path / "keys"), cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    private, public = tmp_path / "keys" / "cosign.key", tmp_path / "keys" / "cosign.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = signing.load_signing_key(private, None)
    assert key.public.fingerprint == signing.load_public_key(public).fingerprint
    assert key.public.fingerprint in result.stdout
    again = build_py("keygen", "--out", str(tmp_path / "keys"), cwd=tmp_path, timeout=60)
    assert again.returncode == 2 and "a key is never replaced" in again.stderr
    assert signing.load_signing_key(private, None).public.fingerprint == key.public.fingerprint


def test_an_encrypted_key_needs_its_passphrase_and_never_takes_it_from_the_command_line(tmp_path: Path) -> None:
    result = build_py("keygen", "--out", str(tmp_path), cwd=tmp_path, timeout=60,
                      env={**os.environ, signing.PASSWORD_ENV: "correct horse"})
    assert result.returncode == 0 and "(private, encrypted)" in result.stdout, result.stderr
    assert b"ENCRYPTED PRIVATE KEY" in (tmp_path / "cosign.key").read_bytes()
    with pytest.raises(UserError, match=f"give its passphrase in {signing.PASSWORD_ENV}"):
        signing.load_signing_key(tmp_path / "cosign.key", None)
    with pytest.raises(UserError, match="wrong passphrase"):
        signing.load_signing_key(tmp_path / "cosign.key", b"wrong")
    assert signing.load_signing_key(tmp_path / "cosign.key", b"correct horse")


@pytest.mark.parametrize(("content", "words"), [
    (b"not a key", "not a PEM private key"),
    (rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), "not an ECDSA P-256"),
    (ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), "not an ECDSA P-256"),
    (b"x" * 70000, "too big"),
], ids=["text", "rsa", "p384", "huge"])
def test_a_key_that_is_not_a_p256_private_key_is_one_line(tmp_path: Path, content: bytes, words: str) -> None:
    (tmp_path / "k.pem").write_bytes(content)
    with pytest.raises(UserError, match=words):
        signing.load_signing_key(tmp_path / "k.pem", None)


# --- the formats, verified ------------------------------------------------------------------------------------


def test_a_signature_verifies_only_unchanged_with_its_key_for_its_digest() -> None:
    key, digest = new_key(), digest_of(IMAGE)
    payload = signing.simple_signing_payload("r.example.com/ml/pt:v2.7-x", digest, "v2.7")
    signature = base64.b64encode(key.sign(payload)).decode()
    signed = signing.verify_simple_signing(key.public, payload, signature, digest)
    assert (signed.reference, signed.release) == ("r.example.com/ml/pt:v2.7-x", "v2.7")
    critical = json.loads(payload)["critical"]  # exactly what containers/image reads there, nothing added
    assert critical == {"identity": {"docker-reference": "r.example.com/ml/pt:v2.7-x"},
                        "image": {"docker-manifest-digest": digest}, "type": "cosign container image signature"}
    tampered = payload.replace(digest.encode(), digest_of(b"other").encode())
    with pytest.raises(signing.SignatureInvalid, match="does not verify"):
        signing.verify_simple_signing(key.public, tampered, signature, digest)
    with pytest.raises(signing.SignatureInvalid, match="does not verify"):
        signing.verify_simple_signing(new_key().public, payload, signature, digest)
    with pytest.raises(signing.SignatureInvalid, match=f"is for {digest}, not"):
        signing.verify_simple_signing(key.public, payload, signature, digest_of(b"other"))


def test_an_attestation_verifies_only_with_its_key_about_its_subject() -> None:
    key, digest = new_key(), digest_of(IMAGE)
    statement = signing.statement("r.example.com/ml/pt", digest, attest.TEST_RESULT_TYPE, {"result": "PASSED"})
    envelope = signing.envelope(key, statement)
    assert signing.verify_envelope(key.public, envelope, digest).predicate == {"result": "PASSED"}
    data = json.loads(envelope)
    swapped = json.loads(statement)
    swapped["subject"][0]["digest"]["sha256"] = "d" * 64  # another image's digest, signed again by the same key
    with pytest.raises(signing.SignatureInvalid, match="is about"):
        signing.verify_envelope(key.public, signing.envelope(key, json.dumps(swapped).encode()), digest)
    data["payload"] = base64.b64encode(json.dumps(swapped).encode()).decode()  # the subject swapped under the signature
    with pytest.raises(signing.SignatureInvalid, match="does not verify"):
        signing.verify_envelope(key.public, json.dumps(data).encode(), digest)
    with pytest.raises(signing.SignatureInvalid, match="does not verify"):
        signing.verify_envelope(new_key().public, envelope, digest)
    bare = json.loads(envelope)  # a signature over the payload alone, not DSSE's encoding of type and payload
    bare["signatures"][0]["sig"] = base64.b64encode(key.sign(statement)).decode()
    with pytest.raises(signing.SignatureInvalid, match="does not verify"):
        signing.verify_envelope(key.public, json.dumps(bare).encode(), digest)


@pytest.mark.parametrize(("signed", "exact", "problem"), [
    ("r.example.com/ml/pt:v2.7-x", "r.example.com/ml/pt:v2.7-x", False),
    ("r.example.com/ml/pt:v2.7-rc.1-x", "r.example.com/ml/pt:v2.7-x", True),
    ("r.example.com/ml/pt:v2.7-x", None, False),
    ("r.example.com/ml/pt2:v2.7-x", None, True),
    ("r.example.com/ml/p:v2.7-x", None, True),
])
def test_a_signature_names_the_tag_it_was_made_for(signed: str, exact: str | None, problem: bool) -> None:
    assert (identity_mismatch(signed, exact, "r.example.com/ml/pt") is not None) is problem


# --- stored beside the image, and verified as `build.py verify` does --------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    httpd, host, ca = tls_server(Registry, tmp_path_factory.mktemp("tls"))
    yield host, ca
    httpd.shutdown()  # type: ignore[attr-defined]


@pytest.fixture
def registry(server: tuple[str, Path]) -> tuple[RegistryClient, str]:
    Registry.reset()
    host, ca = server
    return RegistryClient(host, ca=ca), host


def signed_and_attested(client: RegistryClient, host: str, key: signing.SigningKey) -> str:
    """IMAGE under v2.7-x, signed for that tag, with a provenance and a test result attached."""
    digest = Registry.hold("v2.7-x", IMAGE, DOCKER_V2)
    attachments = Attachments(client, "ml/pt")
    payload = signing.simple_signing_payload(f"{host}/ml/pt:v2.7-x", digest, "v2.7")
    attachments.add_signature(digest, payload, key.sign(payload))
    for predicate_type in (attest.PROVENANCE_TYPE, attest.TEST_RESULT_TYPE):
        statement = signing.statement(f"{host}/ml/pt", digest, predicate_type, {"result": "PASSED"})
        attachments.attach(Subject(digest, DOCKER_V2, len(IMAGE)), signing.envelope(key, statement), predicate_type)
    return digest


def test_attachments_go_where_cosign_and_the_oci_fallback_put_them(registry: tuple[RegistryClient, str]) -> None:
    client, host = registry
    key = new_key()
    digest = signed_and_attested(client, host, key)
    sig = json.loads(Registry.manifests[Registry.tags[signature_tag(digest)]][0])
    [layer] = sig["layers"]
    assert layer["mediaType"] == signing.SIMPLE_SIGNING_MEDIA and signing.SIGNATURE_ANNOTATION in layer["annotations"]
    index = json.loads(Registry.manifests[Registry.tags[fallback_tag(digest)]][0])
    assert [m["artifactType"] for m in index["manifests"]] == [signing.DSSE_MEDIA] * 2
    for entry in index["manifests"]:
        artifact = json.loads(Registry.manifests[entry["digest"]][0])
        assert artifact["subject"] == {"mediaType": DOCKER_V2, "digest": digest, "size": len(IMAGE)}
    assert Verifier(client, parse_reference(f"{host}/ml/pt:v2.7-x"), key.public).run(None).valid


def test_a_registry_with_the_referrers_api_gets_no_fallback_tag(registry: tuple[RegistryClient, str]) -> None:
    client, host = registry
    Registry.referrers_api = True
    key = new_key()
    digest = signed_and_attested(client, host, key)
    assert fallback_tag(digest) not in Registry.tags
    assert Verifier(client, parse_reference(f"{host}/ml/pt:v2.7-x"), key.public).run(None).valid


def problems_of(client: RegistryClient, reference: str, key: signing.PublicKey) -> str:
    verdict = Verifier(client, parse_reference(reference), key).run(None)
    assert not verdict.valid
    return " | ".join(verdict.problems)


def test_verify_refuses_every_tampering(registry: tuple[RegistryClient, str]) -> None:
    client, host = registry
    key = new_key()
    digest = signed_and_attested(client, host, key)
    assert "no signature verifies with this key" in problems_of(client, f"{host}/ml/pt:v2.7-x", new_key().public)
    Registry.hold("v2.7-x", IMAGE.replace(b"[]", b"[ ]"), DOCKER_V2)  # the tag re-pushed after signing
    assert "is not signed" in problems_of(client, f"{host}/ml/pt:v2.7-x", key.public)
    Registry.tags["v2.7-x"] = digest
    Registry.tags["v2.7-y"] = digest  # the signed image under a tag it was not signed for
    assert "the signature is for" in problems_of(client, f"{host}/ml/pt:v2.7-y", key.public)
    assert Verifier(client, Reference(host, "ml/pt", None, digest), key.public).run(None).valid  # by digest: any tag
    swap_subject_of_first_attestation(client, digest)
    assert "does not verify with this key" in problems_of(client, f"{host}/ml/pt:v2.7-x", key.public)


def swap_subject_of_first_attestation(client: RegistryClient, digest: str) -> None:
    """What a tamperer can do in a registry: a new envelope blob whose statement names another subject (the signature
    kept), a new artifact manifest for it, and the fallback index pointed at that one."""
    attachments = Attachments(client, "ml/pt")
    index = json.loads(Registry.manifests[Registry.tags[fallback_tag(digest)]][0])
    artifact = json.loads(Registry.manifests[index["manifests"][0]["digest"]][0])
    envelope = json.loads(Registry.blobs[artifact["layers"][0]["digest"]])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "e" * 64
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    forged = json.dumps(envelope).encode()
    client.put_blob("ml/pt", forged)
    artifact["layers"][0].update(digest=digest_of(forged), size=len(forged))
    body = json.dumps(artifact).encode()
    client.put_manifest("ml/pt", digest_of(body), body, "application/vnd.oci.image.manifest.v1+json")
    index["manifests"][0].update(digest=digest_of(body), size=len(body))
    client.put_manifest("ml/pt", fallback_tag(digest), json.dumps(index).encode(), "application/vnd.oci.image.index.v1+json")
    assert attachments.attestations(digest)[0] == forged


def test_a_reference_that_names_no_registry_or_nothing_signed_is_bad_input() -> None:
    for value, words in (("debian:12", "name the registry"), ("r.example.com/ml/pt", "give a tag or a digest"),
                         ("r.example.com/ml/pt:v1\n", "not an image reference")):
        with pytest.raises(UserError, match=words):
            parse_reference(value)


# --- promote --sign-key: attestations checked, every release tag signed, before the first tag ----------------------

CPU = "torch2.13.0-cpu-py3.11"
CPU_IMAGES = (CPU, f"{CPU}-jupyter", f"{CPU}-ssh")


def hold_candidates(host: str) -> ReleaseManifest:
    """The CPU entry's three images under their candidate tags, each with a config blob, as push --candidate leaves them."""
    images = []
    for n, (name, variant) in enumerate(zip(CPU_IMAGES, ("base", "jupyter", "ssh"), strict=True)):
        config = json.dumps({"architecture": "amd64", "os": "linux", "n": n}).encode()
        Registry.blobs[digest_of(config)] = config
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2, "layers": [],
                           "config": {"digest": digest_of(config), "size": len(config)}}).encode()
        digest = Registry.hold(f"v2.7-rc.1-{name}", body, DOCKER_V2)
        images.append(ManifestImage(name, variant, digest, {"torch": "2.13.0", "python": "3.11"}, SmokeCounts(9, 0, 2, 2)))
    return ReleaseManifest("v2.7", f"{host}/ml/pt", candidate="rc.1", images=tuple(images))


def attested(client: RegistryClient, made: ReleaseManifest, key: signing.SigningKey) -> ReleaseManifest:
    """What push --candidate --sign-key adds: each image attested, the manifest naming the key."""
    records = {item.image: pushed_record(image=item.image, entry=CPU, variant=item.variant) for item in made.images}
    assert Attester(Attachments(client, "ml/pt"), key).attest_release(made, records, {}, lambda _event: None)
    return replace(made, signed_by=SignedBy(key.public.fingerprint, key.public.pem))


def promote_signed(host: str, ca: Path, folder: Path, made: ReleaseManifest,
                   key_file: Path) -> subprocess.CompletedProcess[str]:
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["images"], data["registry"] = [e for e in data["images"] if e["flavor"] == "cpu"], f"{host}/ml/pt"
    (folder / "matrix.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    manifest.write(made, folder / "candidates.json")
    (folder / "docker").mkdir(exist_ok=True)
    return build_py("promote", "--tag", "v2.7", "--candidates", str(folder / "candidates.json"), "--matrix",
                    str(folder / "matrix.yaml"), "--registry-ca", str(ca), "--plain", "--manifest",
                    str(folder / "release.json"), "--sign-key", str(key_file), cwd=folder, timeout=120,
                    env={**os.environ, "DOCKER_CONFIG": str(folder / "docker")})


def key_file(folder: Path) -> tuple[signing.SigningKey, Path]:
    key = new_key()
    path = folder / "cosign.key"
    path.write_bytes(key.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return key, path


def release_tags_written() -> list[str]:
    return [ref for ref in Registry.puts if ref.startswith("v2.7-torch")]


def test_promote_signs_every_release_tag_after_verifying_each_candidates_attestations(
        registry: tuple[RegistryClient, str], server: tuple[str, Path], tmp_path: Path) -> None:
    client, host = registry
    key, path = key_file(tmp_path)
    made = attested(client, hold_candidates(host), key)
    result = promote_signed(host, server[1], tmp_path, made, path)
    assert result.returncode == 0, result.stderr
    assert release_tags_written() == [f"v2.7-{name}" for name in CPU_IMAGES]
    released = manifest.read(tmp_path / "release.json")
    assert released.signed_by and released.signed_by.fingerprint == key.public.fingerprint
    for item in released.images:
        assert item.signature == Registry.tags[signature_tag(item.digest)]
        assert Verifier(client, parse_reference(f"{host}/ml/pt:v2.7-{item.image}"), key.public).run(None).valid
    assert key.public.fingerprint in (tmp_path / "release.md").read_text()
    puts = len(Registry.puts)
    assert promote_signed(host, server[1], tmp_path, made, path).returncode == 0  # run again: nothing signed twice
    assert len(Registry.puts) == puts


def test_a_candidate_without_attestations_or_of_another_key_promotes_nothing(
        registry: tuple[RegistryClient, str], server: tuple[str, Path], tmp_path: Path) -> None:
    client, host = registry
    key, path = key_file(tmp_path)
    bare = hold_candidates(host)
    result = promote_signed(host, server[1], tmp_path, bare, path)
    assert result.returncode == 1 and "has no attestation of" in result.stderr, result.stderr
    other = attested(client, bare, new_key())
    refused = promote_signed(host, server[1], tmp_path, other, path)
    assert refused.returncode == 1 and "the candidates were attested with the key" in refused.stderr, refused.stderr
    forged = replace(other, signed_by=SignedBy(key.public.fingerprint, key.public.pem))  # the manifest says our key
    refused = promote_signed(host, server[1], tmp_path, forged, path)
    assert refused.returncode == 1 and "does not verify with this key" in refused.stderr, refused.stderr
    assert release_tags_written() == [] and not any(ref.endswith(".sig") for ref in Registry.puts)
    assert not (tmp_path / "release.json").exists()


def test_a_signature_the_registry_refuses_promotes_nothing(registry: tuple[RegistryClient, str],
                                                          server: tuple[str, Path], tmp_path: Path) -> None:
    client, host = registry
    key, path = key_file(tmp_path)
    made = attested(client, hold_candidates(host), key)
    Registry.refuse_signatures = True
    try:
        result = promote_signed(host, server[1], tmp_path, made, path)
    finally:
        Registry.refuse_signatures = False
    assert result.returncode == 1 and "signing" in result.stderr and "failed" in result.stderr, result.stderr
    assert release_tags_written() == [] and not (tmp_path / "release.json").exists()


def test_verify_follows_an_index_to_the_hosts_image_with_platform(registry: tuple[RegistryClient, str]) -> None:
    """An index tag is verified by the index's own signature; --platform then verifies that platform's image, its
    attestations included, and a platform the index does not list is not verified."""
    client, host = registry
    key = new_key()
    member = signed_and_attested(client, host, key)  # the arm64 image, say, under its own tag
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": DOCKER_V2, "digest": member, "size": len(IMAGE),
         "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}}]}).encode()
    digest = Registry.hold("v2.7", index, "application/vnd.oci.image.index.v1+json")
    payload = signing.simple_signing_payload(f"{host}/ml/pt:v2.7", digest, "v2.7")
    Attachments(client, "ml/pt").add_signature(digest, payload, key.sign(payload))
    reference = parse_reference(f"{host}/ml/pt:v2.7")
    alone = Verifier(client, reference, key.public).run(None)
    assert alone.valid and any("give --platform" in line for line in alone.lines), alone.lines
    followed = Verifier(client, reference, key.public).run("linux/arm64")
    assert followed.valid and any(line.startswith(f"linux/arm64: {member}") for line in followed.lines), followed.lines
    assert any("attestation https://in-toto.io/attestation/test-result/v0.1" in line for line in followed.lines)
    missing = Verifier(client, reference, key.public).run("linux/amd64")
    assert not missing.valid and "the index holds no linux/amd64 image" in missing.problems


@pytest.mark.parametrize("manifests", ['"x"', '[1, 2]', '[{"platform": "linux/arm64", "digest": 5}]', '{}'])
def test_an_index_the_registry_answers_out_of_shape_is_not_verified_and_no_traceback(
        registry: tuple[RegistryClient, str], manifests: str) -> None:
    client, host = registry
    key = new_key()
    index = f'{{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": {manifests}}}'
    digest = Registry.hold("v2.7", index.encode(), "application/vnd.oci.image.index.v1+json")
    payload = signing.simple_signing_payload(f"{host}/ml/pt:v2.7", digest, "v2.7")
    Attachments(client, "ml/pt").add_signature(digest, payload, key.sign(payload))
    verdict = Verifier(client, parse_reference(f"{host}/ml/pt:v2.7"), key.public).run("linux/arm64")
    assert not verdict.valid, verdict.lines


def test_the_workflows_key_step_writes_the_secret_only_its_user_reads_outside_the_workspace(tmp_path: Path) -> None:
    """release.yml's scripts/signing-key.sh: the SIGNING_KEY secret into a 0600 file under a temporary folder, named in
    GITHUB_ENV for the later steps; without the secret, a note and nothing in GITHUB_ENV."""
    script = ROOT / "scripts" / "signing-key.sh"
    pem = new_key().key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()).decode()
    github_env = tmp_path / "github.env"
    result = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False,
                            env={**os.environ, "SIGNING_KEY": pem, "GITHUB_ENV": str(github_env)})
    assert result.returncode == 0, result.stderr
    name, _, value = github_env.read_text().strip().partition("=")
    written = Path(value)
    assert name == "TORCHIMAGES_SIGN_KEY" and written.read_text().strip() == pem.strip()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600 and not written.is_relative_to(tmp_path)
    github_env.unlink()
    unsigned = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                              check=False, env={**os.environ, "SIGNING_KEY": "", "GITHUB_ENV": str(github_env)})
    assert unsigned.returncode == 0 and "not signed" in unsigned.stdout and not github_env.exists()
