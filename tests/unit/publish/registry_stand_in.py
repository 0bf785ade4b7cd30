"""A stand-in for a registry's distribution API, as distribution 2.8 answers it: manifests by tag or digest (GET, HEAD,
PUT), blobs (HEAD, GET, and uploads through POST then PUT ?digest=), and no referrers API unless a test turns it on.
What it holds is a class's state, which each test resets; its answers are what signing, attaching and verifying read."""

from __future__ import annotations

import hashlib
import json
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

from ..conftest import AnsweringHandler

INDEX = "application/vnd.oci.image.index.v1+json"


def digest_of(body: bytes) -> str:
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


class Registry(AnsweringHandler):
    manifests: ClassVar[dict[str, tuple[bytes, str]]] = {}  # digest -> (bytes, media type)
    tags: ClassVar[dict[str, str]] = {}  # tag -> digest
    blobs: ClassVar[dict[str, bytes]] = {}
    referrers_api: ClassVar[bool] = False
    refuse_signatures: ClassVar[bool] = False  # a PUT of a .sig tag answered 403, as a registry that denies it
    puts: ClassVar[list[str]] = []  # every manifest PUT's reference, in order

    @classmethod
    def reset(cls) -> None:
        cls.manifests, cls.tags, cls.blobs, cls.referrers_api, cls.puts = {}, {}, {}, False, []

    @classmethod
    def hold(cls, tag: str, body: bytes, media_type: str) -> str:
        cls.manifests[digest_of(body)] = (body, media_type)
        cls.tags[tag] = digest_of(body)
        return digest_of(body)

    def reference(self) -> tuple[str, str]:
        """(kind, reference): kind is manifests, blobs, uploads or referrers."""
        parts = urlsplit(self.path).path.split("/")
        return parts[-2], parts[-1]

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        kind, reference = self.reference()
        if kind == "blobs":
            blob = self.blobs.get(reference)
            self.answer(200 if blob is not None else 404, blob or b"", {"Content-Type": "application/octet-stream"})
        elif kind == "referrers":
            if not self.referrers_api:
                self.answer(404, b"404 page not found\n", {"Content-Type": "text/plain"})
                return
            listed = [{"mediaType": media, "digest": digest_of(body), "size": len(body),
                       "artifactType": json.loads(body).get("artifactType")}
                      for body, media in self.manifests.values() if json.loads(body).get("subject", {}).get("digest") == reference]
            self.answer(200, json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": listed}).encode(),
                        {"Content-Type": INDEX})
        else:
            digest = self.tags.get(reference, reference)
            if digest not in self.manifests:
                self.answer(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}', {})
                return
            body, media = self.manifests[digest]
            self.answer(200, body, {"Content-Type": media, "Docker-Content-Digest": digest})

    def do_POST(self) -> None:
        self.answer(202, b"", {"Location": "/v2/ml/pt/blobs/uploads/u1?_state=x"})

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        kind, reference = self.reference()
        if kind == "uploads":
            digest = parse_qs(urlsplit(self.path).query)["digest"][0]
            if digest != digest_of(body):
                self.answer(400, b'{"errors": [{"code": "DIGEST_INVALID"}]}', {})
                return
            self.blobs[digest] = body
            self.answer(201, b"", {"Docker-Content-Digest": digest})
            return
        if self.refuse_signatures and reference.endswith(".sig"):
            self.answer(403, b'{"errors": [{"code": "DENIED"}]}', {})
            return
        self.puts.append(reference)
        self.manifests[digest_of(body)] = (body, self.headers["Content-Type"])
        if not reference.startswith("sha256:"):
            self.tags[reference] = digest_of(body)
        self.answer(201, b"", {"Docker-Content-Digest": digest_of(body)})
