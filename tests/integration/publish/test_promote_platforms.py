"""One release tag for every platform, on a real registry (distribution 2.8, TLS, htpasswd): an entry built for
linux/amd64 and linux/arm64 is pushed as one candidate per platform, and `promote` writes an OCI image index at the
release tag that lists both manifests by digest; the engine pulls the platform it is asked for through it.

The candidates stand in for the entry's images: this machine's Debian bases, one of each platform (the arm64 one made
under emulation), pushed under the candidate tags the entry's images would have. promote copies manifests and never
looks into an image, so what it decides is the same; the CUDA images themselves are built and tested for arm64 in
tests/integration/build/test_arm64_cuda_image.py."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest
import requests

from torchimages import manifest
from torchimages.input import matrix, specs
from torchimages.manifest import ManifestImage, ReleaseManifest, SmokeCounts
from torchimages.publish.promote import INDEX_TYPE

from ..conftest import CANDIDATE, RELEASE, ROOT, Registry, as_release_user, build_py

pytestmark = [pytest.mark.lane("main")]

NAME = "torch2.14.0-cu130-cudnn9.24-py3.11"
MATRIX = """registry: registry.example.com/ml/pytorch
images:
  - {flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.11", platforms: [linux/amd64, linux/arm64]}
"""


def push(api: docker.APIClient, registry: Registry, image: str, repository: str, tag: str) -> str:
    """`image` pushed as REPOSITORY:TAG; the digest the registry confirmed."""
    api.tag(image, repository, tag)
    auth = {"username": registry.user, "password": registry.password}
    digest = None
    for chunk in api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth):
        assert "error" not in chunk, chunk
        digest = (chunk.get("aux") or {}).get("Digest") or digest
    api.remove_image(f"{repository}:{tag}")
    assert digest, f"no digest for {repository}:{tag}"
    return digest


def test_a_release_of_two_platforms_has_one_index_per_tag_that_the_engine_pulls_per_platform(
        api: docker.APIClient, registry: Registry, base_image: str, arm64_base_image: str, tmp_path: Path) -> None:
    repository = f"{registry.host}/ml/platforms"
    bases = {"linux/amd64": base_image, "linux/arm64": arm64_base_image}
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    spec = specs.resolve(matrix.load(tmp_path / "matrix.yaml")).specs[0]
    images = []
    for platform, base in bases.items():
        image = f"{NAME}-{platform.split('/')[1]}"
        digest = push(api, registry, base, repository, f"{RELEASE}-{CANDIDATE}-{image}")
        images.append(ManifestImage(image, "base", digest, {"torch": "2.14.0", "cuda": "13.0"},
                                    SmokeCounts(20, 0, 10, 8), platform=platform, runs_on=spec.runs_on(platform)))
    manifest.write(ReleaseManifest(RELEASE, repository, tuple(images), candidate=CANDIDATE), tmp_path / "candidates.json")

    promoted = as_release_user("promote", "--tag", RELEASE, "--candidates", str(tmp_path / "candidates.json"),
                               "--matrix", str(tmp_path / "matrix.yaml"), "--registry", repository, "--plain",
                               "--manifest", str(tmp_path / "release.json"), registry=registry, cwd=ROOT)
    assert promoted.returncode == 0, promoted.stderr
    assert "promoted 2 images and 1 image indexes" in promoted.stdout, promoted.stdout

    # The registry's manifest for the release tag is an OCI image index of both platforms' candidates, by digest.
    answer = requests.get(f"https://{registry.host}/v2/ml/platforms/manifests/{RELEASE}-{NAME}",
                          headers={"Accept": INDEX_TYPE}, auth=(registry.user, registry.password),
                          verify=str(registry.folder / "ca.crt"), timeout=30)
    answer.raise_for_status()
    index = answer.json()
    assert answer.headers["Content-Type"] == INDEX_TYPE and index["mediaType"] == INDEX_TYPE
    listed = {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]}
    assert listed == {image.platform: image.digest for image in images}
    released = manifest.read(tmp_path / "release.json")
    assert released.indexes[0].digest == answer.headers["Docker-Content-Digest"]
    assert json.loads((tmp_path / "release.json").read_text())["indexes"][0]["release_tag"] == f"{repository}:{RELEASE}-{NAME}"

    # Each platform's image is what the engine pulls through the one tag when asked for that platform.
    auth = {"username": registry.user, "password": registry.password}
    for platform, base in bases.items():
        pulled = f"{repository}:{RELEASE}-{NAME}"
        api.pull(pulled, platform=platform, auth_config=auth)
        info = api.inspect_image(pulled)
        assert f"{info['Os']}/{info['Architecture']}" == platform, info
        assert info["RootFS"]["Layers"] == api.inspect_image(base)["RootFS"]["Layers"]
        api.remove_image(pulled)

    # What a host needs travels with the promotion: fit answers from the release's manifest, per platform of the tag
    fit = build_py("fit", "--manifest", str(tmp_path / "release.json"), "--driver", "580.95.05", "--gpu", "GB10",
                   "--platform", "linux/arm64")
    assert fit.returncode == 0 and f"{NAME} [linux/arm64] (base): {repository}:{RELEASE}-{NAME}" in fit.stdout, fit
    assert "sm_120 kernels run on compute capability 12.1" in fit.stdout, fit.stdout
    older_driver = build_py("fit", "--manifest", str(tmp_path / "release.json"), "--driver", "575.57.08", "--gpu", "H100",
                            "--platform", "linux/amd64")
    assert older_driver.returncode == 1 and "driver 575 is older than the 580 this image needs" in older_driver.stdout
    hosts = json.loads((tmp_path / "release-hosts.json").read_text())
    assert hosts["tags"][0]["platforms"]["linux/arm64"]["gpu_archs"] == "8.0 8.6 9.0 10.0 11.0 12.0", hosts
