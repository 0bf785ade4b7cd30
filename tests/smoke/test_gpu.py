"""GPU visibility, cuDNN and NCCL: these need a GPU given to the container."""

from __future__ import annotations

from typing import Any

from .conftest import Facts, probe, run


def test_nvidia_smi_lists_the_gpus(host: Any, gpu: int) -> None:
    result = run(host, "nvidia-smi -L", timeout=60)
    assert result.rc == 0, f"nvidia-smi failed: {result.stderr}: start the container with --gpus all"
    assert len([line for line in result.stdout.splitlines() if line.startswith("GPU ")]) == gpu


def test_torch_sees_every_gpu_and_runs_a_kernel(host: Any, facts: Facts, gpu: int) -> None:
    result = probe(host, facts, "gpu")
    assert result["available"], "torch.cuda.is_available() is False: a driver too old for this image's CUDA?"
    assert result["count"] == gpu, f"torch sees {result['count']} GPUs, the container was given {gpu}"
    assert result["kernel_sum"] == result["expected_sum"], "a kernel on the GPU computed a wrong sum"


def test_arch_list_covers_the_gpu(host: Any, facts: Facts, gpu: int) -> None:
    result = probe(host, facts, "gpu")
    major, minor = result["capability"].split(".")
    wanted = f"sm_{major}{minor}"
    covered = wanted in result["arch_list"] or any(
        a.startswith("compute_") and int(a.split("_")[1]) <= int(major + minor) for a in result["arch_list"])
    assert covered, f"this torch build has kernels for {result['arch_list']}, not for the GPU ({wanted}, {result['name']})"


def test_cudnn_conv_forward_backward(host: Any, facts: Facts, gpu: int) -> None:
    result = probe(host, facts, "cudnn", timeout=300)
    assert result["enabled"] and result["version"], "cuDNN is not enabled in torch"
    assert result["finite_benchmark_False"] and result["finite_benchmark_True"], f"non-finite conv results: {result}"
    assert result["deterministic_bitwise"], "two deterministic runs differ"
    assert result["max_abs_diff_vs_cpu"] < 1e-3, f"GPU and CPU differ by {result['max_abs_diff_vs_cpu']}"


def test_nccl_all_reduce(host: Any, facts: Facts, gpu: int) -> None:
    python = facts.raw.get("python", "python")
    result = run(host, f"{python} -m torch.distributed.run --standalone --nproc_per_node={gpu} {facts.probes}/nccl.py",
                 timeout=180)
    assert result.rc == 0, f"NCCL all_reduce failed (rerun with NCCL_DEBUG=INFO):\n{result.stdout}\n{result.stderr[-3000:]}"
    line = [x for x in result.stdout.splitlines() if x.startswith("{")][-1]
    assert '"all_equal": true' in line, f"all_reduce gave a wrong sum: {line}"
