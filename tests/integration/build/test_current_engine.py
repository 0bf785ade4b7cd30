"""The current engine generation, as the teams this tool is for run it: dockerd 26 with the containerd image store
(scripts/start-current-engine.sh), the current lane's engine (tests/session/lanes.py), while the main lane proves the
classic store. Opt-in: a session with this lane beside the other two took 1716-1762 s and 22-23 GB on 2 cores, over the
session's budget (docs/engines.md):

    bash scripts/start-current-engine.sh
    .venv/bin/python -m pytest -n 3 --current-engine          # the whole session, three lanes
    .venv/bin/python -m pytest -n 3 --current-engine tests/integration/build/test_current_engine.py

Here, on the containerd store: the CPU entry's release as a user runs it (built by the engine's default builder, BuildKit;
its suite; its candidates pushed to the registry and promoted), an image's size the same quantity as on the classic
store, the classic builder, a named buildx builder (a docker context for this engine) chosen by --buildx-builder,
and zstd layers (--compression zstd), which only this store keeps as built. docs/engines.md holds what differs and the
figures."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from tests.session import lanes
from torchimages.engine import CONTAINERD_STORE, Engine, pull_floor
from torchimages.input import matrix, specs
from torchimages.registry import RegistryClient
from torchimages.report import Report

from ..conftest import (
    CANDIDATE,
    CPU_ENTRY,
    RELEASE,
    ROOT,
    EntryBuild,
    Registry,
    as_release_user,
    build_entry,
    build_py,
    entry_spec,
    push_candidates,
    run,
)
from ..stub_wheels import stub_torch_wheel, stub_wheel

pytestmark = [pytest.mark.lane("current")]


@pytest.fixture(scope="module")
def current(api: docker.APIClient) -> Engine:
    """This lane's engine, which must be the current generation. In one lane (no -n), DOCKER_HOST must be that engine:
    elsewhere these tests skip, unless CI is set."""
    if os.environ.get("DOCKER_HOST") != lanes.current_engine():
        said = (f"this module runs on the current lane's engine ({lanes.current_engine()}), not on "
                f"{os.environ.get('DOCKER_HOST')}: run the session with -n 3 --current-engine (tests/session/lanes.py)")
        if os.environ.get("CI"):
            pytest.fail(said)
        pytest.skip(said)
    engine = Engine(api=api)
    if engine.store() != CONTAINERD_STORE:
        pytest.fail(f"the current lane's engine {lanes.current_engine()} is Docker {engine.version()} with the "
                    f"{engine.store()} store: point TORCHIMAGES_CURRENT_ENGINE at the current engine "
                    "(scripts/start-current-engine.sh)")
    return engine


def first_engine() -> docker.APIClient:
    return docker.APIClient(base_url=lanes.first_engine(), version="auto", timeout=600)


def test_the_lanes_engine_is_the_current_generation_with_the_containerd_store(current: Engine) -> None:
    major = int(re.match(r"\d+", current.version())[0])  # type: ignore[index]
    assert major >= 26 and current.store() == CONTAINERD_STORE, (current.version(), current.api.info()["DriverStatus"])
    assert current.default_builder() == "buildkit"
    assert Engine(api=first_engine()).store() == "classic", "the main lane's engine proves the classic store"


def test_the_cpu_release_passes_its_suite_on_the_containerd_store(current: Engine, tested_report: Path) -> None:
    """The README's main job on this engine (cpu_build, smoke_run: the engine's default builder, BuildKit)."""
    records = Report.load(tested_report).images
    assert [(r.variant, r.smoke_passed) for r in records] == [("base", True), ("jupyter", True), ("ssh", True)]
    assert all("(buildx) on Docker 26" in str(r.builder) and "the containerd image store" in str(r.builder)
               for r in records), [r.builder for r in records]
    for record in records:
        held = current.api.inspect_image(record.tag)
        # the ID is the image's manifest digest on this store; the size its unpacked layers, not the packed content
        assert record.image_id == held["Id"] and record.size_bytes, record
        assert record.size_bytes > 2 * held["Size"], (record.size_bytes, held["Size"])
        assert record.floor_bytes and 0.9 < record.size_bytes / record.floor_bytes < 1.3, record


def test_the_candidates_push_and_promote_from_the_containerd_store(registry: Registry, tested_report: Path,
                                                                   tmp_path: Path) -> None:
    candidates = push_candidates(registry, tested_report, tmp_path, "ml/current-engine")
    pushed = json.loads(candidates.read_text())
    assert len(pushed["images"]) == 3 and all(i["digest"].startswith("sha256:") for i in pushed["images"])
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    only_cpu = tmp_path / "cpu.yaml"
    only_cpu.write_text(yaml.safe_dump({**data, "images": [e for e in data["images"] if e["flavor"] == "cpu"]}))
    promoted = as_release_user("promote", "--tag", RELEASE, "--candidates", str(candidates), "--matrix", str(only_cpu),
                               "--registry", f"{registry.host}/ml/current-engine", "--manifest",
                               str(tmp_path / "release.json"), "--plain", registry=registry, cwd=ROOT)
    assert promoted.returncode == 0 and promoted.stderr.count(" promote pushed ") == 3, promoted.stderr[-3000:]
    release = json.loads((tmp_path / "release.json").read_text())
    assert [i["digest"] for i in release["images"]] == [i["digest"] for i in pushed["images"]]
    assert release["promoted_from"] == CANDIDATE


# --- one size on both stores -------------------------------------------------------------------------------------

PROBE = "torchimages-test:current-size"
PROBE_DOCKERFILE = """FROM {base}
RUN head -c 3000000 /dev/urandom > /blob && ln /blob /blob.hard && ln -s /blob /blob.sym && rm -rf /usr/share/doc
"""


@pytest.fixture(scope="module")
def probe(current: Engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A small image built here by BuildKit (gzip-compressed layers, a hard link, a symlink, whiteouts)."""
    folder = tmp_path_factory.mktemp("current-size")
    (folder / "Dockerfile").write_text(PROBE_DOCKERFILE.format(base=base_image))
    built = run(["docker", "buildx", "build", "--load", "--tag", PROBE, str(folder)], timeout=600,
                env=dict(os.environ, DOCKER_HOST=lanes.current_engine()))
    assert built.returncode == 0, built.stderr[-3000:]
    yield PROBE
    current.api.remove_image(PROBE, force=True)


def test_an_image_has_the_same_size_on_both_stores(current: Engine, probe: str) -> None:
    """The same image moved to the classic store (docker save | docker load): its size there, as that store answers
    it, is the size counted here; the containerd store's own answer (the packed content) is another number."""
    first = first_engine()
    saved = current.api.get_image(probe)
    assert first.load_image(b"".join(saved)), "the first engine loaded nothing"
    try:
        classic = int(first.inspect_image(probe)["Size"])
    finally:
        first.remove_image(probe, force=True)
    counted = current.image_size(probe)
    assert counted == classic, f"containerd store: {counted}, classic store: {classic}"
    assert int(current.api.inspect_image(probe)["Size"]) != classic


# --- the classic builder, and a named buildx builder -------------------------------------------------------------

STUB = "current-probe"


def stub_entry(folder: Path) -> tuple[specs.ImageSpec, Path, Path]:
    """A one-entry CPU matrix whose wheels are stand-ins (torch, numpy and the paired libraries: kilobytes)."""
    spec = entry_spec(CPU_ENTRY)
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    entry = {**next(e for e in data["images"] if e["flavor"] == "cpu"), "name": STUB, "variants": []}
    matrix_file = folder / "matrix.yaml"
    matrix_file.write_text(yaml.safe_dump({**data, "images": [entry]}))
    wheels = folder / "wheels"
    wheels.mkdir()
    stub_torch_wheel(wheels, spec.torch, None)
    for name, version in (pin.split("==") for pin in (*spec.domain_pins, "numpy==2.4.6")):
        stub_wheel(wheels, name, version, {f"{name}/__init__.py": f"__version__ = {version!r}\n"})
    return specs.resolve(matrix.load(matrix_file)).specs[0], matrix_file, wheels


@pytest.fixture(scope="module")
def buildx_context() -> Iterator[str]:
    """A docker context for this engine: its buildx builder (the docker driver) is named after it."""
    name = "torchimages-test-current"
    run(["docker", "context", "rm", "-f", name], timeout=60)
    made = run(["docker", "context", "create", name, "--docker", f"host={lanes.current_engine()}"], timeout=60)
    assert made.returncode == 0, made.stderr
    yield name
    run(["docker", "context", "rm", "-f", name], timeout=60)


@pytest.mark.parametrize("builder", ["classic", "buildx-builder"])
def test_both_builders_build_on_the_containerd_store(current: Engine, base_image: str, buildx_context: str,
                                                     builder: str, tmp_path: Path) -> None:
    spec, matrix_file, wheels = stub_entry(tmp_path)
    options = ("--builder", "classic") if builder == "classic" else ("--builder", "buildkit", "--buildx-builder",
                                                                    buildx_context)
    build: EntryBuild = build_entry(spec, tmp_path, "--base-image", base_image, "--wheelhouse", str(wheels), "--offline",
                                    *options, matrix_file=matrix_file, release=f"{RELEASE}-{builder}")
    says = "the classic builder" if builder == "classic" else f"(buildx), builder {buildx_context}"
    assert "building with " in build.result.stderr and says in build.result.stderr, build.result.stderr[-2000:]
    (record,) = build.report["images"]
    held = current.api.inspect_image(record["tag"])
    assert record["result"] == "built" and record["image_id"] == held["Id"], record
    current.api.remove_image(record["tag"], force=True)


def test_a_named_builder_that_does_not_exist_is_one_line_before_any_build(tmp_path: Path) -> None:
    result = build_py("build", "--tag", "v2.7", "--only", "torch*-cpu-*", "--builder", "buildkit", "--buildx-builder",
                      "no-such-builder", "--report", str(tmp_path / "r.json"),
                      env=dict(os.environ, DOCKER_HOST=lanes.current_engine()))
    assert result.returncode == 2, result.stderr
    assert "error: no buildx builder no-such-builder answers here" in result.stderr and not (tmp_path / "r.json").exists()


# --- zstd layers (--compression zstd) --------------------------------------------------------------------------------

def test_zstd_layers_are_built_counted_and_pushed_as_built_and_20_10_cannot_pull_them(
        current: Engine, base_image: str, registry: Registry, tmp_path: Path) -> None:
    """--compression zstd on this store: every layer zstd in the registry after a plain push (so the release records
    min_docker 23.0, engine.pull_floor), the image's size still counted; the first engine, Docker 20.10, fails the pull
    (the fact behind the floor), and refuses the option itself in one line before any build."""
    spec, matrix_file, wheels = stub_entry(tmp_path)
    build: EntryBuild = build_entry(spec, tmp_path, "--base-image", base_image, "--wheelhouse", str(wheels), "--offline",
                                    "--builder", "buildkit", "--compression", "zstd", matrix_file=matrix_file,
                                    release=f"{RELEASE}-zstd")
    (record,) = build.report["images"]
    assert record["result"] == "built" and record["size_bytes"] and record["size_bytes"] > 100_000_000, record
    tag = f"{registry.host}/ml/zstd:{RELEASE}"
    repository, _, name = tag.rpartition(":")
    current.api.tag(record["tag"], repository, name)
    auth = {"username": registry.user, "password": registry.password}
    said = [chunk for chunk in current.api.push(repository, name, stream=True, decode=True, auth_config=auth)]
    assert not [chunk for chunk in said if "error" in chunk], said[-3:]
    client = RegistryClient(registry.host, username=registry.user, password=registry.password,
                            ca=registry.folder / "ca.crt")
    remote = client.tag("ml/zstd", name)
    assert remote is not None and remote.layer_types == ("application/vnd.oci.image.layer.v1.tar+zstd",), remote
    assert pull_floor(remote.layer_types) == "23.0"
    first = first_engine()
    with pytest.raises(docker.errors.APIError, match="invalid tar header"):
        for chunk in first.pull(repository, name, stream=True, decode=True, auth_config=auth):
            if "error" in chunk:
                raise docker.errors.APIError(chunk["error"])
    refused = build_py("build", "--tag", "v2.7", "--only", "torch*-cpu-*", "--builder", "buildkit", "--compression", "zstd",
                       "--report", str(tmp_path / "r.json"), env=dict(os.environ, DOCKER_HOST=lanes.first_engine()))
    assert refused.returncode == 2 and "needs an engine with the containerd image store" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") <= 4 and not (tmp_path / "r.json").exists(), refused.stderr
    current.api.remove_image(tag, force=True)
    current.api.remove_image(record["tag"], force=True)
