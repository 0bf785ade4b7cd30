"""image-doctor and the benchmark, in the CPU images built by this session."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import docker
import pytest

from ..conftest import RELEASE, EntryBuild, build_py

pytestmark = [pytest.mark.lane("main")]

NO_GPU = "no GPU is visible: start the container with --gpus all"
SMALL_SHM = "/dev/shm is 64 MB: add --shm-size 16g"
CPU_TORCH_IN_A_CUDA_IMAGE = ("the torch loaded is a CPU build, not this image's CUDA 12.1 build; reinstall the image's "
                             "version or start a fresh container")


def run(api: docker.APIClient, tag: str, command: list[str] | None, *, shm: str | None = None,
        environment: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`docker run` (with the image's entrypoint) and return exit code, stdout, stderr."""
    host_config = api.create_host_config(shm_size=shm) if shm else api.create_host_config()
    container = api.create_container(tag, command=command, environment=environment, host_config=host_config)
    try:
        api.start(container)
        code = api.wait(container, timeout=180)["StatusCode"]
        out = api.logs(container, stdout=True, stderr=False).decode()
        err = api.logs(container, stdout=False, stderr=True).decode()
    finally:
        api.remove_container(container, force=True)
    return code, out, err


def test_doctor_reports_a_healthy_cpu_container(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    code, out, err = run(api, cpu_build.tags["base"], ["image-doctor"], shm="2g")
    assert code == 0, out + err
    assert "flavor: cpu" in out and f"torch: {cpu_build.spec.torch}" in out and "problems: none" in out
    assert "/dev/shm: 2048 MB" in out and "cudnn.benchmark: False" in out


def test_doctor_names_a_small_shm_with_its_fix(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    code, out, _ = run(api, cpu_build.tags["base"], ["image-doctor", "--json"])
    assert code == 1
    assert json.loads(out)["problems"] == [SMALL_SHM]


def test_entrypoint_warns_once_and_can_be_silenced(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    _, _, err = run(api, cpu_build.tags["jupyter"], ["true"])
    assert err.count(SMALL_SHM) == 1 and err.startswith("warning: ")
    _, _, quiet = run(api, cpu_build.tags["jupyter"], ["true"], environment={"TORCHIMAGES_NO_DOCTOR": "1"})
    assert SMALL_SHM not in quiet
    _, _, big = run(api, cpu_build.tags["base"], ["true"], shm="2g")
    assert "warning" not in big


def test_doctor_says_no_gpu_visible_for_a_cuda_image(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    """A CUDA image's declared facts on this GPU-less engine: the doctor must say so, with its advice; and that the
    torch it loads (the CPU image's own) is not the CUDA build the image declares."""
    declared = {"name": "as-cuda", "flavor": "cuda", "torch": cpu_build.spec.torch, "cuda": "12.1", "cudnn": "8.9.2.26",
                "nccl": "2.20.5", "python": "3.11", "min_driver": "530.30.02", "min_driver_minor_compat": "525"}
    dockerfile = (f"FROM {cpu_build.tags['base']}\nUSER 0:0\n"
                  f"RUN echo '{json.dumps(declared)}' > /etc/torchimages/image.json\nUSER 1000:1000\n")
    stream = api.build(fileobj=io.BytesIO(dockerfile.encode()), tag="torchimages-test:as-cuda", rm=True, decode=True)
    assert not [chunk for chunk in stream if "error" in chunk]
    code, out, _ = run(api, "torchimages-test:as-cuda", ["image-doctor", "--json"], shm="2g")
    assert code == 1 and json.loads(out)["problems"] == [NO_GPU, CPU_TORCH_IN_A_CUDA_IMAGE]
    _, _, err = run(api, "torchimages-test:as-cuda", ["true"], shm="2g")
    assert f"warning: {NO_GPU} (image-doctor" in err


def test_bench_runs_the_cpu_part_and_reports(cpu_build: EntryBuild, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    shutil.copyfile(cpu_build.report_path, report)
    result = build_py("bench", "--tag", RELEASE, "--only", cpu_build.tags["base"].rsplit(f"{RELEASE}-", 1)[1],
                      "--seconds", "1", "--report", str(report), timeout=600)
    assert result.returncode == 0, result.stderr
    assert "CPU autocast bf16" in result.stdout and "speedup" in result.stdout
    bench = next(r for r in json.loads(report.read_text())["images"] if r["variant"] == "base")["stages"]["bench"]
    [row] = bench["rows"]
    assert row["a"] == "fp32" and row["a_per_s"] > 0 and row["b_per_s"] > 0 and bench["device"] == "cpu"


def test_amp_gate_needs_a_gpu_measurement(cpu_build: EntryBuild, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    shutil.copyfile(cpu_build.report_path, report)
    result = build_py("bench", "--tag", RELEASE, "--only", cpu_build.tags["base"].rsplit(f"{RELEASE}-", 1)[1],
                      "--seconds", "0.5", "--min-amp-speedup", "1.5", "--report", str(report), timeout=600)
    assert result.returncode == 1
    assert "gate failed" in result.stderr and "no GPU AMP measurement on cpu" in result.stderr
