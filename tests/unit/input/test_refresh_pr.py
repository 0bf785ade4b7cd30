"""The weekly workflow's last step (scripts/open-refresh-pr.sh) on real git: nothing changed -> no pull request; a
refreshed data file -> a branch with one commit holding only the refreshed paths, pushed, and `gh pr create` asked
with the summary. GitHub cannot be reached: the push goes to a local bare repository (git's own url.insteadOf),
and `gh` is a stand-in that records what it was asked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..conftest import ROOT

SCRIPT = ROOT / "scripts" / "open-refresh-pr.sh"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60).stdout


def checkout(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    origin, work, bin_dir = tmp_path / "origin.git", tmp_path / "work", tmp_path / "bin"
    git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    git("init", "-q", "-b", "main", str(work), cwd=tmp_path)
    (work / "torchimages" / "data").mkdir(parents=True)
    (work / "torchimages" / "data" / "compat.yaml").write_text("torch: []\n")
    (work / "notes.txt").write_text("not part of a refresh\n")
    git("add", ".", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "start", cwd=work)
    bin_dir.mkdir()
    (bin_dir / "gh").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$GH_LOG"\ncat pr-body.md >> "$GH_LOG"\n')
    (bin_dir / "gh").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GH_TOKEN": "t0ken", "GITHUB_REPOSITORY": "team/ti",
           "GH_LOG": str(tmp_path / "gh.log"), "GIT_CONFIG_COUNT": "1",
           "GIT_CONFIG_KEY_0": f"url.{origin}.insteadOf",
           "GIT_CONFIG_VALUE_0": "https://github.com/team/ti.git", "GIT_LOG": str(tmp_path / "git.log")}
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    (bin_dir / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "$GIT_LOG"\nexec {real_git} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    return origin, work, env


def run_script(work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (work / "refresh.txt").write_text("changed: torch 2.9.0: Python wheels [...]\n")
    return subprocess.run(["bash", str(SCRIPT), "refresh.txt", "compat-refresh/42"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_nothing_changed_opens_nothing(tmp_path: Path) -> None:
    origin, work, env = checkout(tmp_path)
    (work / "notes.txt").write_text("edited, but not by a refresh\n")
    result = run_script(work, env)
    assert result.returncode == 0 and "nothing changed; no pull request" in result.stdout, result.stderr
    assert not (tmp_path / "gh.log").exists() and git("branch", "--list", cwd=origin) == ""


def test_a_refresh_becomes_one_commit_on_a_branch_and_a_pull_request(tmp_path: Path) -> None:
    origin, work, env = checkout(tmp_path)
    (work / "torchimages" / "data" / "compat.yaml").write_text("torch: [2.15.0]\n")
    (work / "matrix.lock").write_text("{}\n")
    (work / "notes.txt").write_text("edited, but not by a refresh\n")
    result = run_script(work, env)
    assert result.returncode == 0, result.stdout + result.stderr
    files = git("show", "--name-only", "--format=", "compat-refresh/42", cwd=origin).split()
    assert sorted(files) == ["matrix.lock", "torchimages/data/compat.yaml"], "only what a refresh writes"
    message = git("log", "-1", "--format=%B", "compat-refresh/42", cwd=origin)
    assert "changed: torch 2.9.0: Python wheels" in message
    asked = (tmp_path / "gh.log").read_text()
    assert asked.startswith("pr\ncreate\n--head\ncompat-refresh/42\n") and "changed: torch 2.9.0" in asked


def test_the_token_is_on_no_command_line(tmp_path: Path) -> None:
    origin, work, env = checkout(tmp_path)
    (work / "torchimages" / "data" / "compat.yaml").write_text("torch: [2.15.0]\n")
    result = run_script(work, env)
    assert result.returncode == 0, result.stdout + result.stderr
    commands = (tmp_path / "git.log").read_text()
    assert "push -q https://github.com/team/ti.git" in commands and "t0ken" not in commands, commands
    assert git("branch", "--list", cwd=origin).strip() == "compat-refresh/42"


def test_a_missing_input_stops_it_before_anything_is_pushed(tmp_path: Path) -> None:
    origin, work, env = checkout(tmp_path)
    (work / "torchimages" / "data" / "compat.yaml").write_text("torch: [2.15.0]\n")
    for name, value in (("GITHUB_REPOSITORY", "team/ti; rm -rf /"), ("GH_TOKEN", "")):
        result = run_script(work, {**env, name: value})
        assert result.returncode == 2 and name in result.stderr, result.stderr
    result = subprocess.run(["bash", str(SCRIPT), "no-such-summary.txt", "compat-refresh/42"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2 and "the summary no-such-summary.txt is missing" in result.stderr
    assert git("branch", "--list", cwd=origin) == "" and git("branch", "--show-current", cwd=work).strip() == "main"
