"""One frozen settings object: paths and defaults every stage reads."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT_ENV = "TORCHIMAGES_ROOT"


def project_root() -> Path:
    """The checkout the tool works in. templates/, tests/smoke and benchmarks/probes live there, not in the
    package, so an installed `torchimages` (pip install .) works in the checkout it is run from."""
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV]).resolve()
    source = Path(__file__).resolve().parents[1]
    return source if is_checkout(source) else Path.cwd().resolve()


def is_checkout(folder: Path) -> bool:
    return (folder / "templates" / "Dockerfile.j2").is_file() and (folder / "tests" / "smoke").is_dir()


ROOT = project_root()


@dataclass(frozen=True)
class Settings:
    root: Path = ROOT
    templates: Path = ROOT / "templates"
    label_prefix: str = "io.torchimages"
    source_url: str = "https://github.com/platform-team/torchimages"
    user_name: str = "ml"
    user_uid: int = 1000
    user_gid: int = 1000
    jupyterlab: str = "4.6.6"
    notebook: str = "7.6.5"  # Notebook 7.6 requires JupyterLab 4.6
    uv: str = "0.13.9"
    # The time every file of an environment layer is given (SOURCE_DATE_EPOCH: 2026-01-01T00:00:00Z), so that the same
    # wheels give the same layer bytes at every build (docs/building.md, "Reproducible layers")
    source_date_epoch: int = 1767225600
    ninja: str = "1.13.2"  # the devel variant's: torch.utils.cpp_extension builds with it


SETTINGS = Settings()
