"""`lock` pins what `docker pull` pins: for a tag of several platforms its index, whether the registry stores a Docker
manifest list (nvidia/cuda, debian on Docker Hub) or an OCI index, and for a tag of one platform that image's
manifest. A registry serves an index only to a client whose Accept header names its media type; to any other it
answers the linux/amd64 manifest inside it (distribution's fallback for old clients), whose digest pins one platform.
Against a local HTTPS server that answers so."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from torchimages.input import lock
from torchimages.registry import RegistryClient

from ..conftest import AnsweringHandler, plan_of, tls_server

DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_IMAGE = "application/vnd.docker.distribution.manifest.v2+json"
OCI_IMAGE = "application/vnd.oci.image.manifest.v1+json"


def body(kind: str, seed: str) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": kind, "seed": seed}).encode()


def digest_of(content: bytes) -> str:
    return f"sha256:{hashlib.sha256(content).hexdigest()}"


class IndexRegistry(AnsweringHandler):
    """Each repository's one tag: `stored` (its media type and bytes) when the Accept header names that type, else
    `fallback` (the amd64 image inside an index) when the header names its type, else 404 as distribution answers."""

    stored: ClassVar[dict[str, tuple[str, bytes]]] = {}  # repository -> (media type, body)
    fallback: ClassVar[dict[str, tuple[str, bytes]]] = {}
    accepted: ClassVar[list[str]] = []  # the Accept header of each request

    def do_GET(self) -> None:
        accept = self.headers.get("Accept", "")
        IndexRegistry.accepted.append(accept)
        repository = self.path.removeprefix("/v2/").rsplit("/manifests/", 1)[0]
        kinds = {kind.split(";")[0].strip() for kind in accept.split(",")}
        for found in (IndexRegistry.stored.get(repository), IndexRegistry.fallback.get(repository)):
            if found and found[0] in kinds:
                self.answer(200, found[1], {"Content-Type": found[0], "Docker-Content-Digest": digest_of(found[1])})
                return
        self.answer(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}', {})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    httpd, host, ca = tls_server(IndexRegistry, tmp_path_factory.mktemp("tls"))
    yield host, ca
    httpd.shutdown()


@pytest.fixture
def registry(server: tuple[str, Path]) -> Iterator[tuple[str, Path]]:
    amd64 = (DOCKER_IMAGE, body(DOCKER_IMAGE, "amd64"))
    IndexRegistry.stored = {"nvidia/cuda": (DOCKER_LIST, body(DOCKER_LIST, "cuda")),
                            "library/debian": (OCI_INDEX, body(OCI_INDEX, "debian")),
                            "local/base": (OCI_IMAGE, body(OCI_IMAGE, "one platform"))}
    IndexRegistry.fallback = {"nvidia/cuda": amd64, "library/debian": amd64}
    IndexRegistry.accepted = []
    yield server


@pytest.mark.parametrize("repository", ["nvidia/cuda", "library/debian", "local/base"])
def test_the_digest_pinned_is_the_tags_own_manifest_whatever_its_media_type(registry: tuple[str, Path],
                                                                            repository: str) -> None:
    host, ca = registry
    kind, stored = IndexRegistry.stored[repository]
    assert RegistryClient(host, ca=ca).digest(repository, "12") == digest_of(stored), f"not the {kind} itself"


def test_one_request_names_every_kind_a_tag_may_point_at(registry: tuple[str, Path]) -> None:
    host, ca = registry
    RegistryClient(host, ca=ca).digest("nvidia/cuda", "12")
    [accept] = IndexRegistry.accepted
    assert {kind.strip() for kind in accept.split(",")} == {DOCKER_LIST, OCI_INDEX, DOCKER_IMAGE, OCI_IMAGE}


def test_lock_writes_the_index_digest_of_each_base(registry: tuple[str, Path], tmp_path: Path) -> None:
    host, ca = registry
    plan = plan_of(f"""
        registry: registry.example.com/ml/pytorch
        images:
          - {{flavor: cpu, torch: "2.13.0", python: "3.11", base_image: "{host}/library/debian:12"}}
          - {{flavor: cpu, name: cpu-cuda-base, torch: "2.13.0", python: "3.11", base_image: "{host}/nvidia/cuda:12"}}
        """)
    client = RegistryClient(host, ca=ca)
    lock_file = lock.LockFile(tmp_path / "matrix.lock")
    lock.update(plan, lock_file, lambda where: client.digest(where.repository, where.tag), refresh=False)
    assert lock_file.digests() == {f"{host}/library/debian:12": digest_of(IndexRegistry.stored["library/debian"][1]),
                                   f"{host}/nvidia/cuda:12": digest_of(IndexRegistry.stored["nvidia/cuda"][1])}
