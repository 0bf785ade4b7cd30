"""The flagship images built here, with BuildKit as the release workflow builds them: the CUDA entry from PyPI's CUDA
wheels on a local CUDA base, and the ngc flavor on an NGC-shaped base made from the CUDA entry's image. No GPU is
needed for anything asserted here: the GPU tier skips with its reason, the GPU-ready tier must pass. Each is built
once per session; `test_buildkit.py --compare-builders` compares them with the classic builder's."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import docker
import pytest
import yaml

from torchimages.build import render
from torchimages.verify.smoke import NO_GPU, SmokeResult, SmokeRunner, Target

from .conftest import (
    NGC_COMPAT,
    EntryBuild,
    build_entry,
    build_py,
    entry_spec_with,
    ngc_env,
    run_in,
    smoke_test,
)

pytestmark = [pytest.mark.lane("side"), pytest.mark.heavy]

LITERAL_FORMS = {"jupyter": ("jupyter-lab", "jupyter-notebook", "jupyter-server"), "ssh": ("sshd", "usr-sbin-sshd")}


def smoke_records(smoke: tuple) -> dict[str, dict]:
    result, report = smoke
    assert result.returncode == 0, f"the smoke suite failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return {record["variant"]: record["stages"]["smoke"] for record in report["images"]}


def outcomes(smoke: dict, prefix: str) -> dict[str, str]:
    return {c["name"]: c["outcome"] for c in smoke["checks"] if c["name"].startswith(prefix)}


def assert_suite_passed(smoke: tuple, build: EntryBuild) -> None:
    records = smoke_records(smoke)
    assert set(records) == {"base", "jupyter", "ssh"}
    for variant, record in records.items():
        assert record["failed"] == 0 and record["error"] is None, (variant, record)
        print(f"smoke {build.spec.name} {variant}: {record['seconds']} s, {record['passed']} passed, "
              f"{record['skipped']} skipped ({record['skipped_no_gpu']} for lack of a GPU)")
    base = records["base"]
    ready = outcomes(base, "test_gpu_ready::")
    # Skipped only where nothing is claimed: compat data without archs; a cuda image declares no
    # TORCH_CUDA_ARCH_LIST, while an NGC base always does (and its check must pass)
    skips = {"test_gpu_ready::test_cpu_image_has_no_cuda_libraries"}
    if not build.spec.archs:  # nothing claimed: nothing published (image.json, label) to check against torch
        skips |= {"test_gpu_ready::test_arch_list_covers_every_claimed_generation",
                  "test_gpu_ready::test_the_gpu_generations_the_image_publishes_are_torchs"}
    if build.spec.flavor == "cuda":
        skips.add("test_gpu_ready::test_arch_list_covers_what_the_image_declares")
    assert ready and all((outcome == "skipped") if name in skips else (outcome == "passed")
                         for name, outcome in ready.items()), ready
    assert "test_gpu_ready::test_arch_list_covers_what_the_image_declares" in ready, ready
    assert base["tiers"]["gpu-ready"]["passed"] >= 4 and base["tiers"]["gpu-ready"]["failed"] == 0, base["tiers"]
    gpu = [c for c in base["checks"] if c["tier"] == "needs-gpu"]
    assert len(gpu) >= 8 and all(c["outcome"] == "skipped" and NO_GPU in c["message"] for c in gpu), gpu
    for variant, forms in LITERAL_FORMS.items():
        ran = outcomes(records[variant], f"test_{variant}::")
        for form in forms:
            checks = {name: outcome for name, outcome in ran.items() if f"[{form}]" in name}
            assert checks and set(checks.values()) == {"passed"}, (variant, form, ran)


@pytest.mark.parametrize("entry", ["cuda", "ngc"])
def test_the_flagship_images_are_built_by_buildkit_through_buildx(entry: str, request: pytest.FixtureRequest) -> None:
    build: EntryBuild = request.getfixturevalue(f"{entry}_build")
    assert {r["variant"]: r["result"] for r in build.report["images"]} == dict.fromkeys(("base", "jupyter", "ssh"), "built")
    assert all("(buildx)" in r["builder"] for r in build.report["images"]), build.report["images"][0]["builder"]
    assert " step 1/" in build.result.stderr and "builder: RUN" in build.result.stderr, build.result.stderr[-3000:]


# --- the CUDA entry ---------------------------------------------------------------------------------------

def test_cuda_images_pass_the_suite_with_the_literal_run_commands(cuda_build: EntryBuild, cuda_smoke: tuple) -> None:
    assert_suite_passed(cuda_smoke, cuda_build)


def test_cuda_image_uses_the_os_python_chosen_while_building(api: docker.APIClient, cuda_build: EntryBuild) -> None:
    _, output = run_in(api, cuda_build.tags["base"], ["sh", "-c", "python -c 'import sys; print(sys.base_prefix)'; ls -A /opt/python"])
    assert output.strip() == "/usr", f"the venv is not built on Debian's python3 (base prefix, /opt/python): {output!r}"


def test_cuda_report_gives_size_and_floor(cuda_build: EntryBuild) -> None:
    for variant in ("base", "jupyter", "ssh"):
        record = cuda_build.record(variant)
        assert record["floor_bytes"] and record["size_bytes"], record
        ratio = record["size_bytes"] / record["floor_bytes"]
        print(f"{record['image']}: {record['size_bytes'] / 1e9:.2f} GB, floor {record['floor_bytes'] / 1e9:.2f} GB, "
              f"ratio {ratio:.3f}, built in {record['build_seconds']} s")
        assert ratio < 1.05, f"{record['image']} weighs {ratio:.3f} times its floor: a layer repeats files"
        # below its floor an image cannot be: the floor meter counted something twice, or measured the wrong image
        assert ratio > 0.98, f"{record['image']} weighs {ratio:.3f} times its floor: the floor is overcounted"


def test_the_cuda_torch_layer_is_in_pieces_a_pull_fetches_side_by_side(api: docker.APIClient, cuda_build: EntryBuild) -> None:
    """The CUDA image's torch layer as render.environment_pieces lays it out (the CUDA libraries in four pieces, torch,
    triton, the rest), each piece a layer of its own in that order, none empty, none more than half the environment's
    bytes: a pull fetches three at a time, where it fetched one 2.9 GB layer alone (the file-level rules, each file in
    one piece: test_rendered_behaviour.py; the layout of the CPU image, file by file: test_build_cpu.py)."""
    sizes = {}  # piece -> the bytes of its layer, from the image's history (its COPY's line names the piece)
    for step in reversed(api.history(cuda_build.tags["base"])):
        if piece := re.search(r"COPY (?:--from=\S+ )?/tmp/torch-layer/([\w.-]+)/ /", step["CreatedBy"]):
            sizes[piece[1]] = step["Size"]
    print({piece: f"{size / 1e6:.0f} MB" for piece, size in sizes.items()})
    assert list(sizes) == render.environment_pieces(cuda_build.spec), f"the image's pieces, in order: {list(sizes)}"
    assert all(sizes.values()), f"an empty piece: {sizes}"
    largest = max(sizes, key=sizes.get)
    assert sizes[largest] < sum(sizes.values()) / 2, f"{largest} holds {sizes[largest] / sum(sizes.values()):.0%} of the environment"


def test_cuda_variants_share_every_base_layer(api: docker.APIClient, cuda_build: EntryBuild) -> None:
    base = api.inspect_image(cuda_build.tags["base"])["RootFS"]["Layers"]
    for variant in ("jupyter", "ssh"):
        layers = api.inspect_image(cuda_build.tags[variant])["RootFS"]["Layers"]
        assert layers[: len(base)] == base, f"{variant} does not reuse the base layers"
        assert cuda_build.record(variant)["adds_bytes"] < 300e6, cuda_build.record(variant)


def test_cuda_version_checks_fail_on_other_declared_versions(broken_cuda_suite: SmokeResult) -> None:
    """The image declared with another cuDNN and NCCL: the checks read from the libraries must fail."""
    failed = {c.name: c.message for c in broken_cuda_suite.checks if c.outcome == "failed"}
    assert set(failed) >= WRONG_FACTS, failed
    message = failed["test_gpu_ready::test_versions_read_from_the_libraries"]
    assert "cudnn 8.9.2" in message and "the entry declares 9.1.0" in message, message


# --- the CUDA 13.0 line (opt-in: --cuda13) ---------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda13_smoke(cuda13_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    return smoke_test(cuda13_build, tmp_path_factory.mktemp("cuda13-smoke"))


@pytest.mark.cuda13
def test_the_cuda13_line_passes_the_suite(cuda13_build: EntryBuild, cuda13_smoke: tuple) -> None:
    """torch 2.14.0 cu130: its CUDA libraries come from the cuda-toolkit meta package and nvidia-*-cu13 wheels
    (nvidia/cu13/lib), cuFile's RDMA plugin loads (rdma-core's libraries are in the image), and the libcupti triton
    carries for its profiler is not a second CUDA stack. The versions are read from the libraries inside."""
    assert_suite_passed(cuda13_smoke, cuda13_build)
    assert (cuda13_build.spec.cuda, cuda13_build.spec.cudnn, cuda13_build.spec.nccl) == ("13.0", "9.24.0.43", "2.30.7")
    ready = outcomes(smoke_records(cuda13_smoke)["base"], "test_gpu_ready::")
    for check in ("test_versions_read_from_the_libraries", "test_every_cuda_library_loads",
                  "test_one_copy_of_each_cuda_library"):
        assert ready[f"test_gpu_ready::{check}"] == "passed", ready


# --- the ngc flavor ---------------------------------------------------------------------------------------

def test_ngc_images_pass_the_suite_with_the_literal_run_commands(ngc_build: EntryBuild, ngc_smoke: tuple) -> None:
    assert_suite_passed(ngc_smoke, ngc_build)


def test_ngc_versions_are_checked_against_the_declared_ngc_facts(ngc_build: EntryBuild, ngc_smoke: tuple) -> None:
    base = smoke_records(ngc_smoke)["base"]
    checks = outcomes(base, "test_versions::")
    for name in ("test_torch", "test_cudnn", "test_nccl", "test_labels_match_the_image",
                 "test_constraint_file_blocks_another_torch"):
        assert checks.get(f"test_versions::{name}") == "passed", checks
    row = yaml.safe_load(NGC_COMPAT.read_text())["ngc"][0]
    versions = ngc_build.record("base")["versions"]
    assert (versions["ngc"], versions["torch"], versions["cudnn"], versions["nccl"]) == (
        row["release"], row["pytorch"], row["cudnn"], row["nccl"]), versions


def test_ngc_torch_is_the_base_images_own(api: docker.APIClient, ngc_build: EntryBuild) -> None:
    """No venv, no second torch: the NGC torch in the system Python is what the image runs, pinned."""
    _, output = run_in(api, ngc_build.tags["jupyter"], ["sh", "-c", "command -v python; python -c 'import torch; "
                                                    "print(torch.__file__)'; grep -i '^torch==' /etc/pip/torchimages-constraints.txt"])
    python, torch_file, pin = output.strip().splitlines()
    assert python == "/usr/bin/python" and torch_file.startswith("/usr/local/lib/python3"), output
    assert pin.lower() == f"torch=={ngc_build.spec.torch.split('+')[0]}", output


def test_ngc_build_refuses_a_base_of_another_release(api: docker.APIClient, ngc_base_image: str, tmp_path) -> None:
    """An entry naming NGC 'other' on a base that says NVIDIA_PYTORCH_VERSION=test fails in the builder stage."""
    compat_file = tmp_path / "other.compat.yaml"
    compat_file.write_text(NGC_COMPAT.read_text().replace("- release: test", "- release: other"))
    matrix_file = tmp_path / "matrix.yaml"
    matrix_file.write_text('registry: registry.example.com/ml/pytorch\nimages:\n  - {flavor: ngc, ngc: "other"}\n')
    env = {**ngc_env(), "TORCHIMAGES_EXTRA_COMPAT": str(compat_file)}
    spec = entry_spec_with(matrix_file, compat_file)
    with pytest.raises(AssertionError) as failed:
        build_entry(spec, tmp_path / "out", matrix_file=matrix_file, env=env)
    assert "the base image is NGC release 'test' (NVIDIA_PYTORCH_VERSION), not other" in str(failed.value)
    assert build_py("validate", "--matrix", str(matrix_file), env=env).returncode == 0


# What the declared versions (another cuDNN and NCCL) fail, and what the broken copy fails: one suite proves both, as
# each costs a whole CUDA base suite (about 35 s, 20 of them torch.compile), and each test checks the failures of its cause.
WRONG_FACTS = {"test_gpu_ready::test_versions_read_from_the_libraries", "test_versions::test_cudnn",
               "test_versions::test_nccl"}
BROKEN_COPY = {"test_gpu_ready::test_every_cuda_library_loads", "test_gpu_ready::test_one_copy_of_each_cuda_library",
               "test_gpu_ready::test_arch_list_covers_every_claimed_generation",
               "test_gpu_ready::test_arch_list_covers_what_the_image_declares"}


@pytest.fixture(scope="module")
def broken_cuda_suite(api: docker.APIClient, cuda_build: EntryBuild) -> Iterator[SmokeResult]:
    """The suite on a broken copy of the CUDA base (a base cuDNN beside the wheel's, a truncated library, a claimed GPU
    generation without kernels, one declared in TORCH_CUDA_ARCH_LIST), declared with other versions."""
    site = f"/opt/venv/lib/python{cuda_build.spec.python}/site-packages/nvidia"
    dockerfile = (f"FROM {cuda_build.tags['base']}\nUSER 0:0\n"
                  f"RUN cp {site}/cudnn/lib/libcudnn.so.8 /usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.7 && "
                  f"head -c 4096 {site}/curand/lib/libcurand.so.10 > /usr/local/lib/libcurand.so.10\nUSER 1000:1000\n"
                  'ENV TORCH_CUDA_ARCH_LIST="8.0 9.0 12.0+PTX"\n')
    stream = api.build(fileobj=io.BytesIO(dockerfile.encode()), tag="torchimages-broken:cuda-twice", rm=True,
                       forcerm=True, decode=True)
    assert not [chunk for chunk in stream if "error" in chunk]
    target = Target("broken-cuda", "torchimages-broken:cuda-twice", "base", "cuda",
                    {**cuda_build.expected, "cudnn": "9.1.0.70", "nccl": "2.21.5",
                     "archs": [*cuda_build.expected["archs"], "10.0"]})
    try:
        yield SmokeRunner().run(target)
    finally:
        api.remove_image("torchimages-broken:cuda-twice", force=True)


def test_cuda_image_with_a_second_cudnn_and_a_broken_library_fails_the_gpu_ready_tier(
        broken_cuda_suite: SmokeResult) -> None:
    """A base cuDNN beside the wheel's, a truncated library, a claimed GPU generation without kernels: each fails."""
    failed = {c.name: c.message for c in broken_cuda_suite.checks if c.outcome == "failed"}
    assert set(failed) - WRONG_FACTS == BROKEN_COPY, failed  # nothing else fails
    assert "/usr/local/lib/libcurand.so.10: loading it killed the process" in failed["test_gpu_ready::test_every_cuda_library_loads"]
    assert "/usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.7" in failed["test_gpu_ready::test_one_copy_of_each_cuda_library"]
    assert "['10.0']" in failed["test_gpu_ready::test_arch_list_covers_every_claimed_generation"]
    assert "no kernels for ['12.0']" in failed["test_gpu_ready::test_arch_list_covers_what_the_image_declares"]
