"""Keys, signatures and attestation envelopes in the formats other clients verify, with no network and no cosign.

- A key pair is ECDSA P-256: the private key PKCS#8 PEM (optionally encrypted), the public key SubjectPublicKeyInfo
  PEM, as `cosign generate-key-pair` users and containers' policy.json (`keyPath`) take it.
- An image signature is cosign's key-based format: a "simple signing" JSON payload naming the image's manifest digest
  and the reference it was signed for, signed with ECDSA / SHA-256 (DER, base64). skopeo (containers/image, policy type
  `sigstoreSigned`) and `cosign verify --key --insecure-ignore-tlog` read it; containers/image reads the payload's
  `critical` object with exactly these fields, so none is added there.
- An attestation is an in-toto v1 statement about the image's digest in a DSSE envelope signed with the same key.

Verification here (`verify_*`) is what `build.py verify` and promote use; the tests also verify with skopeo, a client
this project did not write.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .. import __version__
from ..errors import UserError, visible
from ..files import atomic_write, check_output_folder
from ..input.grammar import digest_problem

SIMPLE_SIGNING_TYPE = "cosign container image signature"
SIMPLE_SIGNING_MEDIA = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
DSSE_MEDIA = "application/vnd.dsse.envelope.v1+json"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PASSWORD_ENV = "TORCHIMAGES_SIGN_PASSWORD"
MAX_KEY_BYTES = 64 << 10


class SignatureInvalid(Exception):
    """What was read does not verify against the key: unsigned, tampered, or signed by another key."""


@dataclass(frozen=True)
class PublicKey:
    key: ec.EllipticCurvePublicKey

    @property
    def pem(self) -> str:
        return self.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    @property
    def fingerprint(self) -> str:
        """sha256 of the DER public key: what the release manifest and its notes name the key by."""
        der = self.key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return f"sha256:{hashlib.sha256(der).hexdigest()}"

    def check(self, signature: bytes, data: bytes) -> None:
        try:
            self.key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise SignatureInvalid("the signature does not verify with this key (tampered, or signed by another key)") \
                from None


@dataclass(frozen=True)
class SigningKey:
    key: ec.EllipticCurvePrivateKey

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key())

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))


def read_key_file(path: Path, what: str) -> bytes:
    try:
        if not path.is_file():
            raise UserError(f"{what} {visible(str(path))}: not a file")
        if path.stat().st_size > MAX_KEY_BYTES:
            raise UserError(f"{what} {visible(str(path))}: too big for a PEM key")
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"{what} {visible(str(path))}: could not be read ({exc.strerror or exc})") from None


def load_signing_key(path: Path, password: bytes | None) -> SigningKey:
    """A PKCS#8 EC P-256 private key (PEM), decrypted with `password` when it is encrypted; one line when it is not one."""
    data = read_key_file(path, "--sign-key")
    try:
        key = serialization.load_pem_private_key(data, password=password or None)
    except TypeError:
        raise UserError(f"--sign-key {visible(str(path))}: the key is encrypted; give its passphrase in {PASSWORD_ENV} "
                        "or on standard input (--sign-password-stdin)") from None
    except (ValueError, UnsupportedAlgorithm):
        why = "wrong passphrase, or not a PEM private key" if password else "not a PEM private key (PKCS#8)"
        raise UserError(f"--sign-key {visible(str(path))}: {why}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise UserError(f"--sign-key {visible(str(path))}: not an ECDSA P-256 key (build.py keygen makes one)")
    return SigningKey(key)


def load_public_key(path: Path, option: str = "--key") -> PublicKey:
    data = read_key_file(path, option)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise UserError(f"{option} {visible(str(path))}: not a PEM public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise UserError(f"{option} {visible(str(path))}: not an ECDSA P-256 public key")
    return PublicKey(key)


def keygen(folder: Path, password: bytes | None) -> tuple[Path, Path]:
    """A new key pair in `folder`: cosign.key (PKCS#8 PEM, encrypted with `password` if given; mode 0600, never
    replaced) and cosign.pub."""
    check_output_folder(folder, "--out")
    private, public = folder / "cosign.key", folder / "cosign.pub"
    for path in (private, public):
        if path.exists() or path.is_symlink():
            raise UserError(f"--out {visible(str(folder))}: {path.name} is there already; a key is never replaced "
                            "(move it away, or give another folder)")
    key = ec.generate_private_key(ec.SECP256R1())
    encryption = (serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    atomic_write(public, SigningKey(key).public.pem)
    public.chmod(0o644)
    return private, public


# --- image signatures: cosign's simple signing payload ---------------------------------------------------------


def simple_signing_payload(reference: str, digest: str, release: str) -> bytes:
    """What an image signature signs: the manifest digest and the reference (REPOSITORY:TAG) it was signed for. The
    `critical` object holds exactly the fields containers/image reads; what we add goes under `optional`."""
    payload = {"critical": {"identity": {"docker-reference": reference}, "image": {"docker-manifest-digest": digest},
                            "type": SIMPLE_SIGNING_TYPE},
               "optional": {"creator": f"torchimages {__version__}", "timestamp": int(time.time()),
                            "io.torchimages.release": release}}
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class SignedImage:
    """A verified image signature: the digest and reference it names, and the release it says."""

    digest: str
    reference: str
    release: str | None


def verify_simple_signing(public: PublicKey, payload: bytes, signature_b64: str, digest: str) -> SignedImage:
    """The payload verified against the key and read: it must name `digest`. Raises SignatureInvalid."""
    try:
        signature = base64.b64decode(signature_b64, validate=True)
    except (ValueError, TypeError):
        raise SignatureInvalid("the signature annotation is not base64") from None
    public.check(signature, payload)
    try:
        data = json.loads(payload)
        critical = data["critical"]
        named, reference = critical["image"]["docker-manifest-digest"], critical["identity"]["docker-reference"]
        kind = critical["type"]
        optional = data.get("optional") or {}
    except (ValueError, KeyError, TypeError, RecursionError):
        raise SignatureInvalid("the signed payload is not a simple signing payload") from None
    if kind != SIMPLE_SIGNING_TYPE or not isinstance(reference, str) or not isinstance(named, str):
        raise SignatureInvalid("the signed payload is not a cosign container image signature")
    if named != digest:
        raise SignatureInvalid(f"the signature is for {visible(named)[:80]}, not {digest}")
    release = optional.get("io.torchimages.release") if isinstance(optional, dict) else None
    return SignedImage(digest, reference, release if isinstance(release, str) else None)


# --- attestations: in-toto statements in DSSE envelopes ---------------------------------------------------------


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, so the type cannot be swapped under the signature."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def statement(repository: str, digest: str, predicate_type: str, predicate: dict[str, object]) -> bytes:
    """An in-toto v1 statement about one image (its repository and manifest digest)."""
    if why := digest_problem(digest):
        raise ValueError(why)
    body = {"_type": STATEMENT_TYPE, "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
            "predicateType": predicate_type, "predicate": predicate}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def envelope(key: SigningKey, payload: bytes) -> bytes:
    """A DSSE envelope of an in-toto statement, signed with `key` (its key id: the public key's fingerprint)."""
    signature = key.sign(pae(IN_TOTO_PAYLOAD, payload))
    body = {"payloadType": IN_TOTO_PAYLOAD, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": key.public.fingerprint, "sig": base64.b64encode(signature).decode()}]}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Attestation:
    """A verified attestation: its predicate type and predicate, about `digest`."""

    digest: str
    predicate_type: str
    predicate: dict[str, object]


def verify_envelope(public: PublicKey, raw: bytes, digest: str) -> Attestation:
    """A DSSE envelope verified against the key (one of its signatures), its statement about `digest` (the subject's
    sha256). Raises SignatureInvalid."""
    try:
        data = json.loads(raw)
        payload_type, payload = data["payloadType"], base64.b64decode(data["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in data["signatures"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise SignatureInvalid("not a DSSE envelope") from None
    if payload_type != IN_TOTO_PAYLOAD:
        raise SignatureInvalid(f"the envelope holds {visible(str(payload_type))[:60]}, not an in-toto statement")
    if not any(verifies(public, signature, pae(payload_type, payload)) for signature in signatures):
        raise SignatureInvalid("the attestation's signature does not verify with this key (tampered, or signed by "
                               "another key)")
    try:
        body = json.loads(payload)
        subjects = [s["digest"]["sha256"] for s in body["subject"]]
        predicate_type, predicate = body["predicateType"], body["predicate"]
        kind = body["_type"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise SignatureInvalid("the signed payload is not an in-toto statement") from None
    if kind != STATEMENT_TYPE or not isinstance(predicate_type, str) or not isinstance(predicate, dict):
        raise SignatureInvalid("the signed payload is not an in-toto v1 statement")
    if digest.removeprefix("sha256:") not in subjects:
        raise SignatureInvalid(f"the attestation is about {', '.join(map(str, subjects))[:80]}, not {digest}")
    return Attestation(digest, predicate_type, predicate)


def verifies(public: PublicKey, signature: bytes, data: bytes) -> bool:
    try:
        public.check(signature, data)
    except SignatureInvalid:
        return False
    return True
