"""Command line: validate, render and list the matrix (build, test and publish follow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from . import matrix as matrix_stage
from . import render as render_stage
from .errors import UserError
from .specs import Plan, resolve

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 240)
matrix_option = click.option("--matrix", "matrix_path", type=click.Path(path_type=Path), default=Path("matrix.yaml"),
                             show_default=True, help="The matrix file.")


def load_plan(path: Path, quiet: bool = False) -> Plan:
    """Validate the matrix fully (shape, then compatibility) and print its warnings."""
    plan = resolve(matrix_stage.load(path))
    if not quiet:
        for spec in plan.specs:
            for warning in spec.warnings:
                err.print(f"warning: {path}: {spec.origin}: {warning}")
    return plan


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@matrix_option
@click.option("--tag", "release", help="Release tag that names this set of images, e.g. v2.7.")
@click.pass_context
def main(ctx: click.Context, matrix_path: Path, release: str | None) -> None:
    """Turn matrix.yaml into proven PyTorch + CUDA + cuDNN images.

    Without a command: validate the matrix and render every build context (the build, smoke
    test and publish stages are not part of this release yet).
    """
    if ctx.invoked_subcommand is not None:
        return
    if not release:
        raise click.UsageError("--tag is required, e.g. --tag v2.7")
    ctx.invoke(render, matrix_path=matrix_path, release=release, out_dir=Path("images"), check=False)
    err.print("note: build, smoke test and publish are not implemented yet; rendered contexts only")


@main.command()
@matrix_option
def validate(matrix_path: Path) -> None:
    """Check the matrix against the compatibility data; exit 2 on any problem."""
    plan = load_plan(matrix_path)
    images = sum(len(spec.image_names()) for spec in plan.specs)
    out.print(f"{matrix_path}: valid: {len(plan.specs)} entries, {images} images")


@main.command()
@matrix_option
@click.option("--tag", "release", help="Release tag (default for --check: the tag images/ was rendered with).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("images"), show_default=True)
@click.option("--check", is_flag=True, help="Exit 1 if the rendered contexts under --out are stale.")
def render(matrix_path: Path, release: str | None, out_dir: Path, check: bool) -> None:
    """Write each image's build context (Dockerfile plus the files it copies)."""
    release = release or (render_stage.rendered_release(out_dir) if check else None)
    if not release:
        raise click.UsageError("--tag is required, e.g. --tag v2.7")
    plan = load_plan(matrix_path, quiet=check)
    if check:
        stale = render_stage.stale_paths(plan, release, out_dir)
        if stale:
            err.print(f"{out_dir} is stale for release {release} ({len(stale)} files differ); "
                      f"run: python build.py render --tag {release}")
            for path in stale[:20]:
                err.print(f"  {path}")
            sys.exit(1)
        out.print(f"{out_dir} is up to date for release {release}")
        return
    written = render_stage.write(plan, release, out_dir)
    out.print(f"rendered {len(written)} build contexts under {out_dir} for release {release}")


@main.command(name="matrix")
@matrix_option
@click.option("--tag", "release", default=None, help="Release tag used in image tags (default: the rendered one, or 'dev').")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]), default="table", show_default=True)
def list_matrix(matrix_path: Path, release: str | None, fmt: str) -> None:
    """List the expanded images: name, variant, tag, flavor and versions."""
    plan = load_plan(matrix_path, quiet=fmt != "table")
    release = release or render_stage.rendered_release(Path("images")) or "dev"
    rows = image_rows(plan, release)
    if fmt == "github":
        click.echo(json.dumps({"include": rows}, separators=(",", ":")))
    elif fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    else:
        out.print(rows_table(rows))


def image_rows(plan: Plan, release: str) -> list[dict[str, str | None]]:
    """One row per image (bases and variants), in build order."""
    rows = []
    for spec in plan.specs:
        for variant, image in zip(("base", *spec.variants), spec.image_names(), strict=True):
            rows.append({
                "image": image, "entry": spec.name, "variant": variant, "tag": plan.tag(release, image),
                "flavor": spec.flavor, "torch": spec.torch, "cuda": spec.cuda, "cudnn": spec.cudnn,
                "nccl": spec.nccl, "python": spec.python, "ngc": spec.ngc, "base_image": spec.base_image,
                "context": f"images/{image}",
            })
    return rows


def rows_table(rows: list[dict[str, str | None]]) -> Table:
    table = Table(show_lines=False)
    for column in ("image", "variant", "flavor", "torch", "cuda", "cudnn", "nccl", "python", "tag"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(row[c] or "-") for c in ("image", "variant", "flavor", "torch", "cuda", "cudnn",
                                                       "nccl", "python", "tag")))
    return table


def run() -> None:
    """Entry point: user errors exit 2 with their messages, never a traceback."""
    try:
        main.main(standalone_mode=False)
    except UserError as exc:
        for problem in exc.problems:
            err.print(f"error: {problem}" if problem.file else f"error: {problem.message}")
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        err.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
