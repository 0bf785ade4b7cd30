"""The anonymous token flow Docker Hub and nvcr.io use (distribution's token auth: 401 with a Bearer challenge,
a token from the realm for the scope, the manifest with that token), as `lock` resolves a public base image and
promote PUTs a manifest; on a local HTTPS server that speaks that protocol, since neither registry can be reached from
these machines."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import requests

from torchimages.registry import RegistryClient

from ..conftest import AnsweringHandler, tls_server

DIGEST = "sha256:" + "c" * 64


class TokenRegistry(AnsweringHandler):
    asked: ClassVar[list[tuple[str, str]]] = []
    realm: ClassVar[str] = "https://{host}/token"  # what the challenge names; {host}: the Host the client asked
    digest: ClassVar[str] = DIGEST  # what the manifest's Docker-Content-Digest says
    token: ClassVar[bytes] = json.dumps({"token": "anon-token"}).encode()  # what the realm answers
    stored: ClassVar[dict[str, bytes]] = {}  # tag -> the manifest a PUT with the token stored

    def challenged(self, action: str) -> bool:
        """Answers 401 with a Bearer challenge for `action` unless the request carries the token."""
        TokenRegistry.asked.append((self.path, self.headers.get("Authorization") or ""))
        if self.path.startswith("/token?") or self.headers.get("Authorization") == "Bearer anon-token":
            return False
        host = self.headers["Host"]
        realm = TokenRegistry.realm.format(host=host, port=host.rsplit(":", 1)[1])
        self.answer(401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",'
                                                     f'service="registry.docker.io",scope="repository:library/debian:{action}"'})
        return True

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.challenged("pull,push"):
            TokenRegistry.stored[self.path.rsplit("/", 1)[1]] = body
            self.answer(201, b"", {"Docker-Content-Digest": f"sha256:{hashlib.sha256(body).hexdigest()}"})

    def do_GET(self) -> None:
        if self.challenged("pull"):
            return
        if self.path.startswith("/token?"):
            self.answer(200, TokenRegistry.token, {"Content-Type": "application/json"})
        elif self.path == "/v2/library/debian/manifests/bookworm-slim":
            accepted = self.headers.get("Accept", "")
            kind = "application/vnd.oci.image.index.v1+json"
            self.answer(200 if kind in accepted else 404, b'{"manifests": []}',
                        {"Content-Type": kind, "Docker-Content-Digest": TokenRegistry.digest})
        else:
            self.answer(404, b"{}", {})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    httpd, host, ca = tls_server(TokenRegistry, tmp_path_factory.mktemp("tls"))
    yield host, ca
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


@pytest.fixture
def challenge() -> Iterator[type[TokenRegistry]]:
    TokenRegistry.asked.clear()
    yield TokenRegistry
    TokenRegistry.realm, TokenRegistry.digest = "https://{host}/token", DIGEST
    TokenRegistry.token, TokenRegistry.stored = json.dumps({"token": "anon-token"}).encode(), {}


def test_credentials_go_to_a_token_realm_on_the_registrys_own_host(server: tuple[str, Path], challenge: type) -> None:
    host, ca = server
    assert RegistryClient(host, username="ci", password="s3cret", ca=ca).digest("library/debian", "bookworm-slim")
    token_auth = next(auth for path, auth in challenge.asked if path.startswith("/token?"))
    assert token_auth.startswith("Basic "), "the registry's own realm gets the credentials"


def test_a_realm_on_another_host_gets_no_credentials_unless_allowed(server: tuple[str, Path], challenge: type,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    host, ca = server
    challenge.realm = "https://localhost:{port}/token"  # the same server under another name: another origin
    assert RegistryClient(host, username="ci", password="s3cret", ca=ca).digest("library/debian", "bookworm-slim")
    assert [auth for path, auth in challenge.asked if path.startswith("/token?")] == [""], "asked anonymously"
    challenge.asked.clear()
    monkeypatch.setenv("TORCHIMAGES_TOKEN_HOSTS", "auth.example.com, localhost")
    assert RegistryClient(host, username="ci", password="s3cret", ca=ca).digest("library/debian", "bookworm-slim")
    assert [auth[:6] for path, auth in challenge.asked if path.startswith("/token?")] == ["Basic "]


def test_a_realm_over_plain_http_is_never_asked(server: tuple[str, Path], challenge: type) -> None:
    host, ca = server
    challenge.realm = "http://{host}/token"
    with pytest.raises(requests.RequestException, match="not an https URL, so no token is asked for"):
        RegistryClient(host, username="ci", password="s3cret", ca=ca).digest("library/debian", "bookworm-slim")
    assert not any(path.startswith("/token?") for path, _ in challenge.asked)


@pytest.mark.parametrize("answered", ["sha256:abc", 'sha256:"; echo', "sha256:" + "c" * 64 + "x"])
def test_a_digest_the_registry_made_up_is_refused(server: tuple[str, Path], challenge: type, answered: str) -> None:
    host, ca = server
    challenge.digest = answered
    with pytest.raises(requests.RequestException, match="is not a digest"):
        RegistryClient(host, ca=ca).digest("library/debian", "bookworm-slim")


@pytest.mark.parametrize("allowed", ["*", "local*", ".localhost", "localhost.evil.example", " , ,", "127.0.0.1"])
def test_token_hosts_are_whole_host_names_never_patterns(server: tuple[str, Path], challenge: type,
                                                         monkeypatch: pytest.MonkeyPatch, allowed: str) -> None:
    """TORCHIMAGES_TOKEN_HOSTS names hosts that may receive the credentials: a value that is a pattern, a suffix or
    another host's name trusts no realm on localhost, which is then asked anonymously."""
    host, ca = server
    challenge.realm = "https://localhost:{port}/token"
    monkeypatch.setenv("TORCHIMAGES_TOKEN_HOSTS", allowed)
    assert RegistryClient(host, username="ci", password="s3cret", ca=ca).digest("library/debian", "bookworm-slim")
    assert [auth for path, auth in challenge.asked if path.startswith("/token?")] == [""], allowed


@pytest.mark.parametrize("answer", [b"not json", b"[]", b'{"token": ""}', b'{"token": 7}',
                                    json.dumps({"token": "anon-token\r\nX-Evil: 1"}).encode(), b"[" * 100_000],
                         ids=["text", "list", "empty", "number", "header-injection", "nested"])
def test_a_realm_that_answers_no_one_line_token_is_refused(server: tuple[str, Path], challenge: type,
                                                          answer: bytes) -> None:
    """The realm's answer goes into an Authorization header: what is not one line of visible text is no token."""
    host, ca = server
    challenge.token = answer
    with pytest.raises(requests.RequestException, match="answered no token") as refused:
        RegistryClient(host, ca=ca).digest("library/debian", "bookworm-slim")
    assert "X-Evil" not in str(refused.value)
    assert not any(auth.startswith("Bearer anon-token\r") for _, auth in challenge.asked)


def test_a_token_answered_as_an_oauth2_access_token_is_taken(server: tuple[str, Path], challenge: type) -> None:
    """The token specification lets a realm answer `access_token` (OAuth 2) instead of `token`."""
    host, ca = server
    challenge.token = json.dumps({"access_token": "anon-token", "expires_in": 300}).encode()
    assert RegistryClient(host, ca=ca).digest("library/debian", "bookworm-slim") == DIGEST


def test_a_manifest_put_behind_a_token_sends_its_bytes_with_the_token(server: tuple[str, Path], challenge: type) -> None:
    """A PUT's challenge asks pull,push; the PUT made again with the token carries the whole manifest."""
    host, ca = server
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []})
    answered = RegistryClient(host, ca=ca).put_manifest("library/debian", "v2.7", body.encode(),
                                                        "application/vnd.oci.image.index.v1+json")
    assert challenge.stored == {"v2.7": body.encode()}
    assert answered == f"sha256:{hashlib.sha256(body.encode()).hexdigest()}"
    [token] = [path for path, _ in challenge.asked if path.startswith("/token?")]
    assert "scope=repository%3Alibrary%2Fdebian%3Apull%2Cpush" in token
