"""Command line: each command parses its options (declared in options.py) and hands them to a stage."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .consoles import err, out
from .errors import UserError
from .input.grammar import since_version_problem
from .input.lock import LockFile
from .input.lock import stale as stale_pins
from .options import (
    audit_inputs_from,
    audit_options,
    build_input_options,
    build_inputs_from,
    build_options,
    build_options_from,
    images_option,
    junit_option,
    load_plan,
    logs_option,
    matrix_option,
    output_file,
    output_folder,
    plain_option,
    push_options,
    push_options_from,
    push_options_if_asked,
    registry_options,
    report_option,
    require_gpu_option,
    selection_from,
    selection_options,
    tag_option,
)
from .settings import ROOT_ENV, SETTINGS, is_checkout
from .verify import selfcheck as selfcheck_stage
from .workspace import Workspace

if TYPE_CHECKING:  # the build stage's modules load when a command runs (the note below)
    from .build.jobs import BuildJob
    from .input.specs import Plan

# The stages that talk to the engine (build, smoke, bench, push) import the Docker SDK, which costs more than the
# rest of the tool together: commands import them when they run, so validate, render and matrix answer at once.


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@matrix_option
@tag_option("Release tag that names this set of images, e.g. v2.7.")
@images_option("--images", "images_dir", "Where to render the build contexts")
@build_options
@audit_options
@junit_option
@click.pass_context
def main(ctx: click.Context, matrix_path: Path, release: str | None, images_dir: Path | None, dry_run: bool,
         **values: object) -> None:
    """Turn matrix.yaml into proven PyTorch + CUDA + cuDNN images.

    Without a command: validate the matrix, render every build context into images/ and build
    every image (the smoke suite and publishing are later stages).
    """
    if ctx.invoked_subcommand is not None:
        return
    from . import release as release_stages

    if not release:
        raise click.UsageError("--tag is required, e.g. --tag v2.7")
    plan = load_plan(matrix_path)
    images_dir = Workspace(matrix_path).images(images_dir)
    options = build_options_from(release, images_dir, values, repository=str(values["push_registry"] or plan.registry))
    push = push_options_if_asked(plan, values, release)  # checked before a long build, not after it
    audited = audit_inputs_from(values)  # read before the build: a bad advisory file is refused now
    if dry_run:
        release_stages.print_plan(plan, options)
        return
    sys.exit(release_stages.run(plan, options, push=push, require_gpu=bool(values["require_gpu"]),
                                junit=values["junit"], audited=audited))  # type: ignore[arg-type]


@main.command()
@matrix_option
@tag_option("Release tag, e.g. v2.7.", required=True)
@images_option("--images", "images_dir", "Rendered contexts to build")
@build_options
def build(matrix_path: Path, release: str, images_dir: Path | None, dry_run: bool, **values: object) -> None:
    """Build the rendered images (bases first, each variant FROM its base)."""
    from . import release as release_stages

    plan = load_plan(matrix_path)
    images_dir = Workspace(matrix_path).images(images_dir)
    options = build_options_from(release, images_dir, values, repository=str(values["push_registry"] or plan.registry))
    if dry_run:
        release_stages.print_plan(plan, options)
        return
    # cache sources on --registry are pulled as --registry-user
    pulling = push_options_from(plan, values, release) if values["registry_user"] and options.cache.used else None
    sys.exit(release_stages.build_rendered(plan, options, pulling=pulling))


@main.command()
@matrix_option
@tag_option("Release tag of the tested images, e.g. v2.7.", required=True)
@report_option(exists=True)
@push_options
@plain_option
@logs_option
def push(matrix_path: Path, release: str, report: Path | None, plain: bool, logs: Path | None, **values: object) -> None:
    """Push the images of a run's report whose smoke suite passed; write the release manifest."""
    from . import release as release_stages

    plan = load_plan(matrix_path, quiet=True)
    options = push_options_from(plan, values, release)
    sys.exit(release_stages.push_tested(release, Workspace.report(release, report), options, plain=plain,
                                        logs=Workspace.logs(release, logs), indexed=plan.indexed_images()))


@main.command()
@matrix_option
@tag_option("Release tag to promote, e.g. v2.7.", required=True)
@click.option("--candidates", "candidates_path", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              required=True, help="The candidate manifest: build.py manifest over the per-entry reports.")
@registry_options
@plain_option
@logs_option
def promote(matrix_path: Path, release: str, candidates_path: Path, plain: bool, logs: Path | None,
            **values: object) -> None:
    """Point every release tag at its tested candidate's digest (manifest PUT), only when every image passed."""
    from . import release as release_stages
    from .publish import promotestage

    plan = load_plan(matrix_path, quiet=True)
    options = push_options_from(plan, values)
    candidates, release_path = promotestage.checked_candidates(candidates_path, release, options)
    with release_stages.shown(plain, Workspace.logs(release, logs)) as (emit, _):
        code = promotestage.run(plan, candidates, release_path, options, emit)
    sys.exit(code)


@main.command()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, callback=output_folder,
              help="Folder for cosign.key (mode 0600) and cosign.pub; neither is ever replaced.")
@click.option("--password-stdin", "password_stdin", is_flag=True,
              help="Encrypt the private key with a passphrase read from standard input (else TORCHIMAGES_SIGN_PASSWORD, "
                   "else unencrypted).")
def keygen(out_dir: Path, password_stdin: bool) -> None:
    """Make an ECDSA P-256 key pair for --sign-key (the private key) and verify --key (the public key)."""
    import os

    from .publish import signing

    passphrase = sys.stdin.readline().rstrip("\r\n") if password_stdin else os.environ.get(signing.PASSWORD_ENV, "")
    private, public = signing.keygen(out_dir, passphrase.encode() or None)
    key = signing.load_public_key(public)
    out.print(f"{private} (private, {'encrypted' if passphrase else 'not encrypted'}), {public}: key {key.fingerprint}")


@main.command()
@click.argument("reference")
@click.option("--key", "key_path", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The release's public key (cosign.pub; the release manifest names its fingerprint).")
@click.option("--platform", "platform_name", help="Follow an image index to this platform's image (linux/arm64).")
@click.option("--registry-user", help="Log in as this user (default: the docker config's credentials).")
@click.option("--password-env", default="TORCHIMAGES_REGISTRY_PASSWORD", show_default=True,
              help="Environment variable holding the password for --registry-user.")
@click.option("--password-stdin", is_flag=True, help="Read the password for --registry-user from standard input.")
@click.option("--registry-ca", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="CA of the registry's TLS certificate [/etc/docker/certs.d/HOST/ca.crt if present].")
def verify(reference: str, key_path: Path, platform_name: str | None, **registry: object) -> None:
    """Check REFERENCE's signature and attestations with the key; print what they say. Exit 1 when it is not signed,
    tampered or signed with another key."""
    from .publish import signing, verification
    from .publish.pushstage import PushOptions
    from .registry import registry_client

    parsed = verification.parse_reference(reference)
    verification.check_platform(platform_name)
    public = signing.load_public_key(key_path)
    ca = registry["registry_ca"] if isinstance(registry["registry_ca"], Path) else None
    options = PushOptions(parsed.repository, registry_user=registry["registry_user"],  # type: ignore[arg-type]
                          password_env=str(registry["password_env"]), password_stdin=bool(registry["password_stdin"]),
                          registry_ca=ca)
    client = registry_client(parsed.host, options.credentials(), ca)
    verdict = verification.Verifier(client, parsed, public).run(platform_name)
    for line in verdict.lines:
        out.print(line, markup=False, highlight=False)
    for problem in verdict.problems:
        err.print(f"not verified: {problem}", markup=False, highlight=False)
    if verdict.valid:
        out.print(f"verified: {parsed}", markup=False, highlight=False)
    sys.exit(0 if verdict.valid else 1)


@main.command(name="diff")
@click.argument("old_manifest", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("new_manifest", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True)
def release_diff(old_manifest: Path, new_manifest: Path, fmt: str) -> None:
    """What changed between two releases, per image: versions, Debian and Python packages, size, smoke results."""
    from .publish import diff as releasediff

    old, new = releasediff.load(old_manifest), releasediff.load(new_manifest)
    diffs = releasediff.diff(old, new)
    text = releasediff.markdown(old, new, diffs) if fmt == "markdown" else releasediff.as_json(old, new, diffs)
    out.print(text, end="", markup=False, highlight=False)


@main.command(name="manifest")
@click.option("--registry", "repository", required=True, help="The repository the images were pushed to.")
@click.option("--out", "out_path", type=click.Path(path_type=Path), required=True, callback=output_file,
              help="Manifest JSON to write.")
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False))
def merge_manifest(repository: str, out_path: Path, reports: tuple[Path, ...]) -> None:
    """Merge the reports of separate per-image runs into one release manifest."""
    from . import manifest
    from .publish import push as publish
    from .publish.pushstage import check_repository
    from .report import Report

    check_repository(repository)
    made = publish.manifest([Report.load(p) for p in reports], repository)
    json_path, markdown_path = manifest.write(made, out_path, "--out")
    out.print(f"release manifest: {json_path} ({markdown_path.name}): {len(made.images)} images")


def named_jobs(plan: Plan, release: str, matrix_path: Path, values: dict) -> list[BuildJob]:
    """The built images the selection names (test, audit): a variant's base, brought along for a build, only when
    named too."""
    from .build import jobs as buildjobs

    selection = selection_from(values)
    return [job for job in buildjobs.select(plan, release, Workspace(matrix_path).images(), selection)
            if selection.matches(job.name, job.image)]


@main.command(name="test")
@matrix_option
@tag_option("Release tag of the built images, e.g. v2.7.", required=True)
@selection_options
@require_gpu_option
@report_option()
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(1, 16),
              help="Images whose suites run at a time, each in containers of its own.")
@plain_option
@logs_option
@junit_option
def smoke_test(*, matrix_path: Path, release: str, require_gpu: bool, report: Path | None, jobs: int, plain: bool,
               logs: Path | None, junit: Path | None, **values: object) -> None:
    """Run the smoke suite in each built image (containers started as users run them)."""
    from . import release as release_stages

    plan = load_plan(matrix_path, quiet=True)
    targets = named_jobs(plan, release, matrix_path, values)
    sys.exit(release_stages.test_built(plan, release, targets, Workspace.report(release, report),
                                       require_gpu=require_gpu, plain=plain, logs=Workspace.logs(release, logs),
                                       parallel=jobs, junit=junit))


@main.command(name="audit")
@matrix_option
@tag_option("Release tag of the built images, e.g. v2.7.", required=True)
@selection_options
@audit_options
@report_option()
@click.option("--out", "out_file", type=click.Path(path_type=Path, dir_okay=False), callback=output_file,
              help="The results as JSON, a Markdown table beside it [reports/RELEASE/audit/build-report.json].")
def audit_command(*, matrix_path: Path, release: str, report: Path | None, out_file: Path | None,
                  **values: object) -> None:
    """Match each built image's Python and Debian packages against OSV advisories; fail on a fixable one not allowed.
    Each result is recorded in the release's report, where one is: push pushes nothing while an audit failed."""
    import datetime

    from . import release as release_stages
    from .report import Report
    from .verify import auditstage

    plan = load_plan(matrix_path, quiet=True)
    jobs = named_jobs(plan, release, matrix_path, values)
    inputs = audit_inputs_from(values)
    report_path = Workspace.report(release, report)
    run_report = Report.load(report_path) if report_path.exists() else None
    if run_report is not None and run_report.release != release:
        raise UserError(f"{report_path} is the report of release {run_report.release}, not {release}: give --report "
                        f"the report of {release}")
    passed = auditstage.run({job.image: job.tag for job in jobs}, inputs, report=run_report,
                            out=out_file or auditstage.results_path(report_path), today=datetime.date.today(),
                            say=release_stages.say)
    if run_report is not None:
        run_report.write(report_path)
        out.print(f"report: {report_path}", highlight=False, markup=False)
    sys.exit(0 if passed else 1)


@main.command(name="bench")
@matrix_option
@tag_option("Release tag of the built images, e.g. v2.7 (not with --local).")
@selection_options
@click.option("--local", is_flag=True, help="Measure this host's own Python instead of images.")
@click.option("--seconds", default=2.0, show_default=True, help="Measuring time per case.")
@click.option("--min-amp-speedup", type=float, help="Exit 1 unless AMP fp16 is at least this many times faster.")
@report_option()
def bench_command(*, matrix_path: Path, release: str | None, local: bool, seconds: float,
                  min_amp_speedup: float | None, report: Path | None, **values: object) -> None:
    """Training throughput: cudnn.benchmark off/on, fp32 vs AMP fp16/bf16, TF32 off/on (default: the base images)."""
    from .verify import bench, benchstage

    if local:
        results = {"local": bench.local(seconds)}
    elif not release:
        raise click.UsageError("--tag is required (or --local)")
    else:
        plan = load_plan(matrix_path, quiet=True)
        results = benchstage.in_images(plan, release, Workspace(matrix_path), selection=selection_from(values),
                                       seconds=seconds, report=report)
    sys.exit(benchstage.shown(results, min_amp_speedup))


@main.command()
@click.option("--python", "python", default=sys.executable, show_default=True,
              help="The interpreter that has torch; pytest runs in this one.")
@require_gpu_option
@junit_option
def selfcheck(python: str, require_gpu: bool, junit: Path | None) -> None:
    """The suite's GPU and compute checks against this host's torch (a GPU machine without Docker)."""
    sys.exit(selfcheck_stage.main(["--python", python, *(["--require-gpu"] if require_gpu else []),
                                   *(["--junit", str(junit)] if junit else [])]))


@main.command()
@matrix_option
def validate(matrix_path: Path) -> None:
    """Check the matrix against the compatibility data; exit 2 on any problem."""
    plan = load_plan(matrix_path)
    images = sum(len(spec.platform_images()) for spec in plan.specs)
    out.print(f"{matrix_path}: valid: {len(plan.specs)} entries, {images} images")


@main.command()
@matrix_option
@tag_option("Release tag (default: the tag the folder was rendered with, as rendered.json records).")
@images_option("--out", "out_dir", "Where to write the contexts")
@click.option("--check", is_flag=True, help="Exit 1 if the rendered contexts under --out are stale.")
def render(matrix_path: Path, release: str | None, out_dir: Path | None, check: bool) -> None:
    """Write each image's build context (Dockerfile plus the files it copies)."""
    from .build import render as render_stage

    out_dir = Workspace(matrix_path).images(out_dir)
    release = release or render_stage.rendered_release(out_dir)
    if not release:
        raise click.UsageError("--tag is required, e.g. --tag v2.7")
    plan = load_plan(matrix_path, quiet=check)
    if check:
        lock = LockFile.load(Workspace(matrix_path).lock)
        sys.exit(render_stage.check_current(plan, release, out_dir, stale_pins(plan, lock) if lock.pins else []))
    written = render_stage.write(plan, release, out_dir)
    contexts = {path.parent for path in written}
    out.print(f"rendered {len(contexts)} build contexts ({len(written)} Dockerfiles: classic, and BuildKit where a stage "
              f"installs packages) under {out_dir} for release {release}")


@main.group(name="compat")
def compat_group() -> None:
    """The compatibility data (torchimages/data/compat.yaml) and the package indexes it follows."""


@compat_group.command(name="refresh")
@click.option("--since", default="2.0", show_default=True, help="The oldest torch release to read.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when the data is behind the indexes.")
@click.option("--pypi-index", default="https://pypi.org/simple/torch/", show_default=True,
              envvar="TORCHIMAGES_PYPI_INDEX", help="PyPI's simple page of torch (a mirror's works).")
@click.option("--wheel-index", default="https://download.pytorch.org/whl", show_default=True,
              envvar="TORCHIMAGES_WHEEL_INDEX", help="The PyTorch wheel indexes' root (/cuXYZ/torch/ below it).")
@click.option("--skip-wheel-index", is_flag=True, help="Read PyPI alone (where the wheel indexes cannot be reached).")
def compat_refresh(since: str, check: bool, pypi_index: str, wheel_index: str, skip_wheel_index: bool) -> None:
    """Read torch's releases, Python wheels, CUDA builds and pins from the indexes; rewrite the data; print the diff."""
    from .input import refresh as compatrefresh

    if why := since_version_problem(since):
        raise UserError(f"--since {why}")
    result = compatrefresh.run(since=since, check=check, pypi_index=pypi_index,
                               wheel_index=None if skip_wheel_index else wheel_index)
    sys.exit(compatrefresh.shown(result, check=check))


def wheel_source_options(function: Callable[..., None]) -> Callable[..., None]:
    """Where `wheels check` and `wheels fetch` look for a locked wheel (wheel_sources), as a build's options name them."""
    options = [
        click.option("--wheelhouse", "wheelhouses", multiple=True,
                     type=click.Path(path_type=Path, file_okay=False, exists=True), envvar="TORCHIMAGES_WHEELHOUSE",
                     help="A folder of wheels, looked in first (repeatable)."),
        click.option("--offline", is_flag=True, envvar="TORCHIMAGES_OFFLINE", help="Look in the wheelhouses only."),
        click.option("--pip-index-url", envvar="TORCHIMAGES_PIP_INDEX_URL", help="Package index (a mirror) [default: PyPI]."),
        click.option("--torch-index-url", envvar="TORCHIMAGES_TORCH_INDEX_URL",
                     help="The torch wheel index [default: the PyTorch index each locked torch wheel came from]."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@main.group(name="wheels")
def wheels_group() -> None:
    """The wheel lock: the wheels an image was installed from, each by file and sha256 (torchimages/wheellock.py)."""


@wheels_group.command(name="lock")
@click.option("--out", "out_path", type=click.Path(path_type=Path), callback=output_file,
              help="The lock to write [default: standard output].")
@click.option("--image", metavar="REF", help="A local image built by this tool: the reports its pip steps kept.")
@click.argument("reports", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
def wheels_lock(out_path: Path | None, image: str | None, reports: tuple[Path, ...]) -> None:
    """Write the lock of pip installation reports (`pip install --report FILE`), or of an image (--image), in pip's
    --require-hashes format."""
    from . import files, wheellock

    if bool(image) == bool(reports):
        raise click.UsageError("give either pip report files or --image REF")
    if image:
        wheels = image_wheels(image)
    else:
        wheels = wheellock.merged([wheellock.from_pip_report(files.load(path, "a pip installation report"), str(path))
                                   for path in reports], one_environment=True)
    text = wheellock.lock_text(wheels)
    if out_path is None:
        out.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        return
    files.atomic_write(out_path, text)
    err.print(f"{out_path}: {len(wheels)} wheels locked")


@wheels_group.command(name="fetch")
@click.argument("locks", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False),
                metavar="LOCK_OR_MANIFEST...")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), callback=output_folder,
              help="The wheelhouse to fill (made if missing; a file already there with the locked sha256 is kept).")
@wheel_source_options
def wheels_fetch(*, locks: tuple[Path, ...], out_dir: Path, wheelhouses: tuple[Path, ...], offline: bool,
                 pip_index_url: str | None, torch_index_url: str | None) -> None:
    """Fill a wheelhouse with exactly the locked wheels, each checked by its sha256, so a release's wheels can be
    archived and a later build run offline from them (--wheelhouse DIR --offline). Exit 1 naming each not fetched."""
    from . import wheellock

    wheels = wheellock.merged([lock for path in locks for lock in locks_in(path)])
    sources = wheel_sources(wheels, wheelhouses, offline, pip_index_url, torch_index_url)
    present, missing = wheellock.fill(wheels, sources, out_dir)
    for line in missing:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    out.print(f"{out_dir}: {present} of {len(wheels)} locked wheels, each checked by its sha256", markup=False,
              highlight=False, soft_wrap=True)
    sys.exit(1 if missing else 0)


def wheel_sources(wheels: list, wheelhouses: tuple[Path, ...], offline: bool, pip_index_url: str | None,
                  torch_index_url: str | None) -> list:
    """Where `wheels check` and `wheels fetch` look: the wheelhouses, then (unless offline) the indexes."""
    from . import wheellock
    from .input.grammar import url_problem
    from .input.indexes import http_fetch

    for option, value in (("--pip-index-url", pip_index_url), ("--torch-index-url", torch_index_url)):
        if value and (why := url_problem(value, option)):
            raise UserError(why)
    if offline and not wheelhouses:
        raise UserError("--offline looks in the wheelhouses only: give at least one --wheelhouse")
    indexes = [] if offline else wheellock.default_indexes(wheels, pip_index_url, torch_index_url, http_fetch(timeout=60))
    return [*map(wheellock.Wheelhouse, wheelhouses), *indexes]


def locks_in(path: Path) -> list[list]:
    """The locks a file holds: a lock (text), or a release or candidates' manifest (.json: each image's lock asset)."""
    from . import manifest, wheellock

    if path.suffix != ".json":
        return [wheellock.read_lock(path)]
    made = manifest.read(path)
    locks = [[wheellock.parse_line(line) for line in item.wheels] for item in made.images if item.wheels]
    if not locks:
        raise UserError(f"{path}: no image of this manifest records a wheel lock (released before locks were kept?)")
    return locks


def image_wheels(image: str) -> list:
    from . import wheellock
    from .engine import Engine

    archive = Engine().folder_archive(image, wheellock.REPORTS)
    if archive is None:
        raise UserError(f"--image {image}: the image holds no {wheellock.REPORTS}: pip installed nothing in it, or "
                        "it was built by a version of this tool that kept no wheel reports")
    return wheellock.from_image_folder(archive, image)


@wheels_group.command(name="check")
@click.argument("locks", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False),
                metavar="LOCK_OR_MANIFEST...")
@wheel_source_options
def wheels_check(locks: tuple[Path, ...], wheelhouses: tuple[Path, ...], offline: bool, pip_index_url: str | None,
                 torch_index_url: str | None) -> None:
    """Is every locked wheel still served, with its sha256, by a wheelhouse or an index? Exit 1 naming each that is
    not (a rebuild from the lock would fail there), before anything is built."""
    from . import wheellock

    wheels = wheellock.merged([lock for path in locks for lock in locks_in(path)])
    sources = wheel_sources(wheels, wheelhouses, offline, pip_index_url, torch_index_url)
    missing = wheellock.unserved(wheels, sources)
    for line in missing:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    out.print(f"{len(wheels) - len(missing)} of {len(wheels)} locked wheels served by: "
              f"{', '.join(map(str, sources))}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(1 if missing else 0)


@main.command(name="lock")
@matrix_option
@click.option("--refresh", is_flag=True, help="Resolve every tag again and move the pins that changed.")
def lock_command(matrix_path: Path, refresh: bool) -> None:
    """Pin each base image tag of the matrix to its digest (matrix.yaml -> matrix.lock) through the registry API."""
    from .input import lock

    plan = load_plan(matrix_path, quiet=True)
    lock_file = LockFile.load(Workspace(matrix_path).lock)
    changes = lock.update(plan, lock_file, lock.registry_resolver(), refresh=refresh)
    for change in changes:
        out.print(change.line())
    if changes or not lock_file.path.exists():
        lock_file.write()
    out.print(f"{lock_file.path}: {len(lock_file.pins)} base images pinned, {len(changes)} changed")


@main.command(name="bake")
@matrix_option
@tag_option("Release tag of the images, e.g. v2.7.", required=True)
@images_option("--images", "images_dir", "Rendered contexts to describe")
@selection_options
@build_input_options
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, callback=output_folder,
              help="Folder for docker-bake.json, the staged contexts and the secret files (mode 0600).")
def bake_command(*, matrix_path: Path, release: str, images_dir: Path | None, out_dir: Path, **values: object) -> None:
    """Write a docker buildx bake file of the rendered images: a target per image given what `build --builder
    buildkit` gives its build, a group per entry."""
    write_bake(matrix_path, release, images_dir, out_dir, values)


def write_bake(matrix_path: Path, release: str, images_dir: Path | None, out_dir: Path, values: dict) -> None:
    """`bake`, and `matrix --format bake`: the file written, what to run printed."""
    from . import release as release_stages

    plan = load_plan(matrix_path, quiet=True)
    images = Workspace(matrix_path).images(images_dir)
    path, data = release_stages.bake_rendered(plan, release, images, selection=selection_from(values),
                                              inputs=build_inputs_from(values), out=out_dir)
    first = "" if len(data["group"]["bases"]["targets"]) == len(data["target"]) else \
        f"docker buildx bake -f {path} bases && "  # each variant's FROM is its base's tag
    out.print(f"bake file: {path}: {len(data['target'])} targets in {len(data['group']) - 2} entries; build them: {first}"
              f"docker buildx bake -f {path}", highlight=False, markup=False)


@main.command(name="matrix")
@matrix_option
@tag_option("Release tag used in image tags (default: the rendered one, or 'dev').")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github", "bake"]), default="table",
              show_default=True, help="bake: a docker buildx bake file of every image, written to --out (as `bake`).")
@click.option("--per", type=click.Choice(["image", "entry"]), default="image", show_default=True,
              help="One row per image, or per matrix entry (its base image with its variants).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), callback=output_folder,
              help="--format bake: the folder for docker-bake.json, the staged contexts and the secret files.")
@build_input_options
def list_matrix(matrix_path: Path, release: str | None, fmt: str, per: str, out_dir: Path | None,
                **values: object) -> None:
    """List the expanded images: name, variant, tag, flavor and versions (or, --format bake, write them as a bake
    file with the build inputs given)."""
    from .build import render as render_stage
    from .input import listing

    workspace = Workspace(matrix_path)
    release = release or render_stage.rendered_release(workspace.images()) or "dev"
    if fmt == "bake":
        if out_dir is None:
            raise click.UsageError("--format bake writes a folder (the bake file, the staged contexts): give --out DIR")
        write_bake(matrix_path, release, None, out_dir, {**values, "only": (), "flavors": (), "variants": (),
                                                         "platforms": ()})
        return
    plan = load_plan(matrix_path, quiet=fmt != "table")
    rows = listing.image_rows(plan, release, workspace, per=per)
    if fmt == "github":
        click.echo(json.dumps({"include": rows}, separators=(",", ":")))
    elif fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    else:
        out.print(listing.rows_table(rows))


@main.command()
@matrix_option
@click.option("--driver", help="The host's NVIDIA driver, e.g. 535.104.05 (default: nvidia-smi's here).")
@click.option("--gpu", help="The GPU: a compute capability (8.9) or a name the compat data knows (L4, H100, GB10); "
                            "default: nvidia-smi's first GPU here.")
@click.option("--platform", "platform_name", help="linux/amd64 or linux/arm64 (default: this machine's).")
@click.option("--manifest", "manifest_path", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A release manifest (releases/v2.7.json, a release's asset): its tags instead of the matrix's entries.")
@click.option("--docker", help="The host's Docker engine version (`docker version`, the server's): checked against what a "
                               "release's images need to pull (zstd layers: 23.0).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def fit(*, matrix_path: Path, driver: str | None, gpu: str | None, platform_name: str | None,
        manifest_path: Path | None, docker: str | None, fmt: str) -> None:
    """Which images run on a host (driver, GPU, platform), and why each other one does not: exit 0 when a CUDA image
    runs, 1 when none does."""
    from . import manifest
    from .verify import fit as host_fit

    host = host_fit.host_from(driver, gpu, platform_name, docker)
    if manifest_path:
        found, source = host_fit.manifest_fits(manifest.read(manifest_path), host), str(manifest_path)
    else:
        found, source = host_fit.fits(load_plan(matrix_path, quiet=True), host), str(matrix_path)
    if fmt == "json":
        click.echo(json.dumps({"host": host.as_json(), "images": [f.as_json() for f in found]}, indent=2))
    else:
        out.print(host_fit.render_text(found, host, source), markup=False, highlight=False)
    sys.exit(host_fit.exit_code(found))


def run() -> None:
    """Entry point: user errors exit 2 with their messages, never a traceback."""
    try:
        if not is_checkout(SETTINGS.root) and not {"-h", "--help"} & set(sys.argv[1:]):
            raise UserError(f"{SETTINGS.root} is not a torchimages checkout (no templates/Dockerfile.j2 and tests/smoke): "
                            f"run torchimages in the project's checkout, or set {ROOT_ENV} to it")
        main.main(standalone_mode=False)
    except UserError as exc:
        for problem in exc.problems:
            err.print(f"error: {problem}")
        if exc.detail:
            err.print(exc.detail)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        # click turns Ctrl-C (and our SIGTERM handler's KeyboardInterrupt) into Abort
        err.print("interrupted: running builds were stopped; no tag points at an unfinished image")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
