"""JupyterLab as users start it: authentication always on, also under an arbitrary --user UID:GID."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
import testinfra

from .conftest import Facts, run


def status(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture(params=["default", "user-4242"])
def server(request: pytest.FixtureRequest, facts: Facts) -> dict[str, Any]:
    return facts.jupyter[request.param]


def test_public_api_answers(server: dict) -> None:
    assert status(f"{server['url']}/api") == 200, "JupyterLab does not answer /api: see the container's log"


def test_authenticated_endpoint_needs_the_token(server: dict) -> None:
    assert status(f"{server['url']}/api/kernelspecs", server["token"]) == 200, "the token is not accepted"
    unauthenticated = status(f"{server['url']}/api/kernelspecs")
    assert unauthenticated == 403, (
        f"/api/kernelspecs answered {unauthenticated} without a token: authentication is off; "
        "never start JupyterLab with an empty token")


def test_torch_imports_and_the_mounted_folder_is_writable(server: dict) -> None:
    host = testinfra.get_host(f"docker://{server['container']}")
    assert run(host, "python -c 'import torch'").rc == 0, "torch does not import as this user"
    if server.get("mount"):
        result = run(host, f"sh -c 'echo ok > {server['mount']}/written-by-$(id -u)'")
        assert result.rc == 0, f"the mounted folder is not writable: {result.stderr}"


def test_server_is_not_root(server: dict) -> None:
    host = testinfra.get_host(f"docker://{server['container']}")
    assert run(host, "id -u").stdout.strip() == str(server["uid"]), "JupyterLab runs as another user than asked"
