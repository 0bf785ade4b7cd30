"""torch.compile, mixed precision and the DataLoader (CPU parts run everywhere, GPU parts need a GPU)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Facts, probe


def test_dataloader_with_workers_through_shm(host: Any, facts: Facts) -> None:
    if facts.emulated:
        # /dev/shm's size is the engine's run setting, the same for every platform (each image of the engine's own
        # platform checks it); under emulation each worker process imports torch again (39 s measured here).
        pytest.skip("the image runs under emulation: /dev/shm is the engine's, checked in the engine's platform's images")
    result = probe(host, facts, "dataloader", timeout=180)
    assert not result["error"], (f"the DataLoader's workers failed ({result['error']}): /dev/shm is too small; start "
                                 "the container with a larger --shm-size (16g)")
    assert result["bytes"] > 64 * 2**20 and result["checksum"] == result["expected_checksum"], (
        f"the DataLoader moved {result['bytes']} bytes with checksum {result['checksum']}: "
        "start the container with a larger --shm-size (16g)")


def test_torch_compile_cpu(host: Any, facts: Facts) -> None:
    if facts.emulated:
        # Measured here: under qemu-aarch64 (whose CPU model has SVE) inductor emits SVE code, and Debian bookworm's
        # gcc 12 stops on it with an internal compiler error (aarch64_sve::gimple_folder, cf. pytorch/pytorch#168288);
        # and a C++ compile under emulation takes minutes. A runner of the platform runs this check natively.
        pytest.skip("the image runs under emulation: torch.compile's C++ build is checked on a runner of its platform")
    result = probe(host, facts, "compile", "cpu", timeout=300)
    assert not result["preflight"], f"torch.compile cannot work here: {'; '.join(result['preflight'])}"
    assert result["max_abs_diff"] < 1e-4, f"torch.compile output differs from eager by {result['max_abs_diff']}"


def test_amp_cpu_bf16(host: Any, facts: Facts) -> None:
    result = probe(host, facts, "amp", "cpu-bf16")
    assert result["finite"] and result["last"] < result["first"], f"CPU bf16 autocast training did not learn: {result}"


def test_torch_compile_gpu(host: Any, facts: Facts, gpu: int) -> None:
    result = probe(host, facts, "compile", "cuda", timeout=300)
    assert not result["preflight"], f"torch.compile cannot work here: {'; '.join(result['preflight'])}"
    assert result["max_abs_diff"] < 1e-3, f"torch.compile on the GPU differs from eager by {result['max_abs_diff']}"


def test_amp_fp16_gradscaler(host: Any, facts: Facts, gpu: int) -> None:
    result = probe(host, facts, "amp", "cuda-fp16")
    assert result["finite"] and result["last"] < result["first"], f"fp16 AMP training did not learn: {result}"


def test_amp_bf16(host: Any, facts: Facts, gpu: int) -> None:
    capability = probe(host, facts, "gpu")["capability"]
    if tuple(map(int, capability.split("."))) < (8, 0):
        pytest.skip(f"bf16 needs compute capability 8.0 or more; this GPU is {capability}")
    result = probe(host, facts, "amp", "cuda-bf16")
    assert result["finite"] and result["last"] < result["first"], f"bf16 AMP training did not learn: {result}"
