"""One set of pins: requirements*.txt and pyproject.toml agree, and the run-time set holds what the smoke stage runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from .conftest import ROOT


def pins(path: Path) -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("-r")}


def test_requirements_and_pyproject_pin_the_same_versions() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(project["dependencies"]) == pins(ROOT / "requirements.txt")
    assert set(project["optional-dependencies"]["dev"]) == pins(ROOT / "requirements-dev.txt")
    assert all("==" in pin for pin in pins(ROOT / "requirements.txt") | pins(ROOT / "requirements-dev.txt"))
    assert project["scripts"]["torchimages"] == "torchimages.cli:run"


def test_the_run_time_requirements_hold_what_the_smoke_stage_runs() -> None:
    names = {pin.split("==")[0] for pin in pins(ROOT / "requirements.txt")}
    assert {"pytest", "pytest-testinfra", "docker", "click", "jinja2", "pyyaml", "rich"} <= names
    smoke = (ROOT / "torchimages" / "verify" / "smoke.py").read_text()
    assert "pytest.main(" in smoke, "the smoke stage no longer runs pytest: revisit requirements.txt"


def test_the_readme_is_short_and_every_page_it_names_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200 and max(map(len, readme.splitlines())) < 160
    pages = re.findall(r"\]\(((?:docs|tests)/[^)]+)\)", readme)
    assert pages and all((ROOT / page).is_file() for page in pages), pages
    assert "bash scripts/setup.sh && .venv/bin/python build.py --tag v2.7" in readme
    assert ".venv/bin/python -m pytest -n 2\n" in readme
