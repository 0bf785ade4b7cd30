"""The expanded matrix as rows: one per image (bases and variants, for each platform, in build order) or per entry
and platform; `build.py matrix` prints them as a table, as JSON, or as the GitHub Actions job matrix the workflows
read (release.yml runs a job per entry and platform on a runner of that platform)."""

from __future__ import annotations

from rich.table import Table

from ..workspace import Workspace
from .grammar import architecture
from .specs import Plan

COLUMNS = ("image", "variant", "platform", "flavor", "torch", "cuda", "cudnn", "nccl", "python", "tag")
# The labels of the self-hosted GPU runners that build each platform natively (release.yml's runs-on).
RUNNERS = {"linux/amd64": ["self-hosted", "linux", "X64", "gpu"], "linux/arm64": ["self-hosted", "linux", "ARM64", "gpu"]}


def image_rows(plan: Plan, release: str, workspace: Workspace, *, per: str = "image") -> list[dict]:
    """One row per image (bases and variants, for each platform), in build order; per entry: one row per entry and
    platform, its base's, with that platform's images of the entry and the runner that builds them."""
    rows, folder = [], workspace.images()  # the matrix path is resolved once, not per image
    for spec in plan.specs:
        for built in spec.platform_images():
            rows.append({
                "image": built.image, "name": built.name, "entry": spec.name, "variant": built.variant,
                "platform": built.platform, "arch": architecture(built.platform), "runner": RUNNERS[built.platform],
                "tag": plan.tag(release, built.image), "flavor": spec.flavor, **spec.versions(),
                "platforms": list(spec.platforms), "base_image": spec.base_image, "context": str(folder / built.name),
            })
    if per == "entry":
        rows = [{**row, "images": [r["image"] for r in rows if (r["entry"], r["platform"]) == (row["entry"], row["platform"])]}
                for row in rows if row["variant"] == "base"]
    return rows


def rows_table(rows: list[dict[str, str | None]]) -> Table:
    table = Table(show_lines=False)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(row[c] or "-") for c in COLUMNS))
    return table
