"""The environment and layers each rendered image ends with, read from its Dockerfile as a builder reads it (stages,
build arguments and their defaults, ENV substitution, which instruction each layer comes from), rather than compared
with a snapshot:

- a devel image has CUDA_HOME, its compiler first on PATH and TORCH_CUDA_ARCH_LIST of its own platform's wheel with
  PTX of the newest generation, whichever platform it is built for;
- a base image's layers are torch (with the libraries it pins), then the entry's `pip:` packages pinned to what the
  torch layer holds, then the image's configuration, in both syntaxes; the torch layer's step does not change when the
  entry's packages do, so a builder's cache keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from torchimages.build import render
from torchimages.build.jobs import Selection, plan_jobs, platform_args
from torchimages.input.matrix import DEFAULT_PLATFORM

from ..conftest import plan_of, shell_words

BASE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the base image's PATH
DEVEL_ENTRY = """
registry: registry.example.com/ml/pytorch
images:
  - {flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.12", variants: [devel],
     platforms: [linux/amd64, linux/arm64]}
"""


def final_environment(dockerfile: str, build_args: dict[str, str]) -> dict[str, str]:
    """The ENV of the image a Dockerfile makes, FROM an image whose PATH is BASE_PATH, given these build arguments."""
    parser = DockerfileParser(fileobj=BytesIO(dockerfile.encode()), env_replace=True, parent_env={"PATH": BASE_PATH},
                              build_args=build_args)
    return parser.envs


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64"])
def test_a_devel_image_compiles_with_its_own_nvcc_for_the_gpus_its_torch_runs_on(platform: str) -> None:
    plan = plan_of(DEVEL_ENTRY)
    spec = plan.specs[0]
    [job] = [job for job in plan_jobs(plan, "v1", Path("images"), Selection(variants=("devel",)))
             if job.variant == "devel" and job.platform == platform]
    dockerfile = render.rendered_files(plan, "v1")[f"{job.name}/Dockerfile"][0]
    env = final_environment(dockerfile, platform_args(job))
    assert env["CUDA_HOME"] == spec.devel_cuda_home == "/opt/venv/lib/python3.12/site-packages/nvidia/cu13"
    assert env["PATH"] == f"{spec.devel_cuda_home}/bin:{BASE_PATH}", "nvcc first, then the base image's PATH"
    wanted = {"linux/amd64": "7.5;8.0;8.6;9.0;10.0;12.0+PTX", "linux/arm64": "8.0;8.6;9.0;10.0;11.0;12.0+PTX"}[platform]
    assert env["TORCH_CUDA_ARCH_LIST"] == wanted
    generations = [word.removesuffix("+PTX") for word in wanted.split(";")]
    assert generations == list(spec.archs_for(platform)), "every generation its torch wheel runs on"
    newest = max(generations, key=lambda word: tuple(map(int, word.split("."))))
    assert [word for word in wanted.split(";") if word.endswith("+PTX")] == [f"{newest}+PTX"]
    if platform == DEFAULT_PLATFORM:
        assert platform_args(job) == {}, "the rendered default is the default platform's list"


# --- the layers of a base image --------------------------------------------------------------------------------------

LAYERED_ENTRY = """
registry: registry.example.com/ml/pytorch
images:
  - {flavor: cpu, torch: "2.13.0", python: "3.11", pip: [%s]}
"""
TORCH = "torch==2.13.0"  # what the torch layer's step installs
PACKAGES = ("einops==0.8.0", "timm>=1.0")  # the entry's `pip:`


@dataclass
class Stage:
    name: str | None
    parent: str  # the FROM image: another stage's name, or an image
    own: list[dict] = field(default_factory=list)  # the stage's instructions after FROM (dockerfile_parse's dicts)


def stages(dockerfile: str) -> list[Stage]:
    """The stages of a Dockerfile, FROM values with their ARG defaults substituted (torch-${TORCH_INSTALL})."""
    parser = DockerfileParser(fileobj=BytesIO(dockerfile.encode()), env_replace=False)
    defaults = {}
    found: list[Stage] = []
    for instruction in parser.structure:
        kind, value = instruction["instruction"], instruction["value"]
        if kind == "ARG" and "=" in value:
            name, _, default = value.partition("=")
            defaults.setdefault(name, default.strip('"'))
        if kind == "FROM":
            words = [word for word in value.split() if not word.startswith("--")]
            parent = words[0]
            for name, default in defaults.items():
                parent = parent.replace(f"${{{name}}}", default)
            found.append(Stage(words[2] if len(words) > 2 else None, parent))
        elif found and kind not in ("COMMENT",):
            found[-1].own.append(instruction)
    return found


def layers_of(dockerfile: str) -> list[tuple[dict, Stage | None]]:
    """The final image's instructions in the order its layers are made (its FROM stages' first), each with the stage
    a COPY --from takes its files from."""
    by_name = {stage.name: stage for stage in stages(dockerfile) if stage.name}

    def lineage(stage: Stage) -> list[dict]:
        return (lineage(by_name[stage.parent]) if stage.parent in by_name else []) + stage.own

    def source(instruction: dict) -> Stage | None:
        flag = next((word for word in instruction["value"].split() if word.startswith("--from=")), None)
        return by_name.get(flag.removeprefix("--from=")) if flag and instruction["instruction"] == "COPY" else None

    return [(instruction, source(instruction)) for instruction in lineage(stages(dockerfile)[-1])]


def carries(layer: tuple[dict, Stage | None], text: str) -> bool:
    """Whether a layer installs `text`: its own RUN names it, or the stage a COPY takes files from names it in a RUN of
    its own (a COPY --from=environment /tmp/delta/ carries what that stage added, not what it was FROM)."""
    instruction, copied_from = layer
    if instruction["instruction"] == "RUN":
        return text in instruction["value"]
    return copied_from is not None and any(text in i["value"] for i in copied_from.own if i["instruction"] == "RUN")


def base_dockerfiles(packages: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    plan = plan_of(LAYERED_ENTRY % ", ".join(f'"{package}"' for package in packages))
    files = render.rendered_files(plan, "v1")
    name = plan.specs[0].name
    return {syntax: files[f"{name}/{syntax}"][0] for syntax in ("Dockerfile", "Dockerfile.buildkit")}


@pytest.mark.parametrize("syntax", ["Dockerfile", "Dockerfile.buildkit"])
def test_the_layers_are_torch_then_the_entrys_packages_then_the_configuration(syntax: str) -> None:
    layers = layers_of(base_dockerfiles()[syntax])
    torch = [n for n, layer in enumerate(layers) if carries(layer, TORCH)]
    packages = [n for n, layer in enumerate(layers) if any(carries(layer, package) for package in PACKAGES)]
    configuration = [n for n, (instruction, _) in enumerate(layers) if "image/image-doctor" in instruction["value"]]
    assert torch and packages and configuration, (torch, packages, configuration)
    assert max(torch) < min(packages) and max(packages) < min(configuration), (torch, packages, configuration)


@pytest.mark.parametrize("syntax", ["Dockerfile", "Dockerfile.buildkit"])
def test_the_entrys_packages_are_pinned_to_what_the_torch_layer_holds(syntax: str) -> None:
    """The step that installs the entry's packages first writes what the environment holds (pip freeze) and installs
    with it as constraints: a package that wants another torch or numpy fails there instead of moving the torch layer's
    files into this layer."""
    layers = layers_of(base_dockerfiles()[syntax])
    runs = [instruction for instruction, _ in layers] + [i for _, stage in layers if stage for i in stage.own]
    [step] = {i["value"] for i in runs if i["instruction"] == "RUN" and PACKAGES[0] in i["value"]}
    words = shell_words(step)
    install = next(n for n in range(len(words) - 1) if words[n:n + 2] == ["pip", "install"] or
                   (words[n].endswith("/pip") and words[n + 1] == "install"))
    command = words[install:words.index(";", install)]
    # the step's requirements: its own packages, or a rebuild's lock of this step (macros.j2: locked_or)
    unlocked = next(n for n in range(install) if words[n:n + 3] == ["else", "set", "--"])
    requirements = words[unlocked + 3:words.index(";", unlocked)]
    assert command[-1] == "$@" and all(package in requirements for package in PACKAGES), (command, requirements)
    constraints = command[command.index("-c") + 1]
    frozen = words[:install]
    assert "--format=freeze" in frozen and frozen[frozen.index(">") + 1] == constraints, frozen


@pytest.mark.parametrize("syntax", ["Dockerfile", "Dockerfile.buildkit"])
def test_the_torch_layers_step_is_the_same_whatever_the_entrys_packages(syntax: str) -> None:
    """A builder's cache keys a step on the instructions before it and its own text: a `pip:` change must leave all of
    them as they were, so only the packages' own layer is built and pushed again."""
    def up_to_the_torch_layer(dockerfile: str) -> str:
        steps = DockerfileParser(fileobj=BytesIO(dockerfile.encode())).structure
        torch_step = next(i for i in steps if i["instruction"] == "RUN" and TORCH in i["value"])
        return "\n".join(dockerfile.splitlines()[:torch_step["endline"] + 1])

    one, other = base_dockerfiles()[syntax], base_dockerfiles(("einops==0.7.0", "transformers"))[syntax]
    assert one != other
    assert up_to_the_torch_layer(one) == up_to_the_torch_layer(other)
