"""Render each image's build context (Dockerfile plus the files it copies) from the template.

Output is deterministic: the same matrix, template and release tag give the same bytes, so
the rendered images/ folder can be committed and checked for staleness.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .. import consoles
from ..checkedjson import Fields
from ..errors import UserError, visible
from ..files import check_output_folder as check_output
from ..files import load
from ..input.grammar import DEFAULT_PLATFORM, release_problem, text_problem
from ..input.specs import ImageSpec, Plan
from ..settings import SETTINGS, Settings

TEMPLATE = "Dockerfile.j2"
MARKER = "rendered.json"
BUILDKIT_DOCKERFILE = "Dockerfile.buildkit"  # the same template with RUN --mount, for --builder buildkit
EXECUTABLE = {"jupyter-healthcheck", "start-sshd", "image-doctor", "torchimages-entrypoint"}


@dataclass(frozen=True)
class Context:
    """One image's build context: where it goes and what it holds."""

    image: str
    variant: str  # "base", "jupyter" or "ssh"
    spec: ImageSpec
    files: dict[str, str]  # path inside the context -> content


def environment(settings: Settings = SETTINGS) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(settings.templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    # Every matrix value in a RUN line is one shell word whatever it holds: the matrix grammar is the first
    # defence, this the second (a PEP 508 marker legitimately holds quotes, ';' and '<').
    env.filters["shell_quote"] = shlex.quote
    return env


def labels(plan: Plan, spec: ImageSpec, release: str, variant: str, settings: Settings = SETTINGS) -> dict[str, str]:
    """OCI labels plus the versions a user (and the smoke suite) can read off the image."""
    prefix = settings.label_prefix
    found = {
        "org.opencontainers.image.title": spec.image_name(variant),
        "org.opencontainers.image.description": _description(spec, variant),
        "org.opencontainers.image.version": release,
        "org.opencontainers.image.source": settings.source_url,
        "org.opencontainers.image.base.name": spec.base_image if variant == "base" else plan.tag(release, spec.name),
        f"{prefix}.flavor": spec.flavor,
        f"{prefix}.variant": variant,
        f"{prefix}.torch": spec.torch,
        f"{prefix}.python": spec.python,
        f"{prefix}.cuda": spec.cuda or "none",
        f"{prefix}.cudnn": spec.cudnn or "none",
        f"{prefix}.nccl": spec.nccl or "none",
        f"{prefix}.min-driver": spec.min_driver or "none",
        f"{prefix}.min-driver-minor-compat": spec.min_driver_compat or "none",
    }
    if spec.ngc:
        found[f"{prefix}.ngc"] = spec.ngc
    if variant == "base" and spec.base_image in plan.pins:
        found["org.opencontainers.image.base.digest"] = plan.pins[spec.base_image]
    return found


def image_facts(spec: ImageSpec) -> dict[str, object]:
    """The declared versions, as a file in the image: labels are not visible from inside a container.

    Not the release: an image's content must not depend on it (only its labels do), so an unchanged image
    can be reused by the next release.
    """
    return spec.host_facts()


# The CUDA libraries' wheels (2.8 GB installed for cu121) in this many layers of their own: a pull fetches three layers
# at once and extracts each as soon as the ones below it are, so pieces of a few hundred MB keep both busy (issue 52).
CUDA_LIBRARY_PIECES = 4


def environment_pieces(spec: ImageSpec) -> list[str]:
    """The torch layer's pieces, each a layer, in the order they go into the image: what changes least first (the CUDA
    libraries, torch, triton), and last the rest of what torch's install step puts in (files/split-environment.py)."""
    cuda = [f"nvidia-{n}" for n in range(1, CUDA_LIBRARY_PIECES + 1)] + ["torch", "triton"] if spec.cuda else ["torch"]
    return [*cuda, "environment"]


def _description(spec: ImageSpec, variant: str) -> str:
    stack = f"PyTorch {spec.torch}, Python {spec.python}"
    if spec.cuda:
        stack += f", CUDA {spec.cuda}, cuDNN {spec.cudnn}, NCCL {spec.nccl}"
    extra = {"base": "", "jupyter": " with JupyterLab", "ssh": " with an SSH server",
             "devel": " with nvcc and the CUDA headers"}[variant]
    return stack + extra


def contexts(plan: Plan, release: str, settings: Settings = SETTINGS) -> list[Context]:
    """Every image's context, bases before their variants."""
    env = environment(settings)
    out = []
    for spec in plan.specs:
        for variant, image in spec.images():
            out.append(Context(image, variant, spec, _files(env, plan, spec, variant=variant, release=release, settings=settings)))
    return out


def _files(env: jinja2.Environment, plan: Plan, spec: ImageSpec, *, variant: str, release: str,
           settings: Settings) -> dict[str, str]:
    values = {
        "spec": spec, "variant": variant, "release": release, "settings": settings,
        "labels": labels(plan, spec, release, variant, settings),
        "base_tag": plan.tag(release, spec.name), "base_reference": plan.base_reference(spec),
        "template": TEMPLATE, "matrix_file": Path(plan.file).name,
        "image_facts": image_facts(spec),
        "default_platform": DEFAULT_PLATFORM,
        "devel_cuda_home": spec.devel_cuda_home or "",
        "environment_pieces": environment_pieces(spec),
        "uses": [],  # what the rendered Dockerfile COPYs, declared by the template (macros.build_args)
        "buildkit": False,
    }
    template = env.get_template(TEMPLATE)
    files = {"Dockerfile": template.render(values)}
    build_config = "build-config" in values["uses"]
    if build_config:  # only where a stage installs packages do the two syntaxes differ (macros.mounts)
        files[BUILDKIT_DOCKERFILE] = template.render({**values, "buildkit": True, "uses": []})
    files.update(_static_files(env, variant, values, build_config=build_config))
    return files


def _static_files(env: jinja2.Environment, variant: str, values: dict, *, build_config: bool) -> dict[str, str]:
    """Files a context COPYs: the build-config folder (only where a stage installs packages), each variant's scripts."""
    files = {
        "build-config/network-env.sh": env.get_template("files/network-env.sh").render(values),
        "build-config/keep-pip-report.py": env.get_template("files/keep-pip-report.py").render(values),
        "build-config/extra-ca.pem": "",
        "build-config/wheelhouse/.keep": "",
    } if build_config else {}
    if "split-environment" in values["uses"]:  # declared by the template (macros.torch_layer)
        files["build-config/split-environment.py"] = env.get_template("files/split-environment.py").render(values)
    names = {"base": ["image-doctor", "gpurules.py", "torchimages-entrypoint", "image.json"],
             "jupyter": ["jupyter_server_config.py", "jupyter-healthcheck"], "ssh": ["start-sshd", "sshd_config", "profile.sh"]}
    folder = {"base": "image"}
    for name in names.get(variant, []):
        files[f"{folder.get(variant, variant)}/{name}"] = env.get_template(f"files/{name}").render(values)
    return files


def write(plan: Plan, release: str, out: Path, settings: Settings = SETTINGS) -> list[Path]:
    """Replace `out` with freshly rendered contexts; return the Dockerfiles written.

    Only a new or empty folder, or one render wrote before (it holds rendered.json), is replaced: nothing
    else is ever deleted. The contexts are written into a temporary sibling that then takes the folder's place.
    A render that would change nothing writes nothing (it only reads), so re-rendering costs little.
    """
    check_output_folder(out)
    files = rendered_files(plan, release, settings)
    dockerfiles = [out / name for name in files if name.endswith(("/Dockerfile", f"/{BUILDKIT_DOCKERFILE}"))]
    if out.is_dir() and not differences(files, out):
        return dockerfiles
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.rendering-", dir=out.parent))
    try:
        write_files(files, staging)
        staging.chmod(0o755)
        keep_nested_renders(out, staging, {name.split("/", 1)[0] for name in files if "/" in name})
        if out.exists():
            retired = staging.with_name(staging.name.replace(".rendering-", ".replaced-"))
            out.rename(retired)
            staging.rename(out)
            shutil.rmtree(retired)
        else:
            staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dockerfiles


def rendered_files(plan: Plan, release: str, settings: Settings = SETTINGS) -> dict[str, tuple[str, int]]:
    """Every file a render writes, relative to its folder: content and mode (rendered.json included)."""
    rendered = contexts(plan, release, settings)
    files = {f"{context.image}/{relative}": (content, 0o755 if Path(relative).name in EXECUTABLE else 0o644)
             for context in rendered for relative, content in sorted(context.files.items())}
    marker = {"release": release, "matrix": Path(plan.file).name, "images": [c.image for c in rendered]}
    files[MARKER] = (json.dumps(marker, indent=2) + "\n", 0o644)
    return files


def write_files(files: dict[str, tuple[str, int]], folder: Path) -> None:
    for relative, (content, mode) in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        path.chmod(mode)


def differences(files: dict[str, tuple[str, int]], folder: Path) -> list[str]:
    """Paths under `folder` that differ from `files` (missing, extra, other content or executable bit), and every link
    under it (a build would copy what a link points at); other matrices' renders nested in it are not part of it."""
    if not folder.is_dir() or folder.is_symlink():
        return [str(folder)]
    nested = nested_renders(folder)
    inside = [p for p in walk(folder) if not any(n == p or n in p.parents for n in nested)]
    links = {str(p.relative_to(folder)) for p in inside if p.is_symlink()}
    have = {str(p.relative_to(folder)) for p in inside if p.is_file() and not p.is_symlink()}
    changed = []
    for relative in sorted(have & files.keys()):
        content, mode = files[relative]
        path = folder / relative
        executable = bool(path.stat().st_mode & 0o111)
        if executable != bool(mode & 0o111) or path.read_bytes() != content.encode("utf-8"):
            changed.append(relative)
    return sorted(str(folder / p) for p in (have ^ files.keys()) | set(changed) | links)


def walk(folder: Path) -> list[Path]:
    """Every path under `folder`, links included but never followed."""
    found = []
    for parent, folders, names in os.walk(folder, followlinks=False):
        found += [Path(parent) / name for name in [*folders, *names]]
    return found


def nested_renders(folder: Path) -> list[Path]:
    """Renders of other matrices inside `folder` (images/<matrix name>/): each holds its own rendered.json."""
    if not folder.is_dir():
        return []
    return sorted(child for child in folder.iterdir()
                  if child.is_dir() and not child.is_symlink() and (child / MARKER).is_file())


def keep_nested_renders(out: Path, staging: Path, images: set[str]) -> None:
    """Move other matrices' renders into the new folder, so replacing images/ never deletes images/<matrix name>/."""
    for nested in nested_renders(out):
        if nested.name in images:
            raise UserError(f"{nested} holds another matrix's render, and this matrix has an image named "
                            f"'{nested.name}'; render one of them elsewhere (--out / --images)")
        nested.rename(staging / nested.name)


def check_output_folder(out: Path) -> None:
    check_output(out, "--out")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file is there, not a folder")
    written_by_render = (out / MARKER).is_file() or set(out.iterdir()) == set(nested_renders(out)) if out.is_dir() else True
    if not written_by_render:
        raise UserError(f"--out {out}: refusing to replace a folder that render did not write (no {MARKER} in it); "
                        "give a new or empty folder")


def rendered_release(out: Path) -> str | None:
    """The release tag the contexts under `out` were rendered with (rendered.json), or None when nothing records one. A
    recorded tag is read back as a typed --tag is checked: one the grammar refuses is refused, never rendered."""
    marker = out / MARKER
    if not marker.is_file():
        return None
    try:
        release = Fields(str(marker), load(marker, "a render's record")).value("release", optional=False)
    except UserError as error:
        raise UserError(f"{error}; no recorded release: give --tag (e.g. --tag v2.7)") from None
    if why := text_problem(release, release_problem):
        raise UserError(f"{marker}: field 'release' {why}; no recorded release: give --tag (e.g. --tag v2.7)")
    return str(release)


def stale_paths(plan: Plan, release: str, out: Path, settings: Settings = SETTINGS) -> list[str]:
    """Paths under `out` that differ from a fresh render (missing, extra or changed); compared in memory."""
    return differences(rendered_files(plan, release, settings), out)


def check_current(plan: Plan, release: str, folder: Path, unpinned: list[str]) -> int:
    """`render --check`: print what is stale (the contexts, and the base tags the lock does not pin as the
    matrix names them: `unpinned`); the exit code (1: something is stale)."""
    stale = stale_paths(plan, release, folder)
    for problem in unpinned:
        consoles.err.print(f"{visible(problem)}: run python build.py lock")
    if stale:
        consoles.err.print(f"{visible(str(folder))} is stale for release {release} ({len(stale)} files differ or are "
                           f"links); run: python build.py render --tag {release}")
        for path in stale[:20]:
            consoles.err.print(f"  {visible(path)}")
    if stale or unpinned:
        return 1
    consoles.out.print(f"{visible(str(folder))} is up to date for release {release}")
    return 0
