"""The expanded matrix as rows: one per image (bases and variants, in build order) or per entry; `build.py matrix`
prints them as a table, as JSON, or as the GitHub Actions job matrix the workflows read."""

from __future__ import annotations

from rich.table import Table

from ..workspace import Workspace
from .specs import Plan

COLUMNS = ("image", "variant", "flavor", "torch", "cuda", "cudnn", "nccl", "python", "tag")


def image_rows(plan: Plan, release: str, workspace: Workspace, *, per: str = "image") -> list[dict]:
    """One row per image (bases and variants), in build order; per entry: its base's row with the entry's images."""
    rows, folder = [], workspace.images()  # the matrix path is resolved once, not per image
    for spec in plan.specs:
        for variant, image in spec.images():
            rows.append({
                "image": image, "entry": spec.name, "variant": variant, "tag": plan.tag(release, image),
                "flavor": spec.flavor, **spec.versions(), "platforms": list(spec.platforms), "base_image": spec.base_image,
                "context": str(folder / image),
            })
    if per == "entry":
        rows = [{**row, "images": [r["image"] for r in rows if r["entry"] == row["entry"]]}
                for row in rows if row["variant"] == "base"]
    return rows


def rows_table(rows: list[dict[str, str | None]]) -> Table:
    table = Table(show_lines=False)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(row[c] or "-") for c in COLUMNS))
    return table
