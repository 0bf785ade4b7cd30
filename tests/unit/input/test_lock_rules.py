"""The lock's rules that need no registry: where a reference is served, what the lock pins and drops, what
render writes for a pinned base, and when the lock is stale. tests/integration/input/test_lock.py resolves against a real
registry."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from torchimages.build import render
from torchimages.errors import UserError
from torchimages.input import lock, matrix, specs

from ..conftest import ROOT, build_py

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


@pytest.mark.parametrize(("reference", "api_host", "login_host", "repository", "tag"), [
    ("debian:bookworm-slim", "registry-1.docker.io", "docker.io", "library/debian", "bookworm-slim"),
    ("nvidia/cuda:12.1.1-base-ubuntu22.04", "registry-1.docker.io", "docker.io", "nvidia/cuda", "12.1.1-base-ubuntu22.04"),
    ("docker.io/nvidia/cuda:13.0.2-base-ubuntu24.04", "registry-1.docker.io", "docker.io", "nvidia/cuda",
     "13.0.2-base-ubuntu24.04"),
    ("nvcr.io/nvidia/pytorch:26.03-py3", "nvcr.io", "nvcr.io", "nvidia/pytorch", "26.03-py3"),
    ("127.0.0.1:5000/base/debian:bookworm", "127.0.0.1:5000", "127.0.0.1:5000", "base/debian", "bookworm"),
    ("127.0.0.1:5000/base/debian", "127.0.0.1:5000", "127.0.0.1:5000", "base/debian", "latest"),
    ("localhost/debian:12", "localhost", "localhost", "debian", "12"),
    ("ubuntu", "registry-1.docker.io", "docker.io", "library/ubuntu", "latest"),
    ("docker.io/debian:bookworm", "registry-1.docker.io", "docker.io", "library/debian", "bookworm"),
    ("index.docker.io/ubuntu", "registry-1.docker.io", "docker.io", "library/ubuntu", "latest"),
])
def test_references_are_located_as_docker_normalizes_them(reference: str, api_host: str, login_host: str,
                                                          repository: str, tag: str) -> None:
    assert lock.locate(reference) == lock.Location(api_host, login_host, repository, tag)


def plan(text: str | None = None) -> specs.Plan:
    return specs.resolve(matrix.loads(text or (ROOT / "matrix.yaml").read_text(), "matrix.yaml"))


def test_lock_pins_every_base_tag_once_and_refresh_moves_only_what_moved(tmp_path: Path) -> None:
    the_plan = plan()
    tags = lock.base_tags(the_plan)
    assert len(tags) == len({spec.base_image for spec in the_plan.specs}) >= 3
    asked: list[str] = []

    def resolver(digests: dict[str, str]) -> lock.Resolver:
        def resolve(location: lock.Location) -> str | None:
            asked.append(location.url)
            return digests.get(location.url, DIGEST_A)
        return resolve

    lock_file = lock.LockFile(tmp_path / "matrix.lock")
    first = lock.update(the_plan, lock_file, resolver({}), refresh=False)
    assert [c.tag for c in first] == tags and all(c.old is None and c.new == DIGEST_A for c in first)
    assert len(asked) == len(tags)
    lock_file.write()
    again = lock.LockFile.load(tmp_path / "matrix.lock")
    assert again.digests() == {tag: DIGEST_A for tag in tags}
    assert lock.update(the_plan, again, resolver({}), refresh=False) == [], "a lock is not resolved again unasked"
    assert len(asked) == len(tags)

    moved_url = lock.locate(tags[0]).url
    changes = lock.update(the_plan, again, resolver({moved_url: DIGEST_B}), refresh=True)
    assert [(c.tag, c.old, c.new) for c in changes] == [(tags[0], DIGEST_A, DIGEST_B)]
    assert changes[0].line() == f"moved   {tags[0]}: {DIGEST_A} -> {DIGEST_B}"
    assert again.pins[tags[0]].source == moved_url


def test_a_tag_the_matrix_drops_is_dropped_and_a_missing_tag_refused(tmp_path: Path) -> None:
    lock_file = lock.LockFile(tmp_path / "matrix.lock", {"old/base:1": lock.Pin(DIGEST_A, "2026-01-01T00:00:00Z", "u")})
    the_plan = plan()
    assert lock.stale(the_plan, lock_file)[-1] == "matrix.lock pins old/base:1, which the matrix no longer uses"
    changes = lock.update(the_plan, lock_file, lambda location: DIGEST_B, refresh=False)
    assert changes[-1].line() == f"dropped old/base:1 (was {DIGEST_A})" and "old/base:1" not in lock_file.pins
    assert lock.stale(the_plan, lock_file) == []
    with pytest.raises(UserError, match=r"the registry has no such tag \(https://registry-1.docker.io/v2/"):
        lock.update(the_plan, lock.LockFile(tmp_path / "x.lock"), lambda location: None, refresh=False)


def test_a_damaged_lock_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "matrix.lock"
    path.write_text('{"pins": {"debian:12": {"digest": "sha256:1", "locked_at": "t", "source": "u"}}}')
    with pytest.raises(UserError, match="pins: debian:12: field 'digest': 'sha256:1' is not a digest"):
        lock.LockFile.load(path)
    path.write_text("[1, 2")
    with pytest.raises(UserError, match="not a lock file \\(not JSON"):
        lock.LockFile.load(path)


def test_render_writes_from_tag_at_digest_for_what_the_lock_pins() -> None:
    the_plan = plan()
    cuda = next(spec for spec in the_plan.specs if spec.flavor == "cuda")
    pinned = replace(the_plan, pins={cuda.base_image: DIGEST_A})
    files = render.rendered_files(pinned, "v1")
    dockerfile = files[f"{cuda.name}/Dockerfile"][0]
    assert f"ARG BASE_IMAGE={cuda.base_image}@{DIGEST_A}\n" in dockerfile
    assert f'org.opencontainers.image.base.digest="{DIGEST_A}"' in dockerfile
    unpinned = render.rendered_files(the_plan, "v1")
    assert f"ARG BASE_IMAGE={cuda.base_image}\n" in unpinned[f"{cuda.name}/Dockerfile"][0]
    others = [name for name in files if files[name] != unpinned[name]]
    assert sorted(others) == [f"{cuda.name}/Dockerfile", f"{cuda.name}/Dockerfile.buildkit"], \
        "only the pinned base's Dockerfiles (both syntaxes) change"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return build_py(*args, cwd=cwd, timeout=120)


def test_render_check_fails_when_the_lock_is_stale_for_the_matrix(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text((ROOT / "matrix.yaml").read_text())
    tags = lock.base_tags(plan())
    pins = {tag: {"digest": DIGEST_A, "locked_at": "2026-12-01T00:00:00Z", "source": lock.locate(tag).url} for tag in tags}
    (tmp_path / "matrix.lock").write_text(json.dumps({"pins": pins}))
    rendered = cli("render", "--tag", "v1", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert f"@{DIGEST_A}" in (tmp_path / "images" / plan().specs[0].name / "Dockerfile").read_text()
    assert cli("render", "--check", cwd=tmp_path).returncode == 0

    del pins[tags[0]]
    (tmp_path / "matrix.lock").write_text(json.dumps({"pins": pins}))
    check = cli("render", "--check", cwd=tmp_path)
    assert check.returncode == 1
    assert f"matrix.lock has no pin for {tags[0]}: run python build.py lock" in check.stderr


def test_a_base_the_matrix_pins_by_digest_is_never_looked_up_or_locked(tmp_path: Path) -> None:
    """A base_image given as tag@digest is pinned already: lock asks no registry for it, writes no pin, and the lock is
    not stale without one; render writes the matrix's reference as it is."""
    pinned = f"debian:bookworm-slim@{DIGEST_B}"
    the_plan = plan(f"""
registry: registry.example.com/ml/pytorch
images:
  - {{flavor: cpu, torch: "2.13.0", python: "3.11", base_image: "{pinned}"}}
  - {{flavor: cpu, name: cpu-tagged, torch: "2.13.0", python: "3.11", base_image: "debian:trixie-slim"}}
""")
    asked: list[str] = []
    lock_file = lock.LockFile(tmp_path / "matrix.lock")
    lock.update(the_plan, lock_file, lambda location: asked.append(location.url) or DIGEST_A, refresh=True)
    assert asked == [lock.locate("debian:trixie-slim").url] and list(lock_file.pins) == ["debian:trixie-slim"]
    assert lock.stale(the_plan, lock_file) == []
    pinned_spec = next(spec for spec in the_plan.specs if spec.base_image == pinned)
    dockerfile = render.rendered_files(replace(the_plan, pins=lock_file.digests()), "v1")[f"{pinned_spec.name}/Dockerfile"][0]
    assert f"ARG BASE_IMAGE={pinned}\n" in dockerfile
