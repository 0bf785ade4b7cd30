"""The registry's HTTP API (distribution v2): read a tag's manifest digest and config digest; the credentials for it
(--registry-user, or what `docker login` stored) and the CA it is trusted with."""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests

from .errors import UserError, visible
from .input import grammar
from .input.grammar import digest_problem

MANIFEST_TYPES = ", ".join((
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
))


# What a tag may point at when it is pinned: a multi-arch index (nvidia/cuda, debian) or one image's manifest.
PINNABLE_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    MANIFEST_TYPES,
))


# A layer's media type, Docker's or OCI's (gzip, zstd, uncompressed, foreign): nothing else is a layer to pull
LAYER_TYPE = re.compile(r"application/vnd\.(docker\.image\.rootfs\.(foreign\.)?diff\.tar(\.gzip)?|"
                        r"oci\.image\.layer\.(nondistributable\.)?v1\.tar(\+gzip|\+zstd)?)")


@dataclass(frozen=True)
class RemoteTag:
    digest: str  # the manifest digest (what users pin: repository@sha256:...)
    config_digest: str  # equals the local image ID for the same image
    layer_types: tuple[str, ...] = ()  # its layers' media types, each once: which engines can pull it (engine.pull_floor)


def split_reference(repository: str) -> tuple[str, str]:
    """'127.0.0.1:5000/ml/pytorch' -> ('127.0.0.1:5000', 'ml/pytorch')."""
    host, _, path = repository.partition("/")
    return host, path


class RegistryClient:
    """Just enough of the registry API, with basic or bearer-token auth and an explicit CA."""

    def __init__(self, host: str, *, username: str | None = None, password: str | None = None,
                 ca: Path | None = None, timeout: float = 30) -> None:
        self.host, self.base = host, f"https://{host}"
        self.auth = (username, password) if username else None
        # On these machines REQUESTS_CA_BUNDLE is set globally and would override the session: pass verify per call.
        self.verify: str | bool = str(ca) if ca else True
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False

    def tag(self, name: str, tag: str) -> RemoteTag | None:
        """The manifest and config digests of NAME:TAG, or None when the tag does not exist."""
        response = self.get(f"/v2/{name}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        try:
            body = response.json()
            config = body["config"]["digest"]
            layer_types = tuple(dict.fromkeys(layer["mediaType"] for layer in body.get("layers") or ()))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # RecursionError: nested too deep
            raise requests.RequestException(f"{name}:{tag}: the registry answered a manifest without a config") from None
        if not all(isinstance(media_type, str) and LAYER_TYPE.fullmatch(media_type) for media_type in layer_types):
            raise requests.RequestException(f"{name}:{tag}: the registry answered a layer of no known media type: "
                                            f"{visible(str(layer_types))[:200]}")
        return RemoteTag(digest=checked_digest(response.headers.get("Docker-Content-Digest"), f"{name}:{tag}"),
                         config_digest=checked_digest(config, f"{name}:{tag} config"), layer_types=layer_types)

    def digest(self, name: str, tag: str) -> str | None:
        """The digest NAME:TAG resolves to (an index's for a multi-arch image, as `docker pull` pins), None if absent."""
        response = self.get(f"/v2/{name}/manifests/{tag}", headers={"Accept": PINNABLE_TYPES})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        answered = response.headers.get("Docker-Content-Digest") or f"sha256:{hashlib.sha256(response.content).hexdigest()}"
        return checked_digest(answered, f"{name}:{tag}")

    def manifest(self, name: str, reference: str) -> tuple[bytes, str]:
        """The manifest stored under a tag or digest, byte for byte, and its media type."""
        response = self.get(f"/v2/{name}/manifests/{reference}", headers={"Accept": PINNABLE_TYPES})
        response.raise_for_status()
        return response.content, response.headers["Content-Type"]

    def blob(self, name: str, digest: str, limit: int) -> bytes:
        """A blob (an image's config), at most `limit` bytes, refused unless its bytes hash to `digest`."""
        response = self.get(f"/v2/{name}/blobs/{digest}", headers={})
        response.raise_for_status()
        content = response.content
        if len(content) > limit:
            raise requests.RequestException(f"{name}@{digest}: the registry answered {len(content)} bytes, more than "
                                            f"the {limit} a config may have")
        if f"sha256:{hashlib.sha256(content).hexdigest()}" != digest:
            raise requests.RequestException(f"{name}@{digest}: the registry answered another blob for that digest")
        return content

    def put_blob(self, name: str, content: bytes) -> str:
        """Upload a blob (a signature's payload, an attestation's envelope) unless the repository holds it; its digest."""
        digest = f"sha256:{hashlib.sha256(content).hexdigest()}"
        if self.request("HEAD", f"/v2/{name}/blobs/{digest}", headers={}).status_code == 200:
            return digest
        started = self.request("POST", f"/v2/{name}/blobs/uploads/", headers={})
        started.raise_for_status()
        location = started.headers.get("Location", "")
        parts = urlsplit(location)
        if (parts.scheme or parts.netloc) and f"{parts.scheme}://{parts.netloc}" != self.base:
            raise requests.RequestException(f"the registry sent the upload to {visible(location)[:80]!r}, not to itself")
        path = parts.path + ("?" + parts.query if parts.query else "")
        finished = self.request("PUT", f"{path}{'&' if parts.query else '?'}digest={digest}",
                                headers={"Content-Type": "application/octet-stream"}, data=content)
        finished.raise_for_status()
        return digest

    def referrers(self, name: str, digest: str) -> bytes | None:
        """The OCI 1.1 referrers index of `digest`, or None where the registry has no referrers API (distribution 2.8
        answers 404): then attachments live under the fallback tag sha256-HEX."""
        response = self.get(f"/v2/{name}/referrers/{digest}", headers={"Accept": "application/vnd.oci.image.index.v1+json"})
        if response.status_code in (404, 405) or not response.headers.get("Content-Type", "").startswith(
                "application/vnd.oci.image.index.v1+json"):
            return None
        response.raise_for_status()
        return response.content

    def put_manifest(self, name: str, tag: str, body: bytes, media_type: str) -> str:
        """Point NAME:TAG at a manifest (no layer moves: the blobs are in the repository); the digest it answers."""
        response = self.request("PUT", f"/v2/{name}/manifests/{tag}", headers={"Content-Type": media_type}, data=body)
        response.raise_for_status()
        answered = response.headers.get("Docker-Content-Digest") or f"sha256:{hashlib.sha256(body).hexdigest()}"
        return checked_digest(answered, f"{name}:{tag}")

    def get(self, path: str, headers: dict[str, str]) -> requests.Response:
        return self.request("GET", path, headers=headers)

    def request(self, method: str, path: str, *, headers: dict[str, str], data: bytes | None = None) -> requests.Response:
        """One call with basic auth, or with the bearer token the registry's challenge asks for (its scope names the
        action: pull, or pull,push for a PUT)."""
        response = self.session.request(method, self.base + path, headers=headers, data=data, auth=self.auth,
                                        verify=self.verify, timeout=self.timeout)
        challenge = response.headers.get("WWW-Authenticate", "")
        if response.status_code == 401 and challenge.lower().startswith("bearer"):
            token = self._token(challenge)
            response = self.session.request(method, self.base + path, data=data, verify=self.verify,
                                            headers={**headers, "Authorization": f"Bearer {token}"}, timeout=self.timeout)
        return response

    def _token(self, challenge: str) -> str:
        """A bearer token from the realm the registry's challenge names. The realm is the registry's word, so it is
        input: it must be https, and the credentials go with the request only when the realm is on the registry's own
        host or on a host the user allows (TORCHIMAGES_TOKEN_HOSTS, e.g. auth.docker.io); elsewhere the token is asked
        for anonymously."""
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.pop("realm", "")
        parts = urlsplit(realm)
        if parts.scheme != "https" or not parts.hostname or parts.username or parts.password:
            raise requests.RequestException(f"the registry {self.host} names the token realm {visible(realm)[:120]!r}: "
                                            "not an https URL, so no token is asked for and no credential is sent")
        trusted = parts.hostname == urlsplit(self.base).hostname or parts.hostname in token_hosts()
        response = self.session.get(realm, params=fields, auth=self.auth if trusted else None, verify=self.verify,
                                    timeout=self.timeout, allow_redirects=False)
        response.raise_for_status()
        try:
            data = response.json()
        except (ValueError, RecursionError):  # not JSON, or nested past Python's limit: no token either way
            data = None
        token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token or grammar.control_problem(token):
            raise requests.RequestException(f"the token realm {parts.hostname} answered no token")
        return token


def token_hosts() -> set[str]:
    """Hosts besides the registry's own that may receive the registry credentials for a token."""
    return {host.strip().lower() for host in os.environ.get("TORCHIMAGES_TOKEN_HOSTS", "").split(",") if host.strip()}


def checked_digest(value: str | None, what: str) -> str:
    """A digest the registry answered, refused unless it is sha256: and 64 hex digits."""
    why = digest_problem(value or "")
    if why:
        raise requests.RequestException(f"{what}: the registry answered the digest {visible(value or '')[:80]!r}; {why}")
    return str(value)


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def auth_config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


def credentials_from_docker_config(host: str) -> Credentials | None:
    """Credentials `docker login HOST` stored: in the docker config (DOCKER_CONFIG or ~/.docker), or in the credential
    helper it names (credsStore, credHelpers: Docker Desktop, ECR, GCR), read through the Docker SDK as docker does."""
    path = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        raw = json.loads(path.read_text())
    except OSError:
        return None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit
        raise UserError(f"{path}: not valid JSON ({visible(str(exc))[:200]}); fix it or log in again") from None
    if not isinstance(raw, dict) or not raw:
        return None
    import docker.auth  # here: only a push, a pull or a pin reads the docker config
    import docker.errors

    try:
        with warnings.catch_warnings():  # the SDK warns about a missing helper, then raises: the raise is reported
            warnings.simplefilter("ignore")
            entry = docker.auth.load_config(config_dict=raw).resolve_authconfig(host)
    except docker.errors.InvalidConfigFile as exc:
        raise UserError(f"{path}: {exc}; run docker login {host} again") from None
    except docker.errors.DockerException as exc:  # a helper that is missing or fails
        raise UserError(f"{path}: the credential helper for {host} failed: {exc}") from None
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise UserError(f"{path}: the credentials stored for {host} are not base64 user:password; "
                        f"run docker login {host} again") from None
    if not entry:
        return None
    if entry.get("IdentityToken"):
        raise UserError(f"{path}: {host} has an identity token, not a user and password; give --registry-user and "
                        "TORCHIMAGES_REGISTRY_PASSWORD (or --password-stdin)")
    username, password = entry.get("Username") or entry.get("username"), entry.get("Password") or entry.get("password")
    return Credentials(str(username), str(password)) if username and password else None


def registry_client(host: str, credentials: Credentials | None, ca: Path | None = None) -> RegistryClient:
    """The registry API of `host` as these credentials, trusting `ca` or the engine's CA for it (default_ca)."""
    return RegistryClient(host, username=credentials.username if credentials else None,
                          password=credentials.password if credentials else None, ca=ca or default_ca(host))


def default_ca(host: str) -> Path | None:
    """The CA the engine trusts for this registry, if any (/etc/docker/certs.d/HOST[:PORT]/ca.crt)."""
    path = Path("/etc/docker/certs.d") / host / "ca.crt"
    return path if path.is_file() else None
