"""The commands as a user runs them: exit codes, messages, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_cli


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


def test_validate_default_matrix() -> None:
    result = run_cli("validate")
    assert result.returncode == 0, result.stderr
    assert "matrix.yaml: valid: 4 entries, 14 images" in result.stdout


@pytest.mark.parametrize(("text", "expected"), [
    ("", "error: {path}: the file is empty"),
    ("registry: a.b/c\nimages:\n  - {flavor: cuda, torch: '2.7', cuda: '12.8', cudnn: '8', python: '3.11'}\n",
     "error: {path}:3: images[0]: field 'cudnn': torch 2.7.1 (cu128) bundles cuDNN 9.7.1.26, not 8"),
    ("registry: a.b/c\nimages: [\n", "error: {path}:3: YAML syntax error"),
])
def test_bad_input_exits_2_with_file_entry_field(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    for command in (["validate"], ["render", "--tag", "v1", "--out", str(tmp_path / "out")], ["matrix"]):
        result = run_cli(*command, "--matrix", str(path))
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert expected.format(path=path) in result.stderr
        assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists(), "nothing is rendered from an invalid matrix"


def test_missing_matrix_file(tmp_path: Path) -> None:
    result = run_cli("validate", "--matrix", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert f"error: {tmp_path / 'nope.yaml'}: cannot read file" in result.stderr


def test_matrix_github_format_lists_every_image() -> None:
    result = run_cli("matrix", "--format", "github", "--tag", "v2.7")
    assert result.returncode == 0, result.stderr
    include = json.loads(result.stdout)["include"]
    assert len(include) == 14
    assert {row["variant"] for row in include} == {"base", "jupyter", "ssh", "devel"}
    first = include[0]
    assert first["tag"] == "registry.example.com/ml/pytorch:v2.7-torch2.3.1-cu121-cudnn8.9-py3.11"
    assert (first["torch"], first["cuda"], first["cudnn"], first["python"]) == ("2.3.1", "12.1", "8.9.2.26", "3.11")


def test_matrix_table_and_json() -> None:
    table = run_cli("matrix", "--tag", "v2.7")
    assert table.returncode == 0 and "torch2.13.0-cpu-py3.11-jupyter" in table.stdout
    rows = json.loads(run_cli("matrix", "--format", "json").stdout)
    assert rows[-1]["image"] == "torch2.13.0-cpu-py3.11-ssh" and rows[-1]["flavor"] == "cpu"
    assert rows[-1]["context"] == "images/torch2.13.0-cpu-py3.11-ssh"
    assert {tuple(row["platforms"]) for row in rows} == {("linux/amd64",)}, "the default platform, from the matrix"


def test_matrix_json_lists_the_platforms_an_entry_asks_for(tmp_path: Path) -> None:
    matrix_file = tmp_path / "arm64.yaml"
    matrix_file.write_text(ARM64)
    rows = json.loads(run_cli("matrix", "--format", "json", "--matrix", str(matrix_file)).stdout)
    assert [row["platforms"] for row in rows] == [["linux/amd64", "linux/arm64"]] * 2
    name = "torch2.14.0-cu130-cudnn9.24-py3.11"
    assert [(row["image"], row["platform"], row["context"]) for row in rows] == [
        (f"{name}-amd64", "linux/amd64", f"images/arm64/{name}"),
        (f"{name}-arm64", "linux/arm64", f"images/arm64/{name}")]


def test_the_release_workflow_gets_a_job_per_entry_and_platform_on_a_runner_of_that_platform(tmp_path: Path) -> None:
    matrix_file = tmp_path / "arm64.yaml"
    matrix_file.write_text(ARM64.replace("python: \"3.11\",", "python: \"3.11\", variants: [ssh],"))
    result = run_cli("matrix", "--format", "github", "--per", "entry", "--matrix", str(matrix_file), "--tag", "v2.7")
    assert result.returncode == 0, result.stderr
    name = "torch2.14.0-cu130-cudnn9.24-py3.11"
    jobs = [(row["entry"], row["platform"], row["arch"], row["runner"], row["images"])
            for row in json.loads(result.stdout)["include"]]
    assert jobs == [
        (name, "linux/amd64", "amd64", ["self-hosted", "linux", "X64", "gpu"], [f"{name}-amd64", f"{name}-ssh-amd64"]),
        (name, "linux/arm64", "arm64", ["self-hosted", "linux", "ARM64", "gpu"], [f"{name}-arm64", f"{name}-ssh-arm64"])]


def test_another_matrix_names_the_folder_its_contexts_are_rendered_into(tmp_path: Path) -> None:
    nightly = tmp_path / "nightly.yaml"
    nightly.write_text((Path(__file__).parents[2] / "matrix.yaml").read_text())
    rows = json.loads(run_cli("matrix", "--format", "json", "--tag", "v1", "--matrix", str(nightly)).stdout)
    assert {row["context"] for row in rows} == {f"images/nightly/{row['image']}" for row in rows}
    out = tmp_path / "work"
    out.mkdir()
    rendered = run_cli("render", "--tag", "v1", "--matrix", str(nightly), cwd=out)
    assert rendered.returncode == 0, rendered.stderr
    assert {path.name for path in (out / "images" / "nightly").iterdir() if path.is_dir()} == {row["image"] for row in rows}


def test_main_command_dry_run_lists_the_whole_matrix_without_an_engine() -> None:
    result = run_cli("--tag", "v2.7", "--dry-run", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert "plan for release v2.7: 14 images from the contexts in images/, 2 at a time; no engine touched" in result.stdout
    assert " 14. torch2.13.0-cpu-py3.11-ssh" in result.stdout
    assert "order:   after torch2.13.0-cpu-py3.11" in result.stdout
    assert "context: images/torch2.13.0-cpu-py3.11-ssh" in result.stdout


def test_dry_run_filters_and_brings_the_base_along() -> None:
    result = run_cli("build", "--tag", "v2.7", "--dry-run", "--only", "*cpu*-jupyter", "--base-image", "local/debian:12")
    assert result.returncode == 0, result.stderr
    assert "2 images" in result.stdout
    assert "FROM local/debian:12" in result.stdout and "torch2.13.0-cpu-py3.11-jupyter" in result.stdout
    none = run_cli("build", "--tag", "v2.7", "--dry-run", "--only", "nothing-matches")
    assert none.returncode == 2 and "no image matches" in none.stderr


def test_render_requires_a_tag() -> None:
    result = run_cli("render", "--out", "/tmp/unused-render-out")
    assert result.returncode == 2 and "--tag is required" in result.stderr


def test_bench_measures_the_base_images_unless_images_are_named() -> None:
    from torchimages.build.jobs import Selection
    from torchimages.verify.benchstage import measured_by_default

    assert measured_by_default(Selection()).variants == ("base",)
    assert measured_by_default(Selection(flavors=("cpu",))) == Selection(flavors=("cpu",), variants=("base",))
    assert measured_by_default(Selection(only=("torch*-jupyter",))) == Selection(only=("torch*-jupyter",))
    assert measured_by_default(Selection(variants=("ssh",))) == Selection(variants=("ssh",))
    helped = run_cli("bench", "--help")
    assert helped.stdout.count("--only") == 1 and "--flavor" in helped.stdout and "--variant" in helped.stdout


ARM64 = """registry: registry.example.com/ml/pytorch
images:
  - {flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.11", platforms: [linux/amd64, linux/arm64]}
"""


@pytest.mark.parametrize("command", [["--tag", "v1"], ["build", "--tag", "v1"]])
def test_an_entry_of_two_platforms_is_built_for_each_from_its_own_base(tmp_path: Path, command: list[str]) -> None:
    """Each platform's images are jobs of their own: named and tagged with the platform's architecture (the plain
    tag becomes the image index at promotion), each base FROM the --base-image of its platform, the plain form for
    the others; --platform picks one platform's images."""
    matrix_file = tmp_path / "arm64.yaml"
    matrix_file.write_text(ARM64)
    validated = run_cli("validate", "--matrix", str(matrix_file))
    assert validated.returncode == 0 and "1 entries, 2 images" in validated.stdout, validated.stdout + validated.stderr
    bases = ("--base-image", "local/cuda:13.0.3", "--base-image", "linux/arm64=local/cuda:13.0.3-arm64")
    planned = run_cli(*command, "--matrix", str(matrix_file), "--dry-run", *bases)
    assert planned.returncode == 0, planned.stderr
    name = "torch2.14.0-cu130-cudnn9.24-py3.11"
    assert (f"1. {name}-amd64\n     tag:     registry.example.com/ml/pytorch:v1-{name}-amd64\n     for:     linux/amd64\n"
            "     order:   FROM local/cuda:13.0.3\n") in planned.stdout, planned.stdout
    assert (f"2. {name}-arm64\n     tag:     registry.example.com/ml/pytorch:v1-{name}-arm64\n     for:     linux/arm64\n"
            "     order:   FROM local/cuda:13.0.3-arm64\n") in planned.stdout, planned.stdout
    one = run_cli(*command, "--matrix", str(matrix_file), "--dry-run", "--platform", "linux/arm64", *bases)
    assert one.returncode == 0 and "1 images" in one.stdout and f"{name}-amd64" not in one.stdout, one.stdout


@pytest.mark.parametrize(("bases", "message"), [
    (("a/b:1", "c/d:2"), "--base-image given 2 times without a platform (a/b:1, c/d:2)"),
    (("linux/riscv64=a/b:1",), "'linux/riscv64' is not a platform: linux/amd64, linux/arm64"),
    (("linux/arm64=a/b:1", "linux/arm64=c/d:2"), "--base-image linux/arm64=... given twice"),
    (("linux/arm64=$(id)",), "--base-image linux/arm64=: '$(id)' is not an image reference"),
    (("linux/amd64=",), "--base-image 'linux/amd64=': no image given"),  # else amd64 stays on the matrix's base
    (("a/b:1", "linux/arm64= "), "--base-image 'linux/arm64= ': no image given"),
    (("",), "--base-image '': no image given"),
])
def test_base_images_per_platform_are_checked_before_anything_is_built(tmp_path: Path, bases: tuple[str, ...],
                                                                       message: str) -> None:
    matrix_file = tmp_path / "arm64.yaml"
    matrix_file.write_text(ARM64)
    options = [word for base in bases for word in ("--base-image", base)]
    result = run_cli("build", "--tag", "v1", "--matrix", str(matrix_file), "--dry-run", *options)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
