"""Every refusal names file, entry and field and says what would be valid."""

from __future__ import annotations

import pytest

from ..conftest import plan_of, problems_of

HEAD = "registry: registry.example.com/ml/pytorch\nimages:\n"


def only(problems: list[str]) -> str:
    assert len(problems) == 1, problems
    return problems[0]


def test_torch_cuda_pair_without_a_published_build() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cuda, torch: "2.3.1", cuda: "12.4", python: "3.11"}\n'))
    assert message.startswith("matrix.yaml:3: images[0]: field 'cuda':")
    assert "torch 2.3.1 has no CUDA 12.4 build; its builds: 11.8, 12.1" in message


def test_cudnn_other_than_the_bundled_one() -> None:
    message = only(problems_of(HEAD + '  - flavor: cuda\n    torch: "2.7"\n    cuda: "12.8"\n'
                                      '    cudnn: "8.9"\n    python: "3.11"\n'))
    assert message.startswith("matrix.yaml:6: images[0]: field 'cudnn':"), "line of the cudnn key"
    assert "torch 2.7.1 (cu128) bundles cuDNN 9.7.1.26, not 8.9" in message
    assert 'set cudnn: "9.7"' in message


def test_python_without_a_wheel() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cuda, torch: "2.3.1", cuda: "12.1", python: "3.13"}\n'))
    assert "field 'python': torch 2.3.1 cu121 has no wheel for Python 3.13 on x86_64" in message
    assert "nearest that exist: Python 3.10, 3.11, 3.12 with torch 2.3.1 cu121; torch 2.5.0 cu121 with Python 3.13" in message


def test_cpu_python_without_a_wheel() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.9"}\n'))
    assert message.startswith("matrix.yaml:3: images[0]: field 'python':")
    assert "torch 2.13.0 has no wheel for Python 3.9; it has wheels for: 3.10, 3.11, 3.12" in message


def test_unknown_torch_release() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cpu, torch: "1.13", python: "3.11"}\n'))
    assert "field 'torch': no torch release '1.13' is known; known releases: 2.0.0," in message


def test_unknown_ngc_release() -> None:
    message = only(problems_of(HEAD + '  - {flavor: ngc, ngc: "19.01"}\n'))
    assert "field 'ngc': unknown NGC PyTorch release '19.01'; releases with known contents:" in message
    assert "24.05" in message and "26.03" in message


def test_ngc_release_with_unrecorded_contents() -> None:
    message = only(problems_of(HEAD + '  - {flavor: ngc, ngc: "25.05"}\n'))
    assert "NGC 25.05 is known but its cuda, cudnn, nccl, python are not recorded" in message


def test_ngc_entry_pinning_another_torch() -> None:
    message = only(problems_of(HEAD + '  - {flavor: ngc, ngc: "24.05", torch: "2.3"}\n'))
    assert "field 'torch': an ngc image takes its versions from the NGC release" in message
    assert "NGC 24.05 ships torch 2.4.0a0+07cecf4168; set '2.4'" in message


def test_ngc_entry_with_matching_pins_is_accepted() -> None:
    spec = plan_of(HEAD + '  - {flavor: ngc, ngc: "24.05", torch: "2.4", cuda: "12.4", python: "3.10"}\n').specs[0]
    assert (spec.cuda, spec.cudnn, spec.nccl) == ("12.4", "9.1.0.70", "2.21.5")


def test_cpu_entry_with_cuda_fields() -> None:
    problems = problems_of(HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.11", cuda: "12.1", cudnn: "9"}\n')
    assert len(problems) == 2
    assert all("a cpu image carries no CUDA" in p for p in problems)


def test_unknown_keys_in_entry_and_top_level() -> None:
    problems = problems_of("registry: r.example.com/a/b\nextra: 1\nimages:\n"
                           '  - {flavor: cpu, torch: "2.13.0", python: "3.11", cudaa: "12.1"}\n')
    assert any(p.startswith("matrix.yaml:2: field 'extra': unknown top-level key") for p in problems)
    assert any("images[0]: field 'cudaa': unknown key; valid keys: name, flavor, torch" in p for p in problems)


@pytest.mark.parametrize(("line", "expected"), [
    ("{flavor: cpu, torch: 2.13, python: \"3.11\"}", "field 'torch': must be a string, not a number "
                                                     '(versions are strings: write torch: "2.13")'),
    ("{flavor: cpu, torch: \"2.13.0\", python: \"3.11\", variants: jupyter}", "field 'variants': must be a list"),
    ("{flavor: cpu, torch: \"2.13.0\", python: \"3.11\", variants: [web]}", "unknown variant 'web'"),
    ("{flavor: gpu, torch: \"2.13.0\", python: \"3.11\"}", "unknown flavor 'gpu'; valid: cuda, ngc, cpu"),
    ("just-a-string", "an entry must be a mapping"),
])
def test_wrong_types(line: str, expected: str) -> None:
    assert expected in only(problems_of(HEAD + f"  - {line}\n"))


def test_duplicate_names() -> None:
    problems = problems_of(HEAD + '  - {name: same, flavor: cpu, torch: "2.13.0", python: "3.11"}\n'
                                  '  - {name: same, flavor: cpu, torch: "2.12", python: "3.11"}\n')
    assert any("images[1] 'same': field 'name': duplicate image name 'same' (also images[0] 'same', line 3)" in p
               for p in problems)


def test_variant_name_clashing_with_an_entry_name() -> None:
    problems = problems_of(HEAD + '  - {name: a, flavor: cpu, torch: "2.13.0", python: "3.11", variants: [ssh]}\n'
                                  '  - {name: a-ssh, flavor: cpu, torch: "2.12", python: "3.11"}\n')
    assert any("duplicate image name 'a-ssh'" in p for p in problems)


def test_yaml_syntax_error_has_its_line() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cpu, torch: "2.13.0"\n  - broken: [\n'))
    assert message.startswith("matrix.yaml:") and "YAML syntax error" in message
    assert int(message.split(":")[1]) >= 3


def test_duplicate_yaml_key() -> None:
    assert "duplicate key 'torch'" in only(problems_of(HEAD + '  - flavor: cpu\n    torch: "2.1"\n    torch: "2.2"\n'))


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n"])
def test_empty_file(text: str) -> None:
    assert "the file is empty" in only(problems_of(text))


def test_no_images() -> None:
    assert "no images" in only(problems_of("registry: r.example.com/a/b\n"))


def test_missing_required_fields() -> None:
    problems = problems_of(HEAD + '  - {flavor: cuda, torch: "2.3.1"}\n')
    assert sorted(p.split("field ")[1].split(":")[0] for p in problems) == ["'cuda'", "'python'"]


def test_bad_registry() -> None:
    assert "is not a registry/repository reference" in only(problems_of(
        'registry: "Registry Example"\nimages:\n  - {flavor: cpu, torch: "2.13.0", python: "3.11"}\n'))


def test_torchvision_is_pinned_to_its_pair() -> None:
    spec = plan_of(HEAD + '  - {flavor: cuda, torch: "2.3.1", cuda: "12.1", python: "3.11", pip: [torchvision, rich]}\n').specs[0]
    assert spec.domain_pins == ("torchvision==0.18.1",)
    assert spec.pip == ("rich",)


def test_torch_in_pip_is_refused() -> None:
    assert "torch is set by the 'torch' field" in only(problems_of(
        HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.11", pip: ["torch==2.1"]}\n'))


def test_all_problems_are_reported_at_once() -> None:
    problems = problems_of(HEAD + '  - {flavor: cuda, torch: "2.3.1", cuda: "12.4", python: "3.11"}\n'
                                  '  - {flavor: cpu, torch: "9.9", python: "3.11"}\n')
    assert len(problems) == 2


@pytest.mark.parametrize("requirement", ["torch", "torchvision", "torchaudio==2.4.0"])
def test_ngc_entry_replacing_its_torch_stack_is_refused(requirement: str) -> None:
    message = only(problems_of(HEAD + f'  - {{flavor: ngc, ngc: "24.05", pip: ["{requirement}"]}}\n'))
    assert message == ("matrix.yaml:3: images[0]: field 'pip': NGC 24.05 ships its own torch build; replacing torch or its "
                       "domain libraries breaks it"), message


@pytest.mark.parametrize("name", ["My_Image", "-leading-dash", "a/b", "x" * 81, "space d"])
def test_image_name_outside_the_pattern_is_refused(name: str) -> None:
    message = only(problems_of(HEAD + f'  - {{flavor: cpu, torch: "2.13.0", python: "3.11", name: "{name}"}}\n'))
    assert f"field 'name': '{name}' is not a valid image name" in message, message


@pytest.mark.parametrize("name", ["a", "team.pytorch_2-3", "x" * 80])
def test_image_name_inside_the_pattern_is_accepted(name: str) -> None:
    assert plan_of(HEAD + f'  - {{flavor: cpu, torch: "2.13.0", python: "3.11", name: "{name}"}}\n').specs[0].name == name


def test_torchvision_pinned_to_another_release_is_refused() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cuda, torch: "2.3.1", cuda: "12.1", python: "3.11", '
                                      'pip: ["torchvision==0.17.0"]}\n'))
    assert "field 'pip': torchvision for torch 2.3.1 is 0.18.1; write plain 'torchvision' (pinned for you)" in message


def test_cuda_entry_with_an_ngc_field_is_refused() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cuda, torch: "2.3.1", cuda: "12.1", python: "3.11", ngc: "24.05"}\n'))
    assert "field 'ngc': not allowed here: a cuda image gets its versions from torch wheels" in message, message


def test_cuda_version_with_no_recorded_nvidia_cuda_image_is_refused() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cuda, torch: "2.3.1", cuda: "12.1.7", python: "3.11"}\n'))
    assert "field 'cuda': no nvidia/cuda image is recorded for CUDA 12.1.7; known: " in message
    assert "12.1.1" in message.split("known: ")[1].split(", "), "the message lists the recorded images to choose from"


def test_an_arm64_entry_is_proven_where_pypi_has_its_cuda_wheel() -> None:
    """From 2.11 PyPI's aarch64 wheel is the CUDA build (its pins hold on every Linux machine): arm64 is proven."""
    plan = plan_of(HEAD + '  - {flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.11",\n'
                          '     platforms: [linux/amd64, linux/arm64]}\n')
    assert plan.specs[0].platforms == ("linux/amd64", "linux/arm64")
    assert plan_of(HEAD + '  - {flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.11"}\n').specs[0].platforms == (
        "linux/amd64",)


def test_arm64_without_a_cuda_wheel_names_the_platforms_that_have_one() -> None:
    """torch 2.3.1's aarch64 wheel on PyPI is a CPU build (its CUDA pins say platform_machine == "x86_64")."""
    message = only(problems_of(HEAD + '  - flavor: cuda\n    torch: "2.3.1"\n    cuda: "12.1"\n    python: "3.11"\n'
                                      '    platforms: [linux/amd64, linux/arm64]\n'))
    assert message.startswith("matrix.yaml:7: images[0]: field 'platforms':"), "the line of the platforms key"
    assert "torch 2.3.1 cu121 has no wheel for Python 3.11 on linux/arm64; platforms with one: linux/amd64" in message


def test_arm64_where_no_index_was_read_is_not_assumed() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cuda, torch: "2.14.0", cuda: "12.6", python: "3.11",\n'
                                      '     platforms: [linux/arm64]}\n'))
    assert "torch 2.14.0 cu126 has no wheel for Python 3.11 on linux/arm64 (no index read lists this build's wheels " \
           "per platform: python build.py compat refresh); platforms with one: linux/amd64" in message


@pytest.mark.parametrize(("entry", "what"), [
    ('{flavor: cpu, torch: "2.13.0", python: "3.11", platforms: [linux/arm64]}', "torch's CPU builds"),
    ('{flavor: ngc, ngc: "24.05", platforms: [linux/amd64, linux/arm64]}', "NGC releases"),
])
def test_arm64_is_refused_where_the_compat_data_records_no_platforms(entry: str, what: str) -> None:
    message = only(problems_of(HEAD + f"  - {entry}\n"))
    assert f"field 'platforms': the compat data records no platforms for {what}, so linux/arm64 cannot be proven; " \
           "valid here: linux/amd64" in message


@pytest.mark.parametrize(("platforms", "words"), [
    ("[linux/arm64, linux/arm64]", "lists a platform twice"),
    ("[windows/amd64]", "unknown platform 'windows/amd64'; valid: linux/amd64, linux/arm64"),
    ("[]", "lists no platform; leave it out for linux/amd64"),
    ("linux/arm64", "must be a list of strings, not a string"),
])
def test_platforms_outside_the_list_are_refused(platforms: str, words: str) -> None:
    message = only(problems_of(HEAD + f'  - {{flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.11", '
                                      f'platforms: {platforms}}}\n'))
    assert "field 'platforms'" in message and words in message


def test_devel_of_a_cuda_line_whose_nvcc_is_not_on_pypi_names_the_image_that_has_it() -> None:
    message = only(problems_of(HEAD + '  - flavor: cuda\n    torch: "2.3.1"\n    cuda: "12.1"\n    python: "3.11"\n'
                                      '    variants: [jupyter, devel]\n'))
    assert message.startswith("matrix.yaml:7: images[0]: field 'variants':"), "line of the variants key"
    assert "devel: torch 2.3.1 cu121 needs nvcc 12.1, which PyPI does not have" in message
    assert "nvidia-cuda-nvcc-cu12 wheel holds ptxas only" in message
    assert "nvidia/cuda:12.1.1-devel-ubuntu22.04 has it" in message and "CUDA 13.0" in message


def test_devel_of_a_cpu_entry() -> None:
    message = only(problems_of(HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.11", variants: [devel]}\n'))
    assert "field 'variants': devel: a cpu image has no CUDA to compile extensions for" in message


def test_devel_of_the_cuda_13_line_comes_from_pypi_for_both_platforms() -> None:
    spec = plan_of(HEAD + '  - {flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.11", variants: [devel], '
                          'platforms: [linux/amd64, linux/arm64]}\n').specs[0]
    assert (spec.devel_pip, spec.devel_cuda_home) == ("cuda-toolkit[nvcc,cccl]",
                                                      "/opt/venv/lib/python3.11/site-packages/nvidia/cu13")
    assert "nvidia-cuda-nvcc" in spec.devel_wheels and "torch" not in spec.devel_wheels
    assert spec.cuda_arch_list("linux/amd64") == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert spec.cuda_arch_list("linux/arm64") == "8.0;8.6;9.0;10.0;11.0;12.0+PTX"


def test_devel_of_an_ngc_entry_needs_no_compiler_source() -> None:
    spec = plan_of(HEAD + '  - {flavor: ngc, ngc: "26.03", variants: [devel]}\n').specs[0]
    assert spec.variants == ("devel",) and spec.devel_pip is None and spec.devel_cuda_home is None
