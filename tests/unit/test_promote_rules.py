"""Issue 13, item 1, the rules that need no registry: what a promotion needs, and the manifest it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchimages import promote
from torchimages.errors import UserError

from .conftest import ROOT

CANDIDATES = {
    "release": "v2.7", "candidate": "rc.9", "repository": "r.example.com/ml/pt",
    "images": [{"image": name, "variant": variant, "digest": f"sha256:{n}", "tag": f"r.example.com/ml/pt:v2.7-rc.9-{name}",
                "release_tag": f"r.example.com/ml/pt:v2.7-{name}", "reference": f"r.example.com/ml/pt@sha256:{n}"}
               for n, (name, variant) in enumerate((("a", "base"), ("a-ssh", "ssh")))],
}


def test_every_image_of_the_release_must_be_there() -> None:
    with pytest.raises(promote.PromotionRefused, match=r"release v2.7: 1 of 3 images did not pass or "
                                                       r"were not pushed \(b\); no release tag was written"):
        promote.plan(CANDIDATES, ["a", "a-ssh", "b"])
    plan = promote.plan(CANDIDATES, ["a", "a-ssh"])
    assert [(p.image, p.tag, p.digest) for p in plan] == [("a", "v2.7-a", "sha256:0"), ("a-ssh", "v2.7-a-ssh", "sha256:1")]


def test_a_manifest_without_candidates_is_refused() -> None:
    with pytest.raises(UserError, match="holds no candidate images"):
        promote.plan({**CANDIDATES, "candidate": None}, ["a"])


def test_the_release_manifest_names_the_release_tags_and_where_they_came_from() -> None:
    data = promote.release_manifest(CANDIDATES, promote.plan(CANDIDATES, ["a", "a-ssh"]), folder=Path("releases"))
    assert data["candidate"] is None and data["promoted_from"] == "rc.9"
    assert [i["tag"] for i in data["images"]] == ["r.example.com/ml/pt:v2.7-a", "r.example.com/ml/pt:v2.7-a-ssh"]
    assert [i["digest"] for i in data["images"]] == ["sha256:0", "sha256:1"]


@pytest.mark.parametrize(("args", "message"), [
    (["--tag", "v2.7", "--candidate", "rc.1", "--dry-run"], "--candidate needs --push"),
    (["--tag", "v2.7", "--push", "--candidate", "rc/1", "--dry-run"], "--candidate 'rc/1' does not make a valid tag"),
])
def test_candidate_options_are_checked_before_anything_runs(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
