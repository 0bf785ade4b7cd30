"""Every folder and file a run reads or writes, named in one place: made from the matrix file it serves.

matrix.yaml renders into images/; any other matrix (nightly.yaml) into images/nightly/, so it never replaces the
committed renders. Its lock is beside it (matrix.lock). Per release: reports/RELEASE/build-report.json, the
per-image logs in logs/RELEASE/, the release manifest releases/RELEASE.json (its SBOMs in releases/RELEASE.sbom/).
An option the user gave (--images, --report, --logs, --manifest) wins over each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_MATRIX = Path("matrix.yaml")


@dataclass(frozen=True)
class Workspace:
    matrix: Path = DEFAULT_MATRIX

    def images(self, given: Path | None = None) -> Path:
        """Where the matrix's build contexts are rendered."""
        if given is not None:
            return given
        if self.matrix.resolve() == DEFAULT_MATRIX.resolve():
            return Path("images")
        return Path("images") / self.matrix.stem

    @property
    def lock(self) -> Path:
        """matrix.yaml -> matrix.lock, beside it."""
        return self.matrix.with_suffix(".lock")

    @staticmethod
    def report(release: str, given: Path | None = None) -> Path:
        return given or Path("reports") / release / "build-report.json"

    @staticmethod
    def logs(release: str, given: Path | None = None) -> Path:
        return given or Path("logs") / release

    @staticmethod
    def release_manifest(name: str, given: Path | None = None) -> Path:
        """A release's (or a candidate set's) manifest: releases/NAME.json."""
        return given or Path("releases") / f"{name}.json"
