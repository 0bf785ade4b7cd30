"""What every tier of the tests shares: the checkout, and `python build.py` run in it as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_py(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 1500,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python build.py ARGS` in `cwd` with `env` (default: this process's), its output captured; never raises on
    a failed command, whose exit code and output the test checks."""
    return subprocess.run([sys.executable, str(ROOT / "build.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False, input=stdin)
