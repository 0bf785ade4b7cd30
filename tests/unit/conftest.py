"""Helpers for unit tests: no Docker engine is used here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchimages import matrix, specs
from torchimages.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def plan_of(text: str) -> specs.Plan:
    """Validate matrix text fully (shape and compatibility)."""
    return specs.resolve(matrix.loads(textwrap.dedent(text), "matrix.yaml"))


def problems_of(text: str) -> list[str]:
    """The problems validation reports for matrix text; fails the test if it is accepted."""
    with pytest.raises(UserError) as caught:
        plan_of(text)
    return [str(p) for p in caught.value.problems]


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `python build.py ARGS` as a user would."""
    return subprocess.run([sys.executable, str(ROOT / "build.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False)
