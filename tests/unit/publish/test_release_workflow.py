"""release.yml's wiring, read from the file and its scripts run with the gh stand-in: the previous release's manifest
that a job downloads reaches its build as --previous and --cache-from previous (so an unchanged entry is reused, which
tests/integration/build/test_cache_from.py proves on a real engine and registry), and publishing attaches the diff
against that previous release. The release workflow itself runs once, whole, in tests/integration/test_workflows.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import yaml

from torchimages.build.cache import PREVIOUS
from torchimages.cli import main

from ...buildpy import ROOT
from ..release_files import candidates
from .test_release_assets import publish, run

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def steps_of(job: str) -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]


def envvar_of(option: str) -> str:
    param = next(p for p in main.params if isinstance(p, click.Option) and option in p.opts)
    return str(param.envvar)


def test_the_previous_release_reaches_the_build_as_previous_and_cache_from(tmp_path: Path) -> None:
    steps = steps_of("image")
    runs = [str(step.get("run", "")) for step in steps]
    fetch = next(i for i, text in enumerate(runs) if "release-assets.sh previous" in text)
    build = next(i for i, text in enumerate(runs) if "build.py --tag" in text)
    assert fetch < build, "the previous release is fetched after the build"
    build_step = steps[build]
    assert "--previous" not in runs[build] and "--cache-from" not in runs[build], "the build step overrides them"
    wired = {envvar_of("--previous"), envvar_of("--cache-from")}
    assert not wired & set(build_step.get("env", {})), "the build step's env overrides what GITHUB_ENV gives it"
    publish(tmp_path, [("v2.6.json", b'{"release": "v2.6", "repository": "r.example.com/ml/pt", "candidate": null, '
                                      b'"images": []}')])
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    written = dict(line.split("=", 1) for line in (tmp_path / "github.env").read_text().splitlines())
    assert set(written) == wired
    assert written[envvar_of("--cache-from")] == PREVIOUS
    assert (tmp_path / written[envvar_of("--previous")]).is_file()


def test_publishing_attaches_the_diff_against_the_previous_release(tmp_path: Path) -> None:
    releases = tmp_path / "releases"
    (releases / "previous").mkdir(parents=True)
    before, after = candidates(tmp_path / "a", candidate=None), candidates(tmp_path / "b", candidate=None)
    before["release"] = "v2.6"
    for image in before["images"]:
        image.update(tag=image["tag"].replace("v2.7", "v2.6"), release_tag=image["release_tag"].replace("v2.7", "v2.6"))
        image.pop("sbom")
        image["versions"]["torch"] = "2.12.0"
    for image in after["images"]:
        image.pop("sbom")
    (releases / "previous" / "v2.6.json").write_text(json.dumps(before))
    (releases / "previous" / "RELEASE").write_text("v2.6\n")
    (releases / "v2.7.json").write_text(json.dumps(after))
    (tmp_path / "build.py").symlink_to(ROOT / "build.py")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "gh").symlink_to(ROOT / "tests" / "integration" / "data" / "gh-releases")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "GH_TOKEN": "t",
           "GH_RELEASES": str(tmp_path / "gh"), "PYTHON": sys.executable, "TORCHIMAGES_ROOT": str(ROOT)}
    result = subprocess.run(["bash", str(ROOT / "scripts" / "release-assets.sh"), "publish", "v2.7"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False, env=env)
    assert result.returncode == 0, result.stderr
    diff = (tmp_path / "gh" / "v2.7" / "v2.7-diff.md").read_text()
    assert "v2.6" in diff and "v2.7" in diff and "2.12.0" in diff and "2.13.0" in diff, diff
    assert (tmp_path / "gh" / "v2.7" / "v2.7-manifest.tar.gz").is_file()
