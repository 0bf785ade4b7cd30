"""Both builders, from the same inputs, give the same images: the same smoke suite passes, the same labels (the
content digest included), user, entrypoint, command, size and constraint file, and no secret in BuildKit's history
or layers either (the CPU build carries the secrets). Every session compares them on the CPU entry, through buildx and
through Debian's 20.10 client; `pytest tests/integration/build/test_buildkit.py --compare-builders` also builds the CUDA
entry and the ngc flavor with the classic builder and compares them with the session's BuildKit builds."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from torchimages.build import render
from torchimages.build.cache import CONTENT_LABEL

from ...buildpy import build_py
from ..conftest import SECRET_PROXY_PASSWORD, SECRET_TOKEN, EntryBuild, run_in, smoke_test
from ..layers import SECRETS, Scan, assert_layered_by_change, scan_images

pytestmark = [pytest.mark.lane("main")]

VARIANTS = ("base", "jupyter", "ssh")
SAME_CONFIG = ("User", "Entrypoint", "Cmd", "Env", "WorkingDir", "ExposedPorts", "Healthcheck")
KEPT_CACHE = 4 * 2**30
RELEASE_LABELS = ("org.opencontainers.image.version", "org.opencontainers.image.base.name")


# entry, the fixture of its classic build, of its BuildKit build, and how BuildKit was driven: buildx
# (scripts/install-buildx.sh, as on GitHub's runners) for every entry, and Debian's 20.10 client with
# DOCKER_BUILDKIT=1 (no buildx plugin) for the CPU entry. The CUDA-sized entries are compared only with
# --compare-builders (whoever changes a builder runs it): a session builds each of them once, with BuildKit.
BUILDS = {"cpu": ("cpu_build", "cpu_buildkit_build", "(buildx)"),
          "cpu-docker-buildkit": ("cpu_build", "cpu_docker_buildkit_build", "(DOCKER_BUILDKIT=1)"),
          "cuda": ("cuda_classic_build", "cuda_build", "(buildx)"),
          "ngc": ("ngc_classic_build", "ngc_build", "(buildx)")}
CUDA_SIZED = ("cuda", "ngc")


@pytest.fixture(scope="module", autouse=True)
def build_cache_trimmed(api: docker.APIClient) -> Iterator[None]:
    """With --compare-builders, BuildKit's cache keeps the CUDA and ngc layers after their images are gone (12 GB
    measured): trimmed to the most recently used few GB at the module's end."""
    yield
    api.prune_builds(keep_storage=KEPT_CACHE)


@pytest.fixture(scope="module", params=[pytest.param(name, marks=[pytest.mark.compare_builders] if name in CUDA_SIZED
                                                     else []) for name in BUILDS])
def builds(request: pytest.FixtureRequest) -> tuple[EntryBuild, EntryBuild]:
    """An entry built by the classic builder and by BuildKit (a CUDA-sized pair is removed with its module)."""
    classic, buildkit, _ = BUILDS[request.param]
    return request.getfixturevalue(classic), request.getfixturevalue(buildkit)


def test_buildkit_built_every_image_through_the_cli(builds: tuple[EntryBuild, EntryBuild],
                                                    request: pytest.FixtureRequest) -> None:
    buildkit = builds[1]
    says = BUILDS[request.node.callspec.params["builds"]][2]
    assert {r["variant"]: r["result"] for r in buildkit.report["images"]} == dict.fromkeys(VARIANTS, "built")
    log = buildkit.result.stderr
    assert " step 1/" in log and "builder: RUN" in log, log[-3000:]  # BuildKit's stages lead its step lines
    assert all(says in r["builder"] for r in buildkit.report["images"]), buildkit.report["images"][0]["builder"]
    assert all("classic builder" in r["builder"] for r in builds[0].report["images"])


# The buildx CPU images' suite runs in test_workflows.py (ci.yml's cpu-image job builds them with buildx and tests them,
# and that test checks they are these images' layers); the DOCKER_BUILDKIT=1 images are the same layers again (below).
@pytest.mark.parametrize("builds", [pytest.param(name, marks=pytest.mark.compare_builders) for name in CUDA_SIZED],
                         indirect=True)
def test_buildkit_images_pass_the_smoke_suite(builds: tuple[EntryBuild, EntryBuild], tmp_path: Path) -> None:
    result, report = smoke_test(builds[1], tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    for record in report["images"]:
        smoke = record["stages"]["smoke"]
        assert smoke["passed"] > 0 and smoke["failed"] == 0, record


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_docker_buildkit_images_are_the_buildx_images(api: docker.APIClient, cpu_buildkit_build: EntryBuild,
                                                          cpu_docker_buildkit_build: EntryBuild, variant: str) -> None:
    """Debian's 20.10 client (DOCKER_BUILDKIT=1) and buildx drive the engine's one BuildKit: from the same inputs they
    make the same layers and configuration, the release's labels aside. So the suite that passes on the buildx images
    holds for these, and it is not run on them again (51 s)."""
    buildx, docker_buildkit = (api.inspect_image(b.tags[variant]) for b in (cpu_buildkit_build, cpu_docker_buildkit_build))
    assert docker_buildkit["RootFS"]["Layers"] == buildx["RootFS"]["Layers"], f"{variant}: other layers"
    for key in SAME_CONFIG:
        assert docker_buildkit["Config"].get(key) == buildx["Config"].get(key), f"{variant}: {key} differs"
    labels = [{k: v for k, v in info["Config"]["Labels"].items() if k not in RELEASE_LABELS}
              for info in (buildx, docker_buildkit)]
    assert labels[0] == labels[1], variant


@pytest.mark.parametrize("variant", VARIANTS)
def test_both_backends_make_the_same_image(api: docker.APIClient, builds: tuple[EntryBuild, EntryBuild],
                                           variant: str) -> None:
    classic, buildkit = (api.inspect_image(b.tags[variant]) for b in builds)
    assert classic["Id"] != buildkit["Id"]
    for key in SAME_CONFIG:
        assert classic["Config"].get(key) == buildkit["Config"].get(key), f"{variant}: {key} differs"
    labels = {k: v for k, v in buildkit["Config"]["Labels"].items() if k not in RELEASE_LABELS}
    assert labels == {k: v for k, v in classic["Config"]["Labels"].items() if k not in RELEASE_LABELS}
    assert labels[CONTENT_LABEL].startswith("sha256:"), "the same inputs give the same content digest"
    assert abs(buildkit["Size"] - classic["Size"]) < 0.01 * classic["Size"], (buildkit["Size"], classic["Size"])
    constraints = [run_in(api, b.tags[variant], ["cat", "/etc/pip/torchimages-constraints.txt"])[1] for b in builds]
    assert constraints[0] == constraints[1] and "torch==" in constraints[0]
    # The same wheels, by file and sha256 (the wheel lock: torchimages/wheellock.py)
    classic_lock, buildkit_lock = (b.record(variant)["wheels"] for b in builds)
    assert classic_lock == buildkit_lock, buildkit_lock
    if builds[0].spec.flavor != "ngc":  # an NGC base's torch is the base's, not pip's
        assert any(line.startswith("torch==") for line in classic_lock), classic_lock


@pytest.fixture(scope="module")
def buildkit_scans(api: docker.APIClient, cpu_buildkit_build: EntryBuild) -> dict[str, Scan]:
    """BuildKit's three CPU images exported and searched at once: the layers they share are read once."""
    return scan_images(api, list(cpu_buildkit_build.tags.values()), SECRETS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_secret_in_buildkit_history_or_layers(api: docker.APIClient, cpu_buildkit_build: EntryBuild,
                                                 buildkit_scans: dict[str, Scan], variant: str) -> None:
    tag = cpu_buildkit_build.tags[variant]
    history = subprocess.run(["docker", "history", "--no-trunc", tag], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    assert SECRET_TOKEN not in history and SECRET_PROXY_PASSWORD not in history, history
    scan = buildkit_scans[tag]
    assert scan.layers == len(set(api.inspect_image(tag)["RootFS"]["Layers"])) and scan.configs == 1
    assert scan.found == [], f"secrets in exported layers of {tag}: {scan.found}"


def test_buildkit_lays_the_environment_out_by_how_often_it_changes(cpu_buildkit_build: EntryBuild,
                                                                   buildkit_scans: dict[str, Scan]) -> None:
    """As the classic builder does (test_build_cpu.py): the torch layer, then the rest of the environment, each file
    in one layer."""
    assert_layered_by_change(buildkit_scans, cpu_buildkit_build.tags, render.environment_pieces(cpu_buildkit_build.spec))


def test_bake_builds_the_base_with_the_layers_and_labels_of_build_py(api: docker.APIClient, cpu_build: EntryBuild,
                                                                      cpu_buildkit_build: EntryBuild,
                                                                      tmp_path: Path) -> None:
    """`build.py bake` exports the CPU entry from the same inputs (the index token and the proxy password among them),
    and `docker buildx bake` builds its base on the same engine: the same layers and labels as `build.py build
    --builder buildkit` (each step found in the builder's cache, which only the same inputs find), the release's
    labels aside; no secret in the bake file."""
    exported = build_py("bake", "--tag", cpu_buildkit_build.release, "--images",
                        str(cpu_buildkit_build.report_path.parent / "images"), "--only", cpu_build.spec.name,
                        *cpu_build.options, "--out", str(tmp_path / "bake"), env=cpu_build.env)
    assert exported.returncode == 0, exported.stderr
    text = (tmp_path / "bake" / "docker-bake.json").read_text()
    assert SECRET_TOKEN not in text and SECRET_PROXY_PASSWORD not in text
    target = next(iter(json.loads(text)["target"]))
    tag = "torchimages-test:bake-base"
    baked = subprocess.run(["docker", "buildx", "bake", "-f", str(tmp_path / "bake" / "docker-bake.json"), target,
                            "--set", f"{target}.tags={tag}", "--progress=plain"], capture_output=True, text=True,
                           timeout=1200, env=cpu_build.env, check=False)
    try:
        assert baked.returncode == 0, baked.stderr[-4000:]
        built, made = api.inspect_image(cpu_buildkit_build.tags["base"]), api.inspect_image(tag)
        assert made["RootFS"]["Layers"] == built["RootFS"]["Layers"], baked.stderr[-4000:]
        labels = [{k: v for k, v in info["Config"]["Labels"].items() if k not in RELEASE_LABELS} for info in (built, made)]
        assert labels[0] == labels[1] and CONTENT_LABEL in labels[0]
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_image(tag)
