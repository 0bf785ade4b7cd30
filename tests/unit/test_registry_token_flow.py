"""The anonymous token flow Docker Hub and nvcr.io use (distribution's token auth: 401 with a Bearer challenge,
a token from the realm for the scope, the manifest with that token), as `lock` resolves a public base image; on a
local HTTPS server that speaks that protocol, since neither registry can be reached from these machines."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from torchimages.registry import RegistryClient

DIGEST = "sha256:" + "c" * 64


class TokenRegistry(http.server.BaseHTTPRequestHandler):
    asked: ClassVar[list[tuple[str, str]]] = []

    def do_GET(self) -> None:
        TokenRegistry.asked.append((self.path, self.headers.get("Authorization") or ""))
        host = self.headers["Host"]
        if self.path.startswith("/token?"):
            self.answer(200, json.dumps({"token": "anon-token"}).encode(), {"Content-Type": "application/json"})
        elif self.headers.get("Authorization") != "Bearer anon-token":
            self.answer(401, b"{}", {"WWW-Authenticate": f'Bearer realm="https://{host}/token",'
                                                         'service="registry.docker.io",scope="repository:library/debian:pull"'})
        elif self.path == "/v2/library/debian/manifests/bookworm-slim":
            accepted = self.headers.get("Accept", "")
            kind = "application/vnd.oci.image.index.v1+json"
            self.answer(200 if kind in accepted else 404, b'{"manifests": []}',
                        {"Content-Type": kind, "Docker-Content-Digest": DIGEST})
        else:
            self.answer(404, b"{}", {})

    def answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True, timeout=60)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenRegistry)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{httpd.server_port}", folder / "cert.pem"
    httpd.shutdown()


def test_a_public_tag_resolves_through_an_anonymous_token(server: tuple[str, Path]) -> None:
    host, ca = server
    TokenRegistry.asked.clear()
    assert RegistryClient(host, ca=ca).digest("library/debian", "bookworm-slim") == DIGEST
    (first, no_auth), (token, token_auth), (again, bearer) = TokenRegistry.asked
    assert first == again == "/v2/library/debian/manifests/bookworm-slim" and no_auth == ""
    assert token.startswith("/token?") and "scope=repository%3Alibrary%2Fdebian%3Apull" in token
    assert token_auth == "", "anonymous: no credentials sent to the token realm"
    assert bearer == "Bearer anon-token"


def test_a_missing_tag_is_none(server: tuple[str, Path]) -> None:
    host, ca = server
    assert RegistryClient(host, ca=ca).digest("library/debian", "no-such-tag") is None
