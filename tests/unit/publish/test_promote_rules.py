"""Promotion's rules that need no registry: what a promotion needs, and the manifest it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from torchimages import manifest
from torchimages.errors import UserError
from torchimages.manifest import ManifestImage, ReleaseManifest, SmokeCounts
from torchimages.publish import promote

from ..conftest import ROOT, digest

COUNTS = SmokeCounts(1, 0, 0, 0)
CANDIDATES = ReleaseManifest("v2.7", "r.example.com/ml/pt", candidate="rc.9", images=(
    ManifestImage("a", "base", digest(0), {}, COUNTS), ManifestImage("a-ssh", "ssh", digest(1), {}, COUNTS)))


def on_amd64(*images: str) -> dict[str, str]:
    """What the matrix builds: each image for linux/amd64."""
    return dict.fromkeys(images, "linux/amd64")


def test_every_image_of_the_release_must_be_there() -> None:
    with pytest.raises(promote.PromotionRefused, match=r"release v2.7: 1 of 3 images did not pass or "
                                                       r"were not pushed \(b\); no release tag was written"):
        promote.plan(CANDIDATES, on_amd64("a", "a-ssh", "b"))
    plan = promote.plan(CANDIDATES, on_amd64("a", "a-ssh"))
    assert [(p.image, p.tag, p.digest) for p in plan] == [("a", "v2.7-a", digest(0)), ("a-ssh", "v2.7-a-ssh", digest(1))]
    assert [p.candidate_tag for p in plan] == ["r.example.com/ml/pt:v2.7-rc.9-a", "r.example.com/ml/pt:v2.7-rc.9-a-ssh"]


def test_a_manifest_without_candidates_is_refused() -> None:
    with pytest.raises(UserError, match="holds no candidate images"):
        promote.plan(replace(CANDIDATES, candidate=None), on_amd64("a"))


def test_the_release_manifest_names_the_release_tags_and_where_they_came_from(tmp_path: Path) -> None:
    released = promote.release_manifest(CANDIDATES, promote.plan(CANDIDATES, on_amd64("a", "a-ssh")))
    assert released.candidate is None and released.promoted_from == "rc.9"
    json_path, _ = manifest.write(released, tmp_path / "v2.7.json")
    data = json.loads(json_path.read_text())
    assert [i["tag"] for i in data["images"]] == ["r.example.com/ml/pt:v2.7-a", "r.example.com/ml/pt:v2.7-a-ssh"]
    assert [i["digest"] for i in data["images"]] == [digest(0), digest(1)]
    assert manifest.read(json_path) == released


@pytest.mark.parametrize(("args", "message"), [
    (["--tag", "v2.7", "--candidate", "rc.1", "--dry-run"], "--candidate needs --push"),
    (["--tag", "v2.7", "--push", "--candidate", "rc/1", "--dry-run"], "--candidate 'rc/1' does not make a valid tag"),
])
def test_candidate_options_are_checked_before_anything_runs(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
