"""One frozen settings object: paths and defaults every stage reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Settings:
    root: Path = ROOT
    templates: Path = ROOT / "templates"
    images: Path = ROOT / "images"
    matrix: Path = ROOT / "matrix.yaml"
    label_prefix: str = "io.torchimages"
    source_url: str = "https://github.com/platform-team/torchimages"
    user_name: str = "ml"
    user_uid: int = 1000
    user_gid: int = 1000
    jupyterlab: str = "4.6.6"
    notebook: str = "7.6.5"  # Notebook 7.6 requires JupyterLab 4.6
    uv: str = "0.13.9"


SETTINGS = Settings()
