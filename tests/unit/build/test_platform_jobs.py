"""The build runner's decisions for an entry of two platforms, where they are made (torchimages.build.jobs), driven
through the fake engine and a builder that records what it is asked: each platform's base FROM its own --base-image,
the build's platform and its label, a torch install for another platform than the engine's left to the build
platform's pip where the builder can do that, a FROM image of another platform refused before any build, and the
platform among the content digest's inputs. The real builds are in tests/integration/build/test_arm64_cuda_image.py."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from torchimages.build import render
from torchimages.build.inputs import BuildInputs, runs_on
from torchimages.build.jobs import GPU_ARCHS_LABEL, PLATFORM_LABEL, BuildRunner, Selection, plan_jobs, platform_args
from torchimages.engine import BuildOutcome
from torchimages.events import StageEvent

from ..conftest import digest, plan_of
from ..fake_engine import FakeEngine

ENTRY = """
registry: registry.example.com/ml/pytorch
images:
  - {flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.11", variants: [ssh], platforms: [linux/amd64, linux/arm64]}
"""
NAME = "torch2.14.0-cu130-cudnn9.24-py3.11"
AMD64_BASE, ARM64_BASE = "local/cuda:13-amd64", "local/cuda:13-arm64"


@dataclass
class RecordingBuilder:
    """A builder that records each build it is asked for and answers it built."""

    cross_installs: bool = True
    asked: list[dict] = field(default_factory=list)
    dockerfile: str = "Dockerfile"

    def build(self, image: str, context: Path, tag: str, *, buildargs: dict[str, str], emit: object,
              cancel: threading.Event, cache_from: list[str] | None = None, labels: dict[str, str] | None = None,
              platform: str | None = None) -> BuildOutcome:
        self.asked.append({"image": image, "buildargs": buildargs, "labels": labels or {}, "platform": platform})
        return BuildOutcome(image, tag, image_id=digest(image))

    def stop_builds(self) -> None: ...

    def describe(self) -> str:
        return "recording"


def image(arch: str) -> dict:
    return {"Id": digest(arch), "Os": "linux", "Architecture": arch, "Config": {}}


def run(tmp_path: Path, inputs: BuildInputs, *, builder: RecordingBuilder | None = None,
        images: dict | None = None) -> tuple[dict[str, BuildOutcome], RecordingBuilder]:
    plan = plan_of(ENTRY)
    render.write(plan, "v1", tmp_path / "images")
    jobs = plan_jobs(plan, "v1", tmp_path / "images", Selection(), base_for=inputs.base_for)
    builder = builder or RecordingBuilder()
    events: list[StageEvent] = []
    engine = FakeEngine(images={AMD64_BASE: image("amd64"), ARM64_BASE: image("arm64"), **(images or {})}).engine
    outcomes = BuildRunner(engine, inputs, events.append, builder=builder).run(jobs)
    return outcomes, builder


def test_each_platform_builds_from_its_own_base_for_its_platform_and_says_so(tmp_path: Path) -> None:
    outcomes, builder = run(tmp_path, BuildInputs(base_image=AMD64_BASE, platform_bases=(("linux/arm64", ARM64_BASE),)))
    assert all(outcome.ok for outcome in outcomes.values()), outcomes
    asked = {a["image"]: a for a in builder.asked}
    assert list(asked) == [f"{NAME}-amd64", f"{NAME}-ssh-amd64", f"{NAME}-arm64", f"{NAME}-ssh-arm64"]
    for arch in ("amd64", "arm64"):
        base, ssh = asked[f"{NAME}-{arch}"], asked[f"{NAME}-ssh-{arch}"]
        assert base["platform"] == ssh["platform"] == f"linux/{arch}"
        assert base["labels"][PLATFORM_LABEL] == ssh["labels"][PLATFORM_LABEL] == f"linux/{arch}"
        # each platform's GPU generations, as the compat data records them for its wheel (aarch64: no 7.5, adds 11.0)
        assert base["labels"][GPU_ARCHS_LABEL] == ssh["labels"][GPU_ARCHS_LABEL] == {
            "amd64": "7.5 8.0 8.6 9.0 10.0 12.0", "arm64": "8.0 8.6 9.0 10.0 11.0 12.0"}[arch]
        assert base["buildargs"]["BASE_IMAGE"] == {"amd64": AMD64_BASE, "arm64": ARM64_BASE}[arch]
        assert ssh["buildargs"]["BASE_IMAGE"] == f"registry.example.com/ml/pytorch:v1-{NAME}-{arch}"
    # The engine is amd64: the arm64 base's torch is installed by the build platform's pip, FROM the amd64 base
    assert "TORCH_INSTALL" not in asked[f"{NAME}-amd64"]["buildargs"]
    assert {k: asked[f"{NAME}-arm64"]["buildargs"][k] for k in ("TORCH_INSTALL", "BUILD_BASE_IMAGE")} == {
        "TORCH_INSTALL": "cross", "BUILD_BASE_IMAGE": AMD64_BASE}
    assert "TORCH_INSTALL" not in asked[f"{NAME}-ssh-arm64"]["buildargs"], "a variant installs no torch"
    # The same Dockerfile and inputs for both platforms are two builds: the platform is in the content digest
    assert outcomes[f"{NAME}-amd64"].content_digest != outcomes[f"{NAME}-arm64"].content_digest


def test_a_builder_without_a_build_platform_stage_runs_the_install_under_emulation(tmp_path: Path) -> None:
    _, builder = run(tmp_path, BuildInputs(base_image=AMD64_BASE, platform_bases=(("linux/arm64", ARM64_BASE),)),
                     builder=RecordingBuilder(cross_installs=False))
    assert not any("TORCH_INSTALL" in a["buildargs"] for a in builder.asked)


def test_a_base_of_another_platform_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    outcomes, builder = run(tmp_path, BuildInputs(base_image=AMD64_BASE))  # no arm64 base given: amd64's for both
    failed = outcomes[f"{NAME}-arm64"]
    assert not failed.ok and failed.error == (
        f"{AMD64_BASE} is a linux/amd64 image on this engine; {NAME}-arm64 is built for linux/arm64: give it "
        "--base-image linux/arm64=IMAGE")
    assert outcomes[f"{NAME}-ssh-arm64"].skipped, "its variant is not built either"
    assert [a["image"] for a in builder.asked] == [f"{NAME}-amd64", f"{NAME}-ssh-amd64"]


@pytest.mark.parametrize(("wheel", "machine", "runs"), [
    ("torch-2.14.0-cp311-cp311-manylinux_2_28_aarch64.whl", "aarch64", True),
    ("torch-2.14.0-cp311-cp311-manylinux_2_28_aarch64.whl", "x86_64", False),
    ("nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_aarch64.manylinux2014_aarch64.whl", "aarch64", True),
    ("numpy-2.3.5-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "aarch64", False),
    ("jinja2-3.1.6-py3-none-any.whl", "aarch64", True),
    ("torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "x86_64", True),
])
def test_each_context_gets_the_wheels_that_run_on_its_platform(wheel: str, machine: str, runs: bool) -> None:
    assert runs_on(wheel, machine) is runs


def test_the_arm64_image_is_checked_against_the_gpu_generations_of_the_aarch64_wheel() -> None:
    spec = plan_of(ENTRY).specs[0]
    assert spec.archs_for("linux/amd64") == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    assert spec.archs_for("linux/arm64") == ("8.0", "8.6", "9.0", "10.0", "11.0", "12.0")


def test_the_platform_is_an_input_of_the_content_digest_whatever_the_base(tmp_path: Path) -> None:
    """Both platforms' bases known here by one ID (as a multi-platform name is one name): the same Dockerfile and inputs
    are still two builds, so `--cache-from previous` never reuses one platform's image for the other."""
    one = {"Id": digest("one base"), "Os": "linux", "Config": {}}
    outcomes, builder = run(tmp_path, BuildInputs(base_image=AMD64_BASE, platform_bases=(("linux/arm64", ARM64_BASE),)),
                            images={AMD64_BASE: {**one, "Architecture": "amd64"},
                                    ARM64_BASE: {**one, "Architecture": "arm64"}},
                            builder=RecordingBuilder(cross_installs=False))  # the same build arguments for both
    asked = {a["image"]: a["buildargs"] for a in builder.asked}
    assert {k: v for k, v in asked[f"{NAME}-amd64"].items() if k != "BASE_IMAGE"} == \
           {k: v for k, v in asked[f"{NAME}-arm64"].items() if k != "BASE_IMAGE"}
    amd64, arm64 = outcomes[f"{NAME}-amd64"].content_digest, outcomes[f"{NAME}-arm64"].content_digest
    assert amd64 and arm64 and amd64 != arm64


def test_an_arm64_image_whose_wheel_has_no_measured_kernels_is_claimed_none_never_x86_64s() -> None:
    """torch 2.13.0's cu130 build has an aarch64 wheel, but the data records no kernels of it: the suite checks the
    arm64 image against no claim rather than the x86_64 wheel's (7.5 is not in the aarch64 wheels)."""
    spec = plan_of(ENTRY.replace('torch: "2.14.0"', 'torch: "2.13.0"')).specs[0]
    assert spec.archs_for("linux/amd64") == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    assert spec.archs_for("linux/arm64") == ()


def test_a_devel_build_gets_the_compiler_wheels_of_its_platform_and_no_other_cuda_wheel(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    names = ["torch-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl", "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
             "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
             "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
             "cuda_toolkit-13.0.3.0-py2.py3-none-any.whl", "ninja-1.13.2-py3-none-manylinux2014_x86_64.whl"]
    for name in names:
        (wheels / name).write_text(name)
    inputs = BuildInputs(wheelhouse=wheels)
    for stack, expected in (((), {names[5]}), (("cuda-toolkit", "nvidia-cuda-nvcc"), {names[2], names[4], names[5]})):
        context = tmp_path / f"context-{len(stack)}"
        (context / "build-config" / "wheelhouse").mkdir(parents=True)
        inputs.fill_context(context, installs_torch=False, stack_wheels=stack)
        assert {p.name for p in (context / "build-config" / "wheelhouse").iterdir()} == expected


def test_a_devel_image_of_another_platform_is_told_its_arch_list() -> None:
    plan = plan_of(ENTRY.replace("variants: [ssh]", "variants: [ssh, devel]"))
    jobs = {(job.variant, job.platform): job for job in plan_jobs(plan, "v1", Path("images"))}
    assert platform_args(jobs[("devel", "linux/arm64")]) == {"TORCH_CUDA_ARCH_LIST": "8.0;8.6;9.0;10.0;11.0;12.0+PTX"}
    assert platform_args(jobs[("devel", "linux/amd64")]) == {}, "the rendered Dockerfile's default is amd64's list"
    assert platform_args(jobs[("ssh", "linux/arm64")]) == {}


def test_each_platforms_record_says_what_a_host_needs_to_run_it(tmp_path: Path) -> None:
    """The report records runs_on per platform (push carries it into the release manifest, fit and the host index
    read it there), also for an image whose build failed."""
    from torchimages.build import stage
    from torchimages.build.stage import BuildOptions
    from torchimages.progress import LogFiles

    plan = plan_of(ENTRY)
    render.write(plan, "v1", tmp_path / "images")
    jobs = plan_jobs(plan, "v1", tmp_path / "images", Selection())
    outcomes = {job.image: BuildOutcome(job.image, job.tag, error="stopped") for job in jobs}
    report = stage.make_report(plan, BuildOptions("v1", tmp_path / "images"), jobs, outcomes=outcomes,
                               engine=FakeEngine().engine, logs=LogFiles(tmp_path / "logs"))
    needs = {record.image: record.runs_on for record in report.images}
    assert needs[f"{NAME}-arm64"] == needs[f"{NAME}-ssh-arm64"] == {
        "min_driver": "580.95.05", "min_driver_minor_compat": "580", "gpu_archs": "8.0 8.6 9.0 10.0 11.0 12.0"}
    assert needs[f"{NAME}-amd64"]["gpu_archs"] == "7.5 8.0 8.6 9.0 10.0 12.0"


def test_an_entry_of_arm64_alone_is_named_by_its_platform_and_released_as_an_index() -> None:
    """Only an entry of the default platform alone keeps plain names: one of arm64 alone is built as NAME-arm64 and its
    release tag is an index, so a pull on an amd64 host finds no image of its platform rather than an arm64 one."""
    plan = plan_of(ENTRY.replace("platforms: [linux/amd64, linux/arm64]", "platforms: [linux/arm64]"))
    jobs = plan_jobs(plan, "v1", Path("images"), Selection())
    assert [(job.image, job.name, job.platform) for job in jobs] == [
        (f"{NAME}-arm64", NAME, "linux/arm64"), (f"{NAME}-ssh-arm64", f"{NAME}-ssh", "linux/arm64")]
    assert plan.indexed_images() == {NAME: [("linux/arm64", f"{NAME}-arm64")],
                                     f"{NAME}-ssh": [("linux/arm64", f"{NAME}-ssh-arm64")]}
    assert plan_of(ENTRY.replace("platforms: [linux/amd64, linux/arm64]", "platforms: [linux/amd64]")).indexed_images() == {}
