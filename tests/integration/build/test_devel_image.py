"""The devel variant, built and tested as a user's CI would: the CUDA 13.0 line (torch 2.14.0 cu130 for Python 3.11,
which the Debian stand-in base carries) from PyPI's wheels on a local CUDA 13.0 base, by BuildKit, with nvcc, cicc and
the CUDA headers from cuda-toolkit[nvcc,cccl] at the version torch's wheel pins. Only the devel image's suite runs: it
holds the GPU-ready tier (CUDA 13.0, cuDNN 9.24.0 and NCCL 2.30.7 read from the x86_64 libraries, one copy of each
with the compiler added) and the devel checks (nvcc's CUDA, a CUDA extension built by torch.utils.cpp_extension for
every generation of TORCH_CUDA_ARCH_LIST, read from its fat binary, and imported). No GPU here: the kernel's run skips."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from torchimages.build.budget import VARIANT_BUDGETS
from torchimages.input import matrix, specs
from torchimages.input.grammar import DEFAULT_PLATFORM
from torchimages.verify.smoke import NO_GPU

from ..conftest import DATA, EntryBuild, build_entry, from_pypi, removed_at_the_end, run_in, script, smoke_test

pytestmark = [pytest.mark.lane("side"), pytest.mark.heavy]

DEVEL_MATRIX = DATA / "cu130-py311-devel.matrix.yaml"


@pytest.fixture(scope="module")
def devel_build(api: docker.APIClient, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    spec = specs.resolve(matrix.load(DEVEL_MATRIX)).specs[0]
    base = f"torchimages/cuda:{spec.cuda_image}-base-debian12"
    script("make-cuda-base-image.sh", str(spec.cuda_image), base, base_image)
    yield from removed_at_the_end(api, lambda: build_entry(
        spec, tmp_path_factory.mktemp("devel-build"), "--base-image", base, *from_pypi(), "--builder", "buildkit",
        matrix_file=DEVEL_MATRIX))


@pytest.fixture(scope="module")
def devel_checks(devel_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    result, report = smoke_test(devel_build, tmp_path_factory.mktemp("devel-smoke"),
                                only=devel_build.spec.image_name("devel"))
    assert result.returncode == 0, f"the devel suite failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    smoke = next(r for r in report["images"] if r["variant"] == "devel")["stages"]["smoke"]
    return {check["name"]: check for check in smoke["checks"]}


def test_the_devel_image_compiles_an_extension_for_torchs_gpus_without_a_gpu(devel_checks: dict[str, dict]) -> None:
    for name in ("test_nvcc_is_the_cuda_torch_was_built_with", "test_extension_builds_are_set_up",
                 "test_an_extension_builds_for_every_arch_of_the_list_and_imports"):
        check = devel_checks[f"test_devel::{name}"]
        assert (check["outcome"], check["tier"]) == ("passed", "gpu-ready"), check
    kernel = devel_checks["test_devel::test_the_extension_kernel_runs_on_the_gpu"]
    assert (kernel["outcome"], kernel["tier"]) == ("skipped", "needs-gpu") and NO_GPU in kernel["message"], kernel
    failed = [name for name, check in devel_checks.items() if check["outcome"] == "failed"]
    assert not failed, failed


def test_the_cuda_13_line_reads_its_versions_and_keeps_one_copy_with_the_compiler(devel_build: EntryBuild,
                                                                                  devel_checks: dict[str, dict]) -> None:
    spec = devel_build.spec
    assert (spec.cuda, spec.cudnn, spec.nccl) == ("13.0", "9.24.0.43", "2.30.7")
    for name in ("test_versions_read_from_the_libraries", "test_every_cuda_library_loads",
                 "test_one_copy_of_each_cuda_library", "test_arch_list_covers_every_claimed_generation"):
        assert devel_checks[f"test_gpu_ready::{name}"]["outcome"] == "passed", devel_checks[f"test_gpu_ready::{name}"]


def test_devel_adds_the_compiler_within_its_budget_pinned_and_labelled(api: docker.APIClient,
                                                                      devel_build: EntryBuild) -> None:
    record = devel_build.record("devel")
    assert 100_000_000 < record["adds_bytes"] < VARIANT_BUDGETS["devel"], record["adds_bytes"]
    config = api.inspect_image(devel_build.tags["devel"])["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["CUDA_HOME"] == devel_build.spec.devel_cuda_home and env["PATH"].startswith(f"{env['CUDA_HOME']}/bin:")
    assert env["TORCH_CUDA_ARCH_LIST"] == devel_build.spec.cuda_arch_list(DEFAULT_PLATFORM) == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert config["Labels"]["io.torchimages.variant"] == "devel" and config["User"] == "1000:1000"
    _, constraints = run_in(api, devel_build.tags["devel"], ["cat", "/etc/pip/torchimages-constraints.txt"])
    pins = dict(line.split("==") for line in constraints.split())
    assert pins["nvidia-cuda-nvcc"] == "13.0.88" and pins["cuda-toolkit"] == "13.0.3.0" and pins["torch"] == "2.14.0", pins
    assert Path(env["CUDA_HOME"]).name == "cu13"
