"""`pip install .` in a fresh venv gives a working `torchimages` command (run in the checkout), pytest and
testinfra included; requirements.txt alone is what the release workflow installs (test_workflows.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

pytestmark = [pytest.mark.lane("side")]


def test_pip_install_gives_a_working_torchimages_command(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(ROOT)], capture_output=True, text=True,
                               timeout=600, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    validate = subprocess.run([str(venv / "bin" / "torchimages"), "validate"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, check=False)
    assert validate.returncode == 0 and "matrix.yaml: valid:" in validate.stdout, validate.stderr
    check = subprocess.run([str(venv / "bin" / "torchimages"), "render", "--check"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stderr
    smoke_deps = subprocess.run([str(venv / "bin" / "python"), "-c", "import pytest, testinfra, docker"],
                                capture_output=True, text=True, timeout=60, check=False)
    assert smoke_deps.returncode == 0, smoke_deps.stderr
    elsewhere = subprocess.run([str(venv / "bin" / "torchimages"), "validate"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=120, check=False)
    assert elsewhere.returncode == 2 and "is not a torchimages checkout" in elsewhere.stderr, elsewhere.stderr
    assert "Traceback" not in elsewhere.stderr
