"""The registry's HTTP API (distribution v2): read a tag's manifest digest and config digest."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import requests

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


@dataclass(frozen=True)
class RemoteTag:
    digest: str  # the manifest digest (what users pin: repository@sha256:...)
    config_digest: str  # equals the local image ID for the same image


def split_reference(repository: str) -> tuple[str, str]:
    """'127.0.0.1:5000/ml/pytorch' -> ('127.0.0.1:5000', 'ml/pytorch')."""
    host, _, path = repository.partition("/")
    return host, path


class RegistryClient:
    """Just enough of the registry API, with basic or bearer-token auth and an explicit CA."""

    def __init__(self, host: str, *, username: str | None = None, password: str | None = None,
                 ca: Path | None = None, timeout: float = 30) -> None:
        self.base = f"https://{host}"
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
        return RemoteTag(digest=response.headers["Docker-Content-Digest"], config_digest=response.json()["config"]["digest"])

    def digest(self, name: str, tag: str) -> str | None:
        """The digest NAME:TAG resolves to (an index's for a multi-arch image, as `docker pull` pins), None if absent."""
        response = self.get(f"/v2/{name}/manifests/{tag}", headers={"Accept": PINNABLE_TYPES})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.headers.get("Docker-Content-Digest") or f"sha256:{hashlib.sha256(response.content).hexdigest()}"

    def manifest(self, name: str, reference: str) -> tuple[bytes, str]:
        """The manifest stored under a tag or digest, byte for byte, and its media type."""
        response = self.get(f"/v2/{name}/manifests/{reference}", headers={"Accept": PINNABLE_TYPES})
        response.raise_for_status()
        return response.content, response.headers["Content-Type"]

    def put_manifest(self, name: str, tag: str, body: bytes, media_type: str) -> str:
        """Point NAME:TAG at a manifest (no layer moves: the blobs are in the repository); the digest it answers."""
        response = self.request("PUT", f"/v2/{name}/manifests/{tag}", headers={"Content-Type": media_type}, data=body)
        response.raise_for_status()
        return response.headers.get("Docker-Content-Digest") or f"sha256:{hashlib.sha256(body).hexdigest()}"

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
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.pop("realm")
        response = self.session.get(realm, params=fields, auth=self.auth, verify=self.verify, timeout=self.timeout)
        response.raise_for_status()
        data = response.json()
        return data.get("token") or data["access_token"]
