"""The command line's options, each declared once, and the rules that turn their values into the stages'
options (build inputs, the size budget, cache sources, push options): what cli.py's commands are given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .build.inputs import BuildInputs
from .errors import UserError
from .files import check_output_file, check_output_folder
from .input import grammar, planning
from .input import matrix as matrix_stage
from .input.grammar import PLATFORMS, SEVERITIES, VARIANTS, release_problem
from .input.matrix import FLAVORS
from .input.specs import Plan, Release

if TYPE_CHECKING:
    from .build.budget import Budget
    from .build.cache import CacheSources
    from .build.jobs import Selection
    from .build.released import FromRelease
    from .build.stage import BuildOptions
    from .manifest import ReleaseManifest
    from .publish.pushstage import PushOptions
    from .publish.signing import SigningKey
    from .verify.auditstage import AuditInputs


def matrix_option(function: Callable[..., None]) -> Callable[..., None]:
    function = click.option("--matrix", "matrix_path", type=click.Path(path_type=Path), default=Path("matrix.yaml"),
                            show_default=True, envvar="TORCHIMAGES_MATRIX",
                            help="The matrix file (TORCHIMAGES_MATRIX: the entries one runner releases).")(function)
    return max_images_option(function)


def output_file(_ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """An option naming a file to write: a regular file or a new path (torchimages.files), checked before any work."""
    return None if value is None else check_output_file(value, param.opts[0])


def output_folder(_ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """An option naming a folder to write into: a folder or a new path, not a link, a device or a file."""
    return None if value is None else check_output_folder(value, param.opts[0])


def images_option(flag: str, name: str, help_text: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(flag, name, type=click.Path(path_type=Path), default=None, callback=output_folder,
                        help=f"{help_text} [images/ for matrix.yaml, images/NAME/ for another NAME.yaml].")


def limit_images(ctx: click.Context, _param: click.Parameter, limit: int) -> int:
    ctx.meta["max_images"] = limit
    return limit


# The limit is read where the matrix is loaded (load_plan), so every command that takes --matrix takes it too.
max_images_option = click.option("--max-images", type=click.IntRange(min=1), default=matrix_stage.MAX_IMAGES,
                                  show_default=True, expose_value=False, callback=limit_images, is_eager=True,
                                  help="Refuse a matrix with more images than this (GitHub Actions runs 256 jobs at most).")


def tag_option(help_text: str, *, required: bool = False) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """--tag, checked against Docker's tag grammar by every command that takes it."""
    return click.option("--tag", "release", callback=checked_release, required=required, help=help_text)


def checked_release(_ctx: click.Context, _param: click.Parameter, release: str | None) -> str | None:
    """--tag becomes part of image tags and of folder names: refuse what Docker's tag grammar refuses."""
    problem = release_problem(release) if release is not None else None
    if problem:
        raise click.BadParameter(problem, param_hint="'--tag'")
    return release


def load_plan(path: Path, quiet: bool = False) -> Plan:
    """The checked plan (torchimages.input.planning), with the command's --max-images and --tag."""
    context = click.get_current_context(silent=True)
    limit = context.meta.get("max_images", matrix_stage.MAX_IMAGES) if context else matrix_stage.MAX_IMAGES
    release = context.params.get("release") if context else None
    return planning.load(path, max_images=limit, release=release if isinstance(release, str) else None, quiet=quiet)


def applied(options: list, function: Callable[..., None]) -> Callable[..., None]:
    """`function` with `options` declared in their order (as if each were its decorator, the first on top)."""
    for option in reversed(options):
        function = option(function)
    return function


def selection_options(function: Callable[..., None]) -> Callable[..., None]:
    """--only, --flavor and --variant: which images a command works on (buildjobs.Selection)."""
    options = [
        click.option("--only", multiple=True, metavar="GLOB", help="Image names (repeatable); a variant brings its base."),
        click.option("--flavor", "flavors", multiple=True, type=click.Choice(FLAVORS), help="Only these flavors."),
        click.option("--variant", "variants", multiple=True, type=click.Choice(("base", *VARIANTS)), help="Only these variants."),
        click.option("--platform", "platforms", multiple=True, type=click.Choice(tuple(PLATFORMS)),
                     envvar="TORCHIMAGES_PLATFORM", help="Only the images of these platforms (an entry's `platforms`)."),
    ]
    return applied(options, function)


def selection_from(values: dict) -> Selection:
    from .build.jobs import Selection

    return Selection(only=tuple(values["only"]), flavors=tuple(values["flavors"]), variants=tuple(values["variants"]),
                     platforms=tuple(values["platforms"]))


plain_option = click.option("--plain", is_flag=True, help="Timestamped lines instead of the live view (every stage).")
logs_option = click.option("--logs", type=click.Path(path_type=Path), callback=output_folder,
                           help="Folder of per-image logs: IMAGE.log, IMAGE.smoke.log, IMAGE.push.log [logs/RELEASE].")
junit_option = click.option("--junit", type=click.Path(path_type=Path), callback=output_folder,
                            help="Folder of JUnit XML files, one per tested image (IMAGE.xml): a testcase per check, "
                                 "for CI systems and test dashboards.")
def audit_options(function: Callable[..., None]) -> Callable[..., None]:
    """The audit's inputs (`audit` and the main job, where it runs after the suite and before any push)."""
    options = [
        click.option("--advisories", metavar="DIR|ZIP|URL", callback=advisory_source, envvar="TORCHIMAGES_ADVISORIES",
                     help="OSV advisories: a folder or a zip of OSV JSON documents (the per-ecosystem exports), or an "
                          "OSV query service (https://api.osv.dev) asked for the images' packages."),
        click.option("--allowlist", type=click.Path(path_type=Path, exists=True, dir_okay=False),
                     envvar="TORCHIMAGES_ALLOWLIST",
                     help="Accepted advisories (vulnerabilities.yaml): id, images and packages globs, reason, expires."),
        click.option("--fail-on", type=click.Choice(SEVERITIES, case_sensitive=False), default="HIGH",
                     show_default=True,
                     help="Fail on an advisory with a published fix at this severity or above (or none given) that no "
                          "entry allows."),
        click.option("--require-audit", is_flag=True, help="Fail, instead of saying 'not checked', without --advisories."),
    ]
    return applied(options, function)


def advisory_source(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A URL (the query service), or a path that exists (a folder or zip, read before the build); empty is none (a CI
    variable that is not set)."""
    if not value:
        return None
    if value.startswith(("https://", "http://")):
        if why := grammar.url_problem(value, "--advisories"):
            raise click.BadParameter(why)
        return value
    if not Path(value).exists():
        raise click.BadParameter(f"{value!r}: no such folder or zip (or give a URL: https://api.osv.dev)")
    return value


def audit_inputs_from(values: dict) -> AuditInputs:
    """The advisories and the allowlist, read and checked now: before a long build, not after it."""
    from .verify.auditstage import AuditInputs

    return AuditInputs.read(values["advisories"], values["allowlist"], fail_on=str(values["fail_on"]),
                            require=bool(values["require_audit"]))


require_gpu_option = click.option("--require-gpu", is_flag=True,
                                  help="Smoke suite: fail, instead of skip, the GPU checks when no GPU is present.")


def report_option(*, exists: bool = False) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """--report: the run's report (every stage adds to it); `exists`: a command that only reads it."""
    return click.option("--report", type=click.Path(path_type=Path, exists=exists, dir_okay=False), callback=output_file,
                        help="The run's report JSON [reports/RELEASE/build-report.json].")


jobs_option = click.option("--jobs", default=1, show_default=True, type=click.IntRange(1, 16),
                           help="Images built at a time (a variant after its base); the main job runs that many smoke "
                                "suites at a time too.")


def build_input_option_list() -> list:
    """What a build reads besides its context: wheels, indexes, mirrors, the CA bundle, the FROM image."""
    return [
        click.option("--wheelhouse", type=click.Path(path_type=Path, file_okay=False), envvar="TORCHIMAGES_WHEELHOUSE",
                     help="Local wheels for pip."),
        click.option("--offline", is_flag=True, envvar="TORCHIMAGES_OFFLINE", help="pip installs only from --wheelhouse."),
        click.option("--pip-index-url", envvar="TORCHIMAGES_PIP_INDEX_URL", help="Package index for pip (a mirror)."),
        click.option("--torch-index-url", envvar="TORCHIMAGES_TORCH_INDEX_URL",
                     help="Replaces the torch wheel index (download.pytorch.org/whl/cuXYZ)."),
        click.option("--apt-mirror", envvar="TORCHIMAGES_APT_MIRROR",
                     help="Replaces scheme and host of every apt source during the build."),
        click.option("--ca-bundle", type=click.Path(path_type=Path, dir_okay=False), envvar="TORCHIMAGES_CA_BUNDLE",
                     help="Extra CA bundle trusted during builds."),
        click.option("--base-image", "base_images", multiple=True, metavar="[PLATFORM=]IMAGE", envvar="TORCHIMAGES_BASE_IMAGE",
                     help="Build the base images FROM this image (a mirrored or locally made base); PLATFORM=IMAGE for "
                          "that platform's only (repeatable: linux/arm64=IMAGE)."),
    ]


def build_input_options(function: Callable[..., None]) -> Callable[..., None]:
    return applied(build_input_option_list(), function)


def build_options(function: Callable[..., None]) -> Callable[..., None]:
    """Options shared by `build` and the default command."""
    options = [
        selection_options,
        click.option("--dry-run", is_flag=True, help="Print the plan (images, tags, order, contexts); touch no engine."),
        jobs_option,
        click.option("--no-cache", is_flag=True, help="Rebuild every step instead of reusing cached layers."),
        click.option("--builder", type=click.Choice(("classic", "buildkit")), default=None,
                     envvar="TORCHIMAGES_BUILDER",
                     help="classic: the Docker SDK; buildkit: BuildKit through a docker CLI (buildx, or a 20.10 client). "
                          "[default: the engine's own: buildkit from Docker 23, classic before]"),
        click.option("--buildx-builder", metavar="NAME", envvar="TORCHIMAGES_BUILDX_BUILDER",
                     help="The buildx builder instance BuildKit builds on (`docker buildx ls`: a docker context's engine, "
                          "a remote or kubernetes BuildKit fleet); the image is loaded into DOCKER_HOST's engine. "
                          "[default: buildx's current builder]"),
        click.option("--compression", type=click.Choice(("gzip", "zstd")), default="gzip", show_default=True,
                     envvar="TORCHIMAGES_COMPRESSION",
                     help="The layers' compression. zstd: BuildKit (buildx) on an engine with the containerd image "
                          "store compresses each layer as it builds it, and the push sends those; pulling them needs "
                          "Docker 23.0 or later, which the release manifest records for `fit --docker`."),
        plain_option,
        report_option(),
        logs_option,
        *build_input_option_list(),
        require_gpu_option,
        click.option("--previous", "previous_manifest", type=click.Path(path_type=Path, dir_okay=False, exists=True),
                     envvar="TORCHIMAGES_PREVIOUS",
                     help="The previous release's manifest: each image may grow at most --max-growth over it."),
        click.option("--max-growth", default="5%", show_default=True,
                     help="Size budget over the previous release, unless the entry states size_growth_reason."),
        click.option("--from-release", "from_release", type=click.Path(path_type=Path, dir_okay=False, exists=True),
                     metavar="MANIFEST",
                     help="Rebuild a release: each base image FROM the image it was built from, every pip step from the "
                          "release's wheel lock in hash-checking mode; a locked wheel no source serves is refused first."),
        click.option("--cache-from", multiple=True, metavar="REF", envvar="TORCHIMAGES_CACHE_FROM",
                     help="Pull REF and reuse its layers (repeatable); `previous`: reuse the --previous release's "
                          "images whose content is unchanged."),
        *push_option_list(),
    ]
    return applied(options, function)


def push_option_list(*, with_flag: bool = True, with_candidate: bool = True) -> list:
    flag = [click.option("--push", is_flag=True, help="Push every image whose smoke suite passed in this run.")]
    candidate = [click.option("--candidate", metavar="ID",
                              help="Push under candidate tags RELEASE-ID-IMAGE (e.g. rc.42); `promote` makes them the "
                                   "release tags once every image of the release passed.")]
    return [
        *(flag if with_flag else []),
        *(candidate if with_candidate else []),
        click.option("--registry", "push_registry", help="Push target HOST[:PORT]/PATH (default: the matrix's registry)."),
        click.option("--registry-user", help="Log in as this user (default: the docker config's credentials)."),
        click.option("--password-env", default="TORCHIMAGES_REGISTRY_PASSWORD", show_default=True,
                     help="Environment variable holding the password for --registry-user."),
        click.option("--password-stdin", is_flag=True, help="Read the password for --registry-user from standard input."),
        # exists: the HTTPS client opens it only at the first request, where a missing file is an OSError
        click.option("--registry-ca", type=click.Path(path_type=Path, dir_okay=False, exists=True),
                     help="CA of the registry's TLS certificate [/etc/docker/certs.d/HOST/ca.crt if present]."),
        click.option("--force", is_flag=True, help="Move a release tag that already points at another image."),
        click.option("--manifest", "manifest_path", type=click.Path(path_type=Path), callback=output_file,
                     help="Release manifest JSON [releases/RELEASE.json]."),
        click.option("--sign-key", type=click.Path(path_type=Path, dir_okay=False), envvar="TORCHIMAGES_SIGN_KEY",
                     help="ECDSA P-256 private key (PKCS#8 PEM, build.py keygen): push attests each image (SBOM, "
                          "provenance, smoke results), promote verifies them and signs every release tag."),
        click.option("--sign-password-stdin", is_flag=True,
                     help="Read the --sign-key passphrase from standard input (else TORCHIMAGES_SIGN_PASSWORD)."),
    ]


def push_options(function: Callable[..., None]) -> Callable[..., None]:
    return applied(push_option_list(with_flag=False), function)


def registry_options(function: Callable[..., None]) -> Callable[..., None]:
    """The push options without --candidate: where, as whom, --force and the manifest to write (promote)."""
    return applied(push_option_list(with_flag=False, with_candidate=False), function)


def push_options_if_asked(plan: Plan, values: dict, release: str) -> PushOptions | None:
    """The main job's push options, checked (before a long build); None without --push, which --candidate needs."""
    if not values["push"]:
        if values["candidate"]:
            raise click.UsageError("--candidate needs --push")
        return None
    options = push_options_from(plan, values, release)
    options.check()
    return options


def push_options_from(plan: Plan, values: dict, release: str | None = None) -> PushOptions:
    from .publish.pushstage import PushOptions

    candidate = values.get("candidate")
    pushed = Release(release, candidate) if release else None
    if candidate is not None and (pushed is None or pushed.problem()):
        raise UserError(f"--candidate {candidate!r} does not make a valid tag after {release}-: use letters, digits, "
                        "'.', '_' and '-', e.g. rc.42")
    if pushed is not None and candidate is not None:
        planning.check_tag_lengths(plan, pushed.name, "--candidate")
    options = PushOptions(repository=values["push_registry"] or plan.registry, registry_user=values["registry_user"],
                          password_env=values["password_env"], password_stdin=values["password_stdin"],
                          registry_ca=values["registry_ca"], force=values["force"], manifest_path=values["manifest_path"],
                          release=pushed, sign_key=values.get("sign_key"),
                          sign_password_stdin=bool(values.get("sign_password_stdin")))
    options.check()
    return replace(options, key=signing_key_of(options))


def signing_key_of(options: PushOptions) -> SigningKey | None:
    """The --sign-key, loaded once per command (its passphrase may come on stdin), before anything is built or sent."""
    if options.sign_key is None:
        return None
    context = click.get_current_context(silent=True)
    cached = context.meta.get("signing_key") if context else None
    if cached is None:
        cached = options.signing_key()
        if context:
            context.meta["signing_key"] = cached
    return cached


def build_options_from(release: str, images_dir: Path, values: dict, *, repository: str) -> BuildOptions:
    """`repository`: where this release's images go; `--cache-from previous` reuses images from there only."""
    from .build.stage import BuildOptions

    inputs = build_inputs_from(values)
    from . import manifest

    previous = manifest.read(values["previous_manifest"]) if values["previous_manifest"] else None
    return BuildOptions(release=release, images_dir=images_dir, selection=selection_from(values), jobs=values["jobs"],
                        no_cache=values["no_cache"], plain=values["plain"], report=values["report"], logs=values["logs"],
                        inputs=inputs, budget=budget_from(values, previous), builder=values["builder"],
                        buildx_builder=values["buildx_builder"], compression=values.get("compression") or "gzip",
                        released=released_from(values.get("from_release")),
                        cache=cache_sources_from(tuple(values["cache_from"]), previous, repository,
                                                 no_cache=bool(values["no_cache"])))


def build_inputs_from(values: dict) -> BuildInputs:
    """The build inputs, checked before anything is rendered, planned or built."""
    plain, per_platform = base_images_from(tuple(values["base_images"]))
    inputs = BuildInputs(pip_index_url=values["pip_index_url"], torch_index_url=values["torch_index_url"],
                         apt_mirror=values["apt_mirror"], ca_bundle=values["ca_bundle"], wheelhouse=values["wheelhouse"],
                         offline=values["offline"], base_image=plain, platform_bases=per_platform)
    inputs.check()
    return inputs


def released_from(path: Path | None) -> FromRelease | None:
    """--from-release MANIFEST: the release and its lock assets, read and checked before anything is built."""
    if path is None:
        return None
    from .build.released import FromRelease

    return FromRelease.read(path)


def base_images_from(values: tuple[str, ...]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """--base-image values: the plain IMAGE (at most one: every platform's base) and PLATFORM=IMAGE pairs (one per
    platform). An image reference never holds '=', so the form is unambiguous. An empty IMAGE is refused: it would
    leave that platform on the matrix's base without a word."""
    plain = [value for value in values if "=" not in value]
    pairs = [tuple(value.split("=", 1)) for value in values if "=" in value]
    for value in values:
        if not value.split("=", 1)[-1].strip():  # the IMAGE of either form
            raise UserError(f"--base-image {value!r}: no image given; give IMAGE or PLATFORM=IMAGE, e.g. "
                            "linux/arm64=torchimages/debian:bookworm-minbase-arm64")
    if len(plain) > 1:
        raise UserError(f"--base-image given {len(plain)} times without a platform ({', '.join(plain[:3])}): give one "
                        "plain IMAGE, and PLATFORM=IMAGE for each platform that builds FROM another")
    for platform, _image in pairs:
        if platform not in PLATFORMS:
            raise UserError(f"--base-image {platform}=...: {platform!r} is not a platform: {', '.join(PLATFORMS)}")
    platforms = [platform for platform, _image in pairs]
    if twice := sorted({p for p in platforms if platforms.count(p) > 1}):
        raise UserError(f"--base-image {twice[0]}=... given twice: one base image per platform")
    return (plain[0] if plain else None), tuple((platform, image) for platform, image in pairs)


def budget_from(values: dict, previous: ReleaseManifest | None) -> Budget:
    from .build.budget import Budget, parse_growth

    try:
        growth = parse_growth(str(values["max_growth"]))
    except ValueError:
        raise UserError(f"--max-growth {values['max_growth']!r} is not a growth: a percent from 0% to 1000% (5%) or "
                        "a share from 0 to 1 (0.05); a bare number above 1 is refused, it could mean either") from None
    return Budget(max_growth=growth, previous=previous)


def cache_sources_from(values: tuple[str, ...], previous: ReleaseManifest | None, repository: str, *,
                       no_cache: bool) -> CacheSources:
    from .build.cache import PREVIOUS, CacheSources

    if values and no_cache:
        raise UserError("--cache-from and --no-cache contradict each other: --no-cache rebuilds every step")
    for value in values:
        if value != PREVIOUS and (why := grammar.control_problem(value) or grammar.image_reference_problem(value)):
            raise UserError(f"--cache-from {value}: {why}")
    return CacheSources.parse(values, previous, repository)
