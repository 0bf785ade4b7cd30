"""A linux/arm64 CUDA image built and tested on this x86_64 machine, under emulation (scripts/setup-emulation.sh):
the CUDA 13.0 entry (torch 2.14.0 cu130, whose aarch64 wheels are the CUDA build) for both platforms, its arm64 base
and ssh variant built by BuildKit, as the release workflow builds. torch's aarch64 wheels are installed by the build
platform's pip (TORCH_INSTALL=cross): every wheel is the real aarch64 one, no emulator unpacks them. The suite then runs
in the arm64 containers: versions, hygiene, the GPU-ready tier (CUDA, cuDNN and NCCL read from the aarch64 libraries,
every CUDA library loads, the aarch64 wheel's kernels cover what the compat data claims for arm64, one copy of each)
and the ssh service as users start it."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from tests.session.wheelhouses import Wheelhouse
from torchimages.input import matrix, specs

from ..conftest import (
    DATA,
    ROOT,
    EntryBuild,
    build_entry,
    removed_at_the_end,
    script,
    smoke_test,
)

pytestmark = [pytest.mark.lane("side"), pytest.mark.heavy]

MATRIX = DATA / "cu130-py311-platforms.matrix.yaml"
ARM64 = "linux/arm64"


def arm64_wheelhouse() -> Wheelhouse:
    """The aarch64 wheels of torch and the rest of the entry, for Debian's Python."""
    spec = specs.resolve(matrix.load(MATRIX)).specs[0]
    return Wheelhouse(ROOT / ".cache" / f"wheelhouse-{spec.torch_variant}-aarch64",
                      (f"torch=={spec.torch}", *spec.domain_pins, "numpy"), machine="aarch64")


WHEELHOUSES = (arm64_wheelhouse,)  # under CI removed once built from (removed_at_the_end, tests/session/wheelhouses.py)


@pytest.fixture(scope="module")
def arm64_cuda_build(api: docker.APIClient, base_image: str, arm64_base_image: str,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    spec = specs.resolve(matrix.load(MATRIX)).specs[0]
    wheels = arm64_wheelhouse().make()
    bases = {}
    for platform, os_base in (("linux/amd64", base_image), (ARM64, arm64_base_image)):
        bases[platform] = f"torchimages/cuda:{spec.cuda_image}-base-debian12{'-arm64' if platform == ARM64 else ''}"
        script("make-cuda-base-image.sh", str(spec.cuda_image), bases[platform], os_base)
    # The amd64 base is the cross-installer's: the build platform's pip installs the aarch64 wheels
    yield from removed_at_the_end(api, lambda: build_entry(
        spec, tmp_path_factory.mktemp("arm64-cuda"), "--platform", ARM64, "--base-image", bases["linux/amd64"],
        "--base-image", f"{ARM64}={bases[ARM64]}", "--wheelhouse", str(wheels), "--offline", "--builder", "buildkit",
        matrix_file=MATRIX), wheels)


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
