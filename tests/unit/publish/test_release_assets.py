"""scripts/release-assets.sh reads a downloaded release asset, so it is input. "There is no previous
release" (a note, exit 0) is told from "the download failed" (the job fails: a release built without its previous
one silently loses its size budget and its reuse), and a tarball with a link, a device, an absolute path or '..'
in it is refused before anything is extracted. GitHub is the gh stand-in of the workflow test
(tests/integration/data/gh-releases), which answers with gh's own words."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ..conftest import ROOT

MANIFEST = b'{"release": "v2.6", "repository": "r.example.com/ml/pt", "candidate": null, "images": []}'


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "bin").mkdir(exist_ok=True)
    if not (tmp_path / "bin" / "gh").exists():
        (tmp_path / "bin" / "gh").symlink_to(ROOT / "tests" / "integration" / "data" / "gh-releases")
    environment = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "GH_TOKEN": "t",
                   "GH_RELEASES": str(tmp_path / "gh"), "GITHUB_ENV": str(tmp_path / "github.env"),
                   "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / "release-assets.sh"), "previous", "v2.7", "out/previous"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False, env=environment)


def publish(tmp_path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> None:
    """The GitHub release v2.6, its asset holding `members`."""
    folder = tmp_path / "gh" / "v2.6"
    folder.mkdir(parents=True)
    (tmp_path / "gh" / "latest").write_text("v2.6\n")
    with tarfile.open(folder / "v2.6-manifest.tar.gz", "w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_no_release_yet_is_a_note(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 0 and "no published release yet" in result.stdout, result.stderr
    assert not (tmp_path / "github.env").exists()


def test_a_failed_question_to_github_fails_the_job(tmp_path: Path) -> None:
    result = run(tmp_path, GH_FAIL="HTTP 401: Bad credentials (https://api.github.com/repos/o/r/releases/latest)")
    assert result.returncode == 1 and "could not ask GitHub for the latest release: HTTP 401" in result.stderr
    assert not (tmp_path / "github.env").exists()


def test_a_release_without_the_asset_is_a_note_and_a_good_asset_is_used(tmp_path: Path) -> None:
    (tmp_path / "gh" / "v2.6").mkdir(parents=True)
    (tmp_path / "gh" / "latest").write_text("v2.6\n")
    missing = run(tmp_path)
    assert missing.returncode == 0 and "has no v2.6-manifest.tar.gz" in missing.stdout, missing.stderr
    (tmp_path / "gh" / "v2.6").rmdir()
    publish(tmp_path, [("v2.6.json", MANIFEST), ("v2.6.sbom/x.spdx.json", b"{}"), ("v2.6-diff.md", b"# v2.6\n"),
                       ("v2.6.wheels/x.txt", b"a==1 --hash=sha256:0\n")])
    used = run(tmp_path)
    assert used.returncode == 0, used.stderr
    assert (tmp_path / "out" / "previous" / "v2.6.json").read_bytes() == MANIFEST
    assert (tmp_path / "out" / "previous" / "v2.6.wheels" / "x.txt").is_file()  # the wheel locks travel with it
    assert (tmp_path / "github.env").read_text() == ("TORCHIMAGES_PREVIOUS=out/previous/v2.6.json\n"
                                                     "TORCHIMAGES_CACHE_FROM=previous\n")


@pytest.mark.parametrize(("members", "words"), [
    ([("v2.6.json", MANIFEST), link("v2.6.sbom/x.spdx.json", "/etc/passwd")], "not a file or folder"),
    ([("v2.6.json", MANIFEST), link("v2.6.md", "v2.6.json", tarfile.LNKTYPE)], "not a file or folder"),
    ([("v2.6.json", MANIFEST), ("../escape.json", b"x")], "unexpected member"),
    ([("v2.6.json", MANIFEST), ("/tmp/abs.json", b"x")], "unexpected member"),
    ([("v2.6.json", MANIFEST), ("v2.6.sbom/../../x.spdx.json", b"x")], "leaves its folder"),
    ([("v2.6.json", MANIFEST), ("v2.6.wheels/../../x.txt", b"x")], "leaves its folder"),
    ([("v2.6.json", MANIFEST), link("v2.6.wheels/x.txt", "/etc/passwd")], "not a file or folder"),
    ([("v2.6.json", MANIFEST), (".bashrc", b"x")], "unexpected member"),
])
def test_a_hostile_asset_is_refused_before_anything_is_extracted(tmp_path: Path, members: list, words: str) -> None:
    publish(tmp_path, members)
    result = run(tmp_path)
    assert result.returncode == 1 and words in result.stderr, result.stderr
    extracted = sorted(p.name for p in (tmp_path / "out" / "previous").iterdir())
    assert extracted == ["v2.6-manifest.tar.gz"] and not (tmp_path / "github.env").exists()
    assert not (tmp_path / "out" / "escape.json").exists()


@pytest.mark.parametrize("tag", ["v2.6;touch pwned", "v2.\u0666", "-v2.6", "v" * 129, "v2.6\u202e"])
def test_a_latest_tag_that_is_no_release_tag_fails_the_job_before_any_download(tmp_path: Path, tag: str) -> None:
    """The script asks the code's own rule (torchimages/input/grammar.py), so it cannot drift from it."""
    (tmp_path / "gh").mkdir()
    (tmp_path / "gh" / "latest").write_text(f"{tag}\n")
    result = run(tmp_path)
    assert result.returncode == 1 and "is not a release tag" in result.stderr, result.stderr
    assert "download" not in (tmp_path / "gh" / "calls.log").read_text()
