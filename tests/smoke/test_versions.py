"""Versions at run time equal what the matrix entry and the image labels declare."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Facts, probe, run


@pytest.fixture(scope="module")
def seen(host: Any, facts: Facts) -> dict[str, Any]:
    return probe(host, facts, "versions")


def short(version: str | None, parts: int = 2) -> str | None:
    return None if version is None else ".".join(version.split("+")[0].split(".")[:parts])


def test_python(seen: dict, facts: Facts) -> None:
    assert short(seen["python"]) == facts.expected["python"], (
        f"the image runs Python {seen['python']}, the matrix declares {facts.expected['python']}: rebuild the image")


def test_torch(seen: dict, facts: Facts) -> None:
    want = facts.expected["torch"]
    got = seen["torch"] if facts.flavor == "ngc" else seen["torch"].split("+")[0]
    assert got == want, f"the image holds torch {seen['torch']}, the matrix declares {want}: a pip step replaced torch"


def test_labels_match_the_image(seen: dict, facts: Facts) -> None:
    labels, prefix = facts.labels, facts.label_prefix
    problems = []
    torch_version = seen["torch"] if facts.flavor == "ngc" else seen["torch"].split("+")[0]
    for field, value in (("torch", torch_version), ("python", short(seen["python"])), ("cuda", seen["cuda"] or "none")):
        label = labels.get(f"{prefix}.{field}")
        if label != value:
            problems.append(f"label {prefix}.{field}={label!r} but the image has {value!r}")
    for field in ("cudnn", "nccl"):  # labels carry the full pip version (8.9.2.26); torch reports 8.9.2
        label, value = labels.get(f"{prefix}.{field}"), seen[field] or "none"
        if label is None or (label != value and not label.startswith(f"{value}.")):
            problems.append(f"label {prefix}.{field}={label!r} but the image has {value!r}")
    assert not problems, "; ".join(problems) + ": the labels lie about the image; rebuild it from the matrix"


def test_torch_cuda_build(seen: dict, facts: Facts) -> None:
    if facts.flavor == "cpu":
        assert seen["cuda"] is None, f"a cpu image holds a CUDA build of torch ({seen['cuda']}): several GB wasted"
    else:
        assert seen["cuda"] is not None, "a cuda/ngc image holds a CPU build of torch: the index fell back to it"
        assert short(seen["cuda"]) == facts.expected["cuda"], (
            f"torch is built for CUDA {seen['cuda']}, the matrix declares {facts.expected['cuda']}")


def test_cudnn(seen: dict, facts: Facts) -> None:
    if facts.flavor == "cpu":
        pytest.skip("a cpu image has no cuDNN")
    want = short(facts.expected["cudnn"], 3)
    assert seen["cudnn"] == want, f"torch loads cuDNN {seen['cudnn']}, the matrix declares {want}: a second cuDNN?"


def test_nccl(seen: dict, facts: Facts) -> None:
    if facts.flavor == "cpu":
        pytest.skip("a cpu image has no NCCL")
    want = short(facts.expected["nccl"], 3)
    assert seen["nccl"] == want, f"torch reports NCCL {seen['nccl']}, the matrix declares {want}"


def test_pip_check(host: Any) -> None:
    result = run(host, "python -m pip check")
    assert result.rc == 0, f"pip check finds broken requirements:\n{result.stdout}{result.stderr}"


def test_constraint_file_blocks_another_torch(host: Any, facts: Facts) -> None:
    other = "torch==2.0.0" if not facts.expected["torch"].startswith("2.0.0") else "torch==2.1.0"
    blocked = run(host, f"python -m pip install --no-index --dry-run {other}")
    assert blocked.rc != 0 and "constraint" in (blocked.stdout + blocked.stderr), (
        f"pip install {other} was not refused by the constraint file:\n{blocked.stdout}{blocked.stderr}")
    unconstrained = run(host, f"env PIP_CONSTRAINT= python -m pip install --no-index --dry-run {other}")
    assert "constraint" not in (unconstrained.stdout + unconstrained.stderr), "control: without PIP_CONSTRAINT"


def test_the_user_can_add_a_package_to_the_environment(host: Any, facts: Facts) -> None:
    """`pip install` as the image's user (a notebook's `%pip install`) puts the package into the image's environment,
    in every variant: a variant's COPY of its own files once handed the environment's folders to root."""
    seen = probe(host, facts, "userinstall")
    assert seen["returncode"] == 0, f"pip install as the image's user failed:\n{seen['output']}"
    if seen["venv"]:  # an NGC image's system Python sends the user's packages to their user site, as pip does
        assert str(Path(seen["where"]).parent) == seen["environment"], (
            f"the package went to {seen['where']}, not into the environment {seen['environment']}:\n{seen['output']}")


MACHINES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}  # the kernel's name for each platform's machine


def test_the_image_runs_as_its_platform(host: Any, facts: Facts) -> None:
    """An image built for linux/arm64 runs aarch64 binaries (natively, or under the host's emulator) and says so in
    its platform label: an amd64 image tagged as arm64 fails here, before it can stand in an image index."""
    platform = facts.expected.get("platform", "linux/amd64")
    machine = run(host, "uname -m").stdout.strip()
    assert machine == MACHINES[platform], f"the image runs as {machine}, it is built for {platform}"
    label = facts.labels.get(f"{facts.label_prefix}.platform")
    assert label == platform, f"label {facts.label_prefix}.platform={label!r}, the image is built for {platform}"
