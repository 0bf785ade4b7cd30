"""The CPU entry built on a real engine: torch in every image, shared layers, report, no secrets."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import docker
import pytest

from torchimages import wheellock
from torchimages.build import render

from ..conftest import SECRET_PROXY_PASSWORD, SECRET_TOKEN, EntryBuild, build_py, run_in
from ..layers import SECRETS, Scan, assert_layered_by_change, scan_images

pytestmark = [pytest.mark.lane("main")]


@pytest.mark.parametrize("variant", ["base", "jupyter", "ssh"])
def test_torch_version_in_each_image(api: docker.APIClient, cpu_build: EntryBuild, variant: str) -> None:
    tag = cpu_build.tags[variant]
    _, output = run_in(api, tag, ["python", "-c", "import torch; print(torch.__version__)"])
    assert output.strip().split("+")[0] == cpu_build.spec.torch, f"{tag} holds torch {output.strip()}"


def test_report_records_every_image(cpu_build: EntryBuild) -> None:
    records = {r["variant"]: r for r in cpu_build.report["images"]}
    assert set(records) == {"base", "jupyter", "ssh"}
    for variant, record in records.items():
        assert record["result"] == "built", record
        assert record["size_bytes"] > 100_000_000 and record["layers"] > 1 and record["image_id"].startswith("sha256:")
        assert record["versions"]["torch"] == cpu_build.spec.torch and record["versions"]["cuda"] is None
        if variant != "base":
            assert 0 < record["adds_bytes"] < record["size_bytes"]
    assert "report:" in cpu_build.result.stdout


def test_each_image_records_the_wheels_pip_installed_by_their_files_sha256(cpu_build: EntryBuild,
                                                                          wheelhouse: Path) -> None:
    """The wheel lock (torchimages/wheellock.py): each image keeps its pip steps' reports, the report holds the lock;
    each locked file is the wheelhouse's, by sha256, and the lock checks out against the wheelhouse alone."""
    locks = {variant: [wheellock.parse_line(line) for line in cpu_build.record(variant)["wheels"]]
             for variant in ("base", "jupyter", "ssh")}
    torch = next(wheel for wheel in locks["base"] if wheel.name == "torch")
    assert torch.version.split("+")[0] == cpu_build.spec.torch and torch.url.startswith("file:///tmp/build-config/")
    for wheel in locks["jupyter"]:
        assert wheel.sha256 == hashlib.sha256((wheelhouse / wheel.file).read_bytes()).hexdigest(), wheel
    assert set(locks["base"]) == set(locks["ssh"]) < set(locks["jupyter"])  # a variant adds to its base's lock
    assert {w.name for w in set(locks["jupyter"]) - set(locks["base"])} >= {"jupyterlab", "notebook", "ipykernel"}
    lock = cpu_build.report_path.parent / "jupyter.lock.txt"
    written = build_py("wheels", "lock", "--image", cpu_build.tags["jupyter"], "--out", str(lock), env=cpu_build.env)
    assert written.returncode == 0 and lock.read_text().splitlines() == cpu_build.record("jupyter")["wheels"], written
    checked = build_py("wheels", "check", str(lock), "--wheelhouse", str(wheelhouse), "--offline", env=cpu_build.env)
    assert checked.returncode == 0, checked.stderr
    assert f"{len(locks['jupyter'])} of {len(locks['jupyter'])} locked wheels served" in checked.stdout


def test_variants_share_every_base_layer(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    base = api.inspect_image(cpu_build.tags["base"])["RootFS"]["Layers"]
    for variant in ("jupyter", "ssh"):
        layers = api.inspect_image(cpu_build.tags[variant])["RootFS"]["Layers"]
        assert layers[: len(base)] == base, f"{variant} does not reuse the base layers"


def test_labels_declare_the_versions(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    labels = api.inspect_image(cpu_build.tags["jupyter"])["Config"]["Labels"]
    assert labels["io.torchimages.torch"] == cpu_build.spec.torch
    assert labels["io.torchimages.python"] == cpu_build.spec.python
    assert labels["io.torchimages.variant"] == "jupyter"
    assert labels["org.opencontainers.image.version"] == "it"


def test_default_user_is_not_root(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    for tag in cpu_build.tags.values():
        user = api.inspect_image(tag)["Config"]["User"]
        assert user and not user.startswith(("0", "root")), f"{tag} runs as {user!r}"


def test_pip_constraint_blocks_replacing_torch(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    status, output = run_in(api, cpu_build.tags["base"], ["pip", "install", "--no-index", "torch==2.0.0"],
                            must_succeed=False)
    assert status != 0
    assert "(constraint) torch==" in output, f"pip was not stopped by the constraint file: {output}"




@pytest.fixture(scope="module")
def scans(api: docker.APIClient, cpu_build: EntryBuild) -> dict[str, Scan]:
    """The three images exported and searched at once: the layers they share are read once."""
    return scan_images(api, list(cpu_build.tags.values()), SECRETS)


@pytest.mark.parametrize("variant", ["base", "jupyter", "ssh"])
def test_no_secret_in_history_or_layers(api: docker.APIClient, cpu_build: EntryBuild, scans: dict[str, Scan],
                                        variant: str) -> None:
    tag = cpu_build.tags[variant]
    history = subprocess.run(["docker", "history", "--no-trunc", tag], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    for secret in (SECRET_TOKEN, SECRET_PROXY_PASSWORD):
        assert secret not in history, f"{secret} in docker history of {tag}"
    scan = scans[tag]
    layers = set(api.inspect_image(tag)["RootFS"]["Layers"])
    assert scan.layers == len(layers), f"scanned {scan.layers} of the {len(layers)} layers of {tag}"
    assert scan.configs == 1 and any(name.endswith("/site-packages/torch/__init__.py") for name in scan.files), (
        "the scan did not read the image config and the files torch installed")
    assert scan.found == [], f"secrets in exported layers of {tag}: {scan.found}"


def test_the_environment_is_layered_by_how_often_it_changes(cpu_build: EntryBuild, scans: dict[str, Scan]) -> None:
    """The torch layer in its pieces (numpy in the last), then the entry's `pip:` packages, then configuration (a pip
    change moves only the latter); each variant adds its own files only: no file of any image is in two of its layers."""
    assert_layered_by_change(scans, cpu_build.tags, render.environment_pieces(cpu_build.spec))
