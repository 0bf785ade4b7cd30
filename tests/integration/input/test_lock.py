"""`build.py lock` against a real registry (distribution 2.8, TLS, htpasswd): push a base, lock it,
move the tag upstream, refresh; render pins what the lock holds; and the pinned FROM builds."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

import docker
import pytest

from torchimages.engine import connect

from ..conftest import BASE_IMAGE, Registry, build_py

pytestmark = [pytest.mark.lane("side")]

MATRIX = """registry: registry.example.com/ml/locked
images:
  - flavor: cpu
    torch: "2.13.0"
    python: "3.11"
    base_image: {base}
"""


def lock_cli(folder: Path, registry: Registry, *args: str) -> subprocess.CompletedProcess[str]:
    """build.py in `folder`, with the registry's credentials where docker login puts them (DOCKER_CONFIG)."""
    config = folder / "docker-config"
    config.mkdir(exist_ok=True)
    auth = base64.b64encode(f"{registry.user}:{registry.password}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
    env = {**os.environ, "DOCKER_CONFIG": str(config)}
    return build_py(*args, cwd=folder, env=env, timeout=300)


def push_as(api: docker.APIClient, registry: Registry, image: str, reference: str) -> str:
    """Push `image` as `reference`; the manifest digest the registry answered."""
    repository, tag = reference.rsplit(":", 1)
    api.tag(image, repository, tag)
    auth = {"username": registry.user, "password": registry.password}
    digest = None
    for chunk in api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth):
        assert "error" not in chunk, chunk
        digest = (chunk.get("aux") or {}).get("Digest", digest)
    assert digest, "the push reported no digest"
    return digest


def other_image(api: docker.APIClient, image: str) -> str:
    """The same base with one more layer: what a moved upstream tag points at."""
    container = api.create_container(image, command=["true"])
    try:
        return api.commit(container["Id"], changes=["LABEL moved=yes"])["Id"]
    finally:
        api.remove_container(container, force=True)


def test_lock_pins_refresh_moves_and_render_writes_the_pin(api: docker.APIClient, base_image: str, registry: Registry,
                                                          tmp_path: Path) -> None:
    base = f"{registry.host}/base/debian:bookworm"
    first = push_as(api, registry, BASE_IMAGE, base)
    (tmp_path / "matrix.yaml").write_text(MATRIX.format(base=base))

    locked = lock_cli(tmp_path, registry, "lock")
    assert locked.returncode == 0, locked.stderr
    assert f"pinned  {base} -> {first}" in locked.stdout
    pins = json.loads((tmp_path / "matrix.lock").read_text())["pins"]
    assert pins[base]["digest"] == first
    assert pins[base]["source"] == f"https://{registry.host}/v2/base/debian/manifests/bookworm"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", pins[base]["locked_at"])

    rendered = lock_cli(tmp_path, registry, "render", "--tag", "v1")
    assert rendered.returncode == 0, rendered.stderr
    dockerfile = (tmp_path / "images" / "torch2.13.0-cpu-py3.11" / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={base}@{first}\n" in dockerfile

    moved = push_as(api, registry, other_image(api, BASE_IMAGE), base)  # upstream moves the tag
    assert moved != first
    again = lock_cli(tmp_path, registry, "lock")
    assert again.returncode == 0 and "0 changed" in again.stdout, "without --refresh the pin stays"
    assert lock_cli(tmp_path, registry, "render", "--check").returncode == 0, "the render still matches the lock"

    refreshed = lock_cli(tmp_path, registry, "lock", "--refresh")
    assert refreshed.returncode == 0, refreshed.stderr
    assert f"moved   {base}: {first} -> {moved}" in refreshed.stdout
    stale = lock_cli(tmp_path, registry, "render", "--check")
    assert stale.returncode == 1 and "torch2.13.0-cpu-py3.11/Dockerfile" in stale.stderr, stale.stderr


def test_the_classic_builder_builds_the_pinned_from_line(api: docker.APIClient, base_image: str, registry: Registry,
                                                         tmp_path: Path) -> None:
    """What render writes (`ARG BASE_IMAGE=tag@digest`, `FROM ${BASE_IMAGE}`) builds on the pinned image, not on what
    the tag points at now."""
    base = f"{registry.host}/base/pinned:1"
    first = push_as(api, registry, BASE_IMAGE, base)
    push_as(api, registry, other_image(api, BASE_IMAGE), base)  # the tag moves on to an image labelled moved=yes
    (tmp_path / "Dockerfile").write_text(f"ARG BASE_IMAGE={base}@{first}\nFROM ${{BASE_IMAGE}}\nRUN true\n")
    client = connect(600)  # a client of its own: the login below stays with it
    client.login(registry.user, registry.password, registry=registry.host)  # sent with the build for the pull
    tag = "torchimages-test/pinned:1"
    for chunk in client.build(path=str(tmp_path), tag=tag, decode=True, rm=True, forcerm=True, pull=True):
        assert "error" not in chunk, chunk
    try:
        labels = api.inspect_image(tag)["Config"].get("Labels") or {}
        assert "moved" not in labels, "the build used the moved tag, not the pinned digest"
    finally:
        api.remove_image(tag, force=True)
