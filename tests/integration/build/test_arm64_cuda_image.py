"""A linux/arm64 CUDA image built and tested on this x86_64 machine, under emulation (scripts/setup-emulation.sh):
the CUDA 13.0 entry (torch 2.14.0 cu130, whose aarch64 wheels are the CUDA build) for both platforms, its arm64 base
and ssh variant built by BuildKit, as the release workflow builds, from PyPI's aarch64 wheels. torch's aarch64 wheels are
installed by the build platform's pip (TORCH_INSTALL=cross): every wheel is the real aarch64 one, no emulator unpacks
them; the same cross install from an offline wheelhouse is built first, with stand-in wheels for both machines. The
suite then runs in the arm64 containers: versions, hygiene, the GPU-ready tier (CUDA, cuDNN and NCCL read from the
aarch64 libraries, every CUDA library loads, the aarch64 wheel's kernels cover what the compat data claims for arm64, one
copy of each) and the ssh service as users start it."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from torchimages.input import matrix, specs

from ..conftest import (
    DATA,
    RELEASE,
    EntryBuild,
    build_entry,
    from_pypi,
    removed_at_the_end,
    script,
    smoke_test,
)
from ..stub_wheels import stub_torch_wheel, stub_wheel

pytestmark = [pytest.mark.lane("side"), pytest.mark.heavy]

MATRIX = DATA / "cu130-py311-platforms.matrix.yaml"
ARM64 = "linux/arm64"


def cuda_bases(spec: specs.ImageSpec, base_image: str, arm64_base_image: str) -> dict[str, str]:
    """The entry's CUDA base for each platform, made from the Debian bases; the amd64 one is the cross-installer's."""
    bases = {}
    for platform, os_base in (("linux/amd64", base_image), (ARM64, arm64_base_image)):
        bases[platform] = f"torchimages/cuda:{spec.cuda_image}-base-debian12{'-arm64' if platform == ARM64 else ''}"
        script("make-cuda-base-image.sh", str(spec.cuda_image), bases[platform], os_base)
    return bases


def platform_options(bases: dict[str, str]) -> tuple[str, ...]:
    # The amd64 base is the cross-installer's: the build platform's pip installs the aarch64 wheels
    return ("--platform", ARM64, "--base-image", bases["linux/amd64"], "--base-image", f"{ARM64}={bases[ARM64]}",
            "--builder", "buildkit")


def stub_wheelhouse(spec: specs.ImageSpec, folder: Path) -> Path:
    """The entry's wheels as stand-ins: torch for both machines, each naming its machine, its paired libraries and
    numpy. Only the aarch64 torch may reach the build (the context holds the target's wheels, pip picks them)."""
    folder.mkdir()
    for machine in ("x86_64", "aarch64"):
        stub_torch_wheel(folder, spec.torch, spec.cuda, f"cp311-cp311-manylinux_2_17_{machine}", machine=machine)
    for name, version in (pin.split("==") for pin in (*spec.domain_pins, "numpy==2.4.6")):
        stub_wheel(folder, name, version, {f"{name}/__init__.py": f"__version__ = {version!r}\n"})
    return folder


@pytest.fixture(scope="module")
def arm64_stub_build(api: docker.APIClient, base_image: str, arm64_base_image: str,
                     tmp_path_factory: pytest.TempPathFactory) -> EntryBuild:
    """The entry's base for linux/arm64 from a wheelhouse alone (--offline), its wheels stand-ins; built before the
    real one, which then finds the emulated OS steps in the builder's cache."""
    spec = specs.resolve(matrix.load(MATRIX)).specs[0]
    folder = tmp_path_factory.mktemp("arm64-stub")
    return build_entry(spec, folder, *platform_options(cuda_bases(spec, base_image, arm64_base_image)),
                       "--wheelhouse", str(stub_wheelhouse(spec, folder / "wheels")), "--offline",
                       matrix_file=MATRIX, release=f"{RELEASE}-stub", only=spec.name)


@pytest.fixture(scope="module")
def arm64_cuda_build(api: docker.APIClient, base_image: str, arm64_base_image: str, arm64_stub_build: EntryBuild,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    """The entry and its ssh variant for linux/arm64 from PyPI's aarch64 wheels."""
    spec = specs.resolve(matrix.load(MATRIX)).specs[0]
    options = platform_options(cuda_bases(spec, base_image, arm64_base_image))
    yield from removed_at_the_end(api, lambda: build_entry(
        spec, tmp_path_factory.mktemp("arm64-cuda"), *options, *from_pypi(), matrix_file=MATRIX))


def test_a_cross_build_installs_the_targets_wheels_from_an_offline_wheelhouse(
        api: docker.APIClient, arm64_stub_build: EntryBuild) -> None:
    """--wheelhouse --offline on a cross build: the context holds the target's wheels only, and the build platform's
    pip installs them for the target, with no index."""
    record = arm64_stub_build.record("base")
    assert record["platform"] == ARM64, record
    info = api.inspect_image(record["tag"])
    assert (info["Os"], info["Architecture"]) == ("linux", "arm64"), info
    container = api.create_container(record["tag"])["Id"]  # read, not run: no emulator needed
    try:
        bits, _ = api.get_archive(container, "/opt/venv/lib/python3.11/site-packages/torch/version.py")
    finally:
        api.remove_container(container)
    with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as archive:
        version_py = archive.extractfile("version.py").read().decode()
    assert "machine = 'aarch64'" in version_py and f"cuda = {arm64_stub_build.spec.cuda!r}" in version_py, version_py


@pytest.fixture(scope="module")
def arm64_cuda_smoke(arm64_cuda_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    return smoke_test(arm64_cuda_build, tmp_path_factory.mktemp("arm64-cuda-smoke"))


def test_each_image_is_an_arm64_image_named_and_labelled_so(api: docker.APIClient, arm64_cuda_build: EntryBuild) -> None:
    for record in arm64_cuda_build.report["images"]:
        assert record["platform"] == ARM64 and record["image"].endswith("-arm64"), record
        info = api.inspect_image(record["tag"])
        assert (info["Os"], info["Architecture"]) == ("linux", "arm64"), info
        assert info["Config"]["Labels"]["io.torchimages.platform"] == ARM64
    assert sorted(r["variant"] for r in arm64_cuda_build.report["images"]) == ["base", "ssh"]


def test_the_arm64_images_pass_their_suite_with_cuda_13_cudnn_and_nccl_read_inside(
        arm64_cuda_build: EntryBuild, arm64_cuda_smoke: tuple) -> None:
    result, report = arm64_cuda_smoke
    assert result.returncode == 0, result.stderr[-4000:]
    checks = {record["variant"]: {c["name"]: c for c in record["stages"]["smoke"]["checks"]}
              for record in report["images"]}
    # What the entry declares, read from the aarch64 libraries by the GPU-ready probe (no GPU here)
    expected = arm64_cuda_build.spec
    assert (expected.cuda, expected.cudnn, expected.nccl) == ("13.0", "9.24.0.43", "2.30.7")
    for name in ("test_versions_read_from_the_libraries", "test_every_cuda_library_loads",
                 "test_arch_list_covers_every_claimed_generation", "test_one_copy_of_each_cuda_library"):
        check = checks["base"][f"test_gpu_ready::{name}"]
        assert (check["outcome"], check["tier"]) == ("passed", "gpu-ready"), check
    assert expected.archs_for(ARM64) == ("8.0", "8.6", "9.0", "10.0", "11.0", "12.0")
    assert checks["base"]["test_versions::test_the_image_runs_as_its_platform"]["outcome"] == "passed"
    assert checks["base"]["test_compute::test_amp_cpu_bf16"]["outcome"] == "passed"
    for name in ("test_torch_compile_cpu", "test_dataloader_with_workers_through_shm"):
        check = checks["base"][f"test_compute::{name}"]
        assert check["outcome"] == "skipped" and "emulation" in check["message"], check
    ssh = {name: c for name, c in checks["ssh"].items() if name.startswith("test_ssh::")}
    torch_over_ssh = "test_ssh::test_key_login_runs_torch_with_the_container_environment"
    assert ssh[f"{torch_over_ssh}[default]"]["outcome"] == "passed", ssh
    # Every other check of every form passed; torch over ssh runs once under emulation (about 30 s an import)
    rest = {name: c["outcome"] for name, c in ssh.items() if not name.startswith(torch_over_ssh)}
    assert len(rest) >= 20 and set(rest.values()) == {"passed"}, rest
