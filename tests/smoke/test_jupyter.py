"""JupyterLab as users start it: the default command and the literal `jupyter lab`, `jupyter notebook` and
`jupyter server`, with a token given or generated, also under an arbitrary --user UID:GID. Each must
serve the same way: on 0.0.0.0:8888, from /workspace, authentication always on, never as root."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from typing import Any

import docker
import pytest
import testinfra

from .conftest import Facts, run

ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"


def fetch(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, ""


def status(url: str, token: str | None = None) -> int:
    return fetch(url, token)[0]


def started_as(server: dict) -> str:
    return " ".join(server["command"]) if server["command"] else "the default command"


SERVICE = "jupyter"  # one run of each `server` check per form in facts.jupyter (conftest.pytest_generate_tests)


@pytest.fixture
def server(server_name: str, facts: Facts) -> dict[str, Any]:
    return facts.jupyter[server_name]


def test_public_api_answers(server: dict) -> None:
    assert status(f"{server['url']}/api") == 200, (
        f"Jupyter started with {started_as(server)} does not answer /api on the published port 8888: "
        f"is it listening on 0.0.0.0? log:\n{server['log'][-1500:]}")


def test_authenticated_endpoint_needs_the_token(server: dict) -> None:
    assert server["token"], f"no generated token was printed by {started_as(server)}; log:\n{server['log'][-1500:]}"
    assert status(f"{server['url']}/api/kernelspecs", server["token"]) == 200, "the token is not accepted"
    unauthenticated = status(f"{server['url']}/api/kernelspecs")
    assert unauthenticated == 403, (
        f"/api/kernelspecs answered {unauthenticated} without a token: authentication is off; "
        "never start JupyterLab with an empty token")


def test_generated_token_is_printed_once(facts: Facts) -> None:
    log = facts.jupyter["generated-token"]["log"]
    printed = re.findall(r"JupyterLab token \(generated", log)
    assert len(printed) == 1, f"the generated token was printed {len(printed)} times, not once; log:\n{log[-1500:]}"


def test_serves_the_workspace(server: dict) -> None:
    host = testinfra.get_host(f"docker://{server['container']}")
    marker = f"served-{server['uid']}.txt"
    assert run(host, f"sh -c 'echo ok > /workspace/{marker}'").rc == 0, "/workspace is not writable"
    code, body = fetch(f"{server['url']}/api/contents", server["token"])
    assert code == 200, f"/api/contents answered {code}"
    names = {item["name"] for item in json.loads(body)["content"]}
    assert marker in names, f"Jupyter started with {started_as(server)} serves another folder than /workspace: {sorted(names)}"


def test_news_prompt_is_off(facts: Facts) -> None:
    server = facts.jupyter["jupyter-lab"]
    code, page = fetch(f"{server['url']}/lab", server["token"])
    assert code == 200, f"/lab answered {code}"
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
                        .group(1))
    assert ANNOUNCEMENTS in config.get("disabledExtensions", []), (
        f"JupyterLab's news prompt is on: {ANNOUNCEMENTS} is not disabled ({config.get('disabledExtensions')})")


def test_torch_imports_and_the_mounted_folder_is_writable(server: dict) -> None:
    host = testinfra.get_host(f"docker://{server['container']}")
    assert run(host, "python -c 'import torch'").rc == 0, "torch does not import as this user"
    if server.get("mount"):
        result = run(host, f"sh -c 'echo ok > {server['mount']}/written-by-$(id -u)'")
        assert result.rc == 0, f"the mounted folder is not writable: {result.stderr}"


def test_server_is_not_root(server: dict, facts: Facts) -> None:
    want = 4242 if server.get("mount") else int(facts.user.split(":")[0])  # the image's USER, numeric
    assert server["uid"] != 0, f"Jupyter started with {started_as(server)} runs as root"
    assert server["uid"] == want, f"Jupyter started with {started_as(server)} runs as UID {server['uid']}, not {want}"


def test_healthcheck_turns_healthy(server: dict) -> None:
    """The image's HEALTHCHECK (interval 15 s) reports the running server healthy, whoever runs it."""
    api = docker.from_env(version="auto", timeout=30).api  # DOCKER_HOST is honoured, as by the runner
    deadline, health = time.monotonic() + 90, {}
    while time.monotonic() < deadline:
        health = api.inspect_container(server["container"])["State"].get("Health") or {}
        if health.get("Status") in ("healthy", "unhealthy"):
            break
        time.sleep(2)
    assert health, "the image has no HEALTHCHECK"
    assert health.get("Status") == "healthy", (
        f"Jupyter started with {started_as(server)} is {health.get('Status')}: {(health.get('Log') or [{}])[-1]}")
