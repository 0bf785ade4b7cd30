"""GPU readiness, proven without a GPU: the CUDA libraries the image carries, read and loaded as a GPU
would use them. These checks run on every machine; the GPU tier (test_gpu.py) needs a GPU."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import GPU_READY, Facts, probe, tier
from .probes.gpucheck import declared_archs, extra_copies, uncovered


@pytest.fixture(autouse=True)
def _tier(request: pytest.FixtureRequest) -> None:
    tier(request, GPU_READY)


@pytest.fixture(scope="module")
def ready(host: Any, facts: Facts) -> dict[str, Any]:
    return probe(host, facts, "gpu_ready", timeout=180)


@pytest.fixture
def cuda_image(facts: Facts) -> None:
    if facts.flavor == "cpu":
        pytest.skip("a cpu image carries no CUDA libraries (test_cpu_image_has_no_cuda_libraries checks that)")


def short(version: str | None, parts: int) -> str | None:
    return None if version is None else ".".join(version.split("+")[0].split(".")[:parts])


def test_cpu_image_has_no_cuda_libraries(ready: dict, facts: Facts) -> None:
    if facts.flavor != "cpu":
        pytest.skip("a cuda/ngc image carries CUDA libraries")
    assert not ready["libraries"], f"a cpu image carries CUDA libraries: {sorted(ready['libraries'])}"


def test_versions_read_from_the_libraries(ready: dict, facts: Facts, cuda_image: None) -> None:
    seen, want = ready["versions"], facts.expected
    problems = [f"{name} {seen.get(name)} (read from {ready['torch_loads'].get(library, 'no library')}), "
                f"the entry declares {short(want[name], parts)}"
                for name, library, parts in (("cuda", "libcudart", 2), ("cudnn", "libcudnn", 3), ("nccl", "libnccl", 3))
                if seen.get(name) != short(want[name], parts)]
    assert not problems, "; ".join(problems)


def test_every_cuda_library_loads(ready: dict, cuda_image: None) -> None:
    count = sum(len(paths) for paths in ready["libraries"].values())
    assert count >= 5, f"only {count} CUDA libraries found: {sorted(ready['libraries'])}"
    assert not ready["load_errors"], "CUDA libraries that do not load:\n" + "\n".join(
        f"  {path}: {error}" for path, error in ready["load_errors"].items())


def test_torch_loads_the_libraries_it_bundles(ready: dict, cuda_image: None) -> None:
    missing = {"libcudart", "libcudnn", "libcublas"} - set(ready["torch_loads"])
    assert not missing, f"import torch did not load {sorted(missing)}; it loaded {ready['torch_loads']}"


def test_arch_list_covers_every_claimed_generation(ready: dict, facts: Facts, cuda_image: None) -> None:
    claimed = facts.expected.get("archs") or []
    if not claimed:
        pytest.skip("the compat data records no GPU generations for this entry")
    missing = uncovered(ready["arch_flags"], claimed)  # the cubin/PTX rule: probes/gpucheck.py, unit-tested
    assert not missing, (f"torch was compiled for {ready['arch_flags']}: no kernels for the claimed compute "
                         f"capabilities {missing}")


def test_arch_list_covers_what_the_image_declares(ready: dict, facts: Facts, cuda_image: None) -> None:
    """TORCH_CUDA_ARCH_LIST in the image is its claim of GPU generations: NGC's bases set it (their documented
    environment), as a devel image does for the extensions it builds. torch must have kernels for each."""
    declared = ready.get("declared_archs")
    if not declared:
        if facts.flavor == "ngc":
            pytest.fail("an NGC base declares its GPU generations in TORCH_CUDA_ARCH_LIST; this image sets none")
        pytest.skip("the image declares no TORCH_CUDA_ARCH_LIST")
    missing = uncovered(ready["arch_flags"], declared_archs(declared))
    assert not missing, (f"the image declares TORCH_CUDA_ARCH_LIST={declared!r}, but torch was compiled for "
                         f"{ready['arch_flags']}: no kernels for {missing}")


def test_the_gpu_generations_the_image_publishes_are_torchs(host: Any, ready: dict, facts: Facts, cuda_image: None) -> None:
    """image.json's gpu_archs, and the cuda-archs label beside it, are what image-doctor and `build.py fit` decide with
    (gpurules.py): the entry's claim for this platform, every generation reached by torch's kernels, and '+PTX'
    exactly where torch carries PTX."""
    published = json.loads(host.file("/etc/torchimages/image.json").content_string).get("gpu_archs", {})
    mine = published.get(facts.expected["platform"], "")
    assert mine == facts.expected["gpu_archs"], f"image.json says {published}, the entry {facts.expected['gpu_archs']!r}"
    label = facts.labels.get(f"{facts.label_prefix}.cuda-archs")
    assert label == (mine or "none"), f"label {facts.label_prefix}.cuda-archs={label!r}, image.json {mine!r}"
    if not mine:
        pytest.skip("the compat data records no GPU generations for this entry")
    missing = uncovered(ready["arch_flags"], declared_archs(mine))
    assert not missing, f"image.json claims {mine!r}; torch was compiled for {ready['arch_flags']}: nothing reaches {missing}"
    claimed_ptx = sorted("compute_" + word[:-4].replace(".", "") for word in mine.split() if word.endswith("+PTX"))
    torch_ptx = sorted(flag for flag in ready["arch_flags"] if flag.startswith("compute_"))
    assert claimed_ptx == torch_ptx, f"image.json claims PTX {claimed_ptx}, torch carries {torch_ptx} ({mine!r})"


def test_one_copy_of_each_cuda_library(ready: dict, cuda_image: None) -> None:
    twice = extra_copies(ready["libraries"])  # the expected copies (base image's cudart, triton's cupti): gpucheck.py
    assert not twice, "CUDA libraries present more than once (a second CUDA stack in the image?):\n" + "\n".join(
        f"  {name}: {paths}" for name, paths in twice.items())
