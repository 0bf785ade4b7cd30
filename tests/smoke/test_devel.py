"""The devel variant: nvcc of the CUDA torch was built with, and a CUDA extension built with the image's own settings
for every GPU generation of TORCH_CUDA_ARCH_LIST (read from the built object's fat binary) that imports. All of it is
proven without a GPU; with one, the extension's kernel runs and its result is checked."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import GPU_READY, Facts, probe, run, tier
from .probes.gpucheck import arch_list_code, declared_archs


@pytest.fixture
def ready_tier(request: pytest.FixtureRequest) -> None:
    tier(request, GPU_READY)


@pytest.fixture(scope="module")
def environment(host: Any) -> dict[str, str]:
    """The variables a user's shell in the image has (docker run IMAGE env)."""
    listed = run(host, "env").stdout
    return dict(line.split("=", 1) for line in listed.splitlines() if "=" in line)


@pytest.fixture(scope="module")
def extension(host: Any, facts: Facts) -> dict[str, Any]:
    if facts.emulated:
        pytest.skip("the image runs under emulation, where nvcc takes minutes a kernel: the extension build is checked "
                    "on a runner of its platform")
    return probe(host, facts, "extension", timeout=900)


def test_nvcc_is_the_cuda_torch_was_built_with(host: Any, facts: Facts, ready_tier: None) -> None:
    result = run(host, "nvcc --version", timeout=facts.seconds(60))  # on PATH, as users type it
    assert result.rc == 0, f"nvcc does not run: {result.stdout}{result.stderr}"
    assert f"release {facts.expected['cuda']}," in result.stdout, (
        f"nvcc is not CUDA {facts.expected['cuda']}, the CUDA torch was built with:\n{result.stdout}")


def test_extension_builds_are_set_up(host: Any, facts: Facts, environment: dict[str, str], ready_tier: None) -> None:
    home = environment.get("CUDA_HOME", "")
    assert home and host.file(f"{home}/bin/nvcc").exists, f"CUDA_HOME ({home or 'unset'}) holds no bin/nvcc"
    assert host.file(f"{home}/include/cuda_runtime.h").exists, f"no CUDA headers under {home}/include"
    assert run(host, "ninja --version").rc == 0, "no ninja: torch.utils.cpp_extension falls back to slow builds"
    value = environment.get("TORCH_CUDA_ARCH_LIST", "")
    assert value.upper().endswith("+PTX"), f"TORCH_CUDA_ARCH_LIST={value!r}: the newest generation needs +PTX"
    claimed = facts.expected.get("archs") or []
    if claimed:  # what torch's wheel was built for on this platform (an NGC base sets its own list)
        assert declared_archs(value) == claimed, f"TORCH_CUDA_ARCH_LIST={value!r}, torch's wheel: {claimed}"


def test_an_extension_builds_for_every_arch_of_the_list_and_imports(extension: dict[str, Any], ready_tier: None) -> None:
    wanted = arch_list_code(extension["arch_list"])
    assert wanted, f"TORCH_CUDA_ARCH_LIST={extension['arch_list']!r} names no GPU generation"
    built = sorted(tuple(code) for code in extension["archs"])
    assert built == wanted, f"the extension carries {built}; TORCH_CUDA_ARCH_LIST asks {wanted}"
    assert extension["imported"] == "torchimages_add_one"


def test_the_extension_kernel_runs_on_the_gpu(host: Any, facts: Facts, gpu: int, extension: dict[str, Any]) -> None:
    result = probe(host, facts, "extension", "run", timeout=300)
    assert result["max_error"] == 0.0, f"the kernel's result is off by {result['max_error']}"
