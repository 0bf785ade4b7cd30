"""All-or-nothing releases on a real registry (distribution 2.8, TLS, htpasswd). The CPU images are
pushed under candidate tags; `promote` writes the release tags only when every image of the matrix passed, by
manifest PUT (no layer moves), and a promotion cut short by a registry that dies is finished by running it again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from torchimages import manifest
from torchimages.events import StageEvent
from torchimages.input import matrix, specs
from torchimages.publish import promote
from torchimages.registry import RegistryClient

from ..conftest import CANDIDATE, RELEASE, ROOT, Registry, as_release_user, push_candidates

pytestmark = [pytest.mark.lane("main")]


def matrix_of(folder: Path, flavors: tuple[str, ...]) -> Path:
    """matrix.yaml with only the entries of `flavors`."""
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["images"] = [entry for entry in data["images"] if entry["flavor"] in flavors]
    path = folder / f"{'-'.join(flavors)}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def client(registry: Registry) -> RegistryClient:
    return RegistryClient(registry.host, username=registry.user, password=registry.password, ca=registry.folder / "ca.crt")


def release_tags(registry: Registry, repository: str, manifest: dict) -> dict[str, str | None]:
    return {i["image"]: client(registry).digest(repository, f"{RELEASE}-{i['image']}") for i in manifest["images"]}


def test_a_release_with_a_missing_entry_writes_no_release_tag_and_a_complete_one_all(
        registry: Registry, tested_report: Path, tmp_path: Path) -> None:
    candidates = push_candidates(registry, tested_report, tmp_path, "ml/promote")
    manifest = json.loads(candidates.read_text())
    assert manifest["candidate"] == CANDIDATE and len(manifest["images"]) == 3
    for image in manifest["images"]:
        assert image["tag"] == f"{registry.host}/ml/promote:{RELEASE}-{CANDIDATE}-{image['image']}"
    args = ("promote", "--tag", RELEASE, "--candidates", str(candidates), "--registry", f"{registry.host}/ml/promote",
            "--manifest", str(tmp_path / "release.json"), "--plain")

    # The release is the CPU entry and the flagship CUDA entry; the CUDA job failed, so its images are not there.
    both = matrix_of(tmp_path, ("cpu", "cuda"))
    refused = as_release_user(*args, "--matrix", str(both), registry=registry, cwd=ROOT)
    assert refused.returncode == 1, refused.stderr
    every = sum(len(spec.platform_images()) for spec in specs.resolve(matrix.load(both)).specs)
    assert f"not promoted: release {RELEASE}: {every - 3} of {every} images did not pass or were not pushed" \
        in refused.stderr, refused.stderr
    assert set(release_tags(registry, "ml/promote", manifest).values()) == {None}, "a failed release has no release tag"
    assert not (tmp_path / "release.json").exists()

    promoted = as_release_user(*args, "--matrix", str(matrix_of(tmp_path, ("cpu",))), registry=registry, cwd=ROOT)
    assert promoted.returncode == 0, promoted.stderr
    assert release_tags(registry, "ml/promote", manifest) == {i["image"]: i["digest"] for i in manifest["images"]}
    written = json.loads((tmp_path / "release.json").read_text())
    assert written["promoted_from"] == CANDIDATE and all(i["tag"] == i["release_tag"] for i in written["images"])
    assert promoted.stderr.count(" promote pushed ") == 3, promoted.stderr

    again = as_release_user(*args, "--matrix", str(matrix_of(tmp_path, ("cpu",))), registry=registry, cwd=ROOT)
    assert again.returncode == 0 and again.stderr.count(" promote unchanged ") == 3, again.stderr


def restart(registry: Registry) -> subprocess.CompletedProcess[str]:
    """The registry started again on its storage, port, certificates and user, as an operator restarts one."""
    return subprocess.run(["bash", str(ROOT / "scripts" / "start-registry.sh"), str(registry.folder),
                           registry.host.rsplit(":", 1)[1], registry.user], input=registry.password + "\n",
                          capture_output=True, text=True, timeout=120, check=False)


def answers(registry: Registry) -> bool:
    try:
        registry.catalog()
    except Exception:  # a registry that is down answers in many ways
        return False
    return True


def test_a_registry_that_dies_mid_promotion_is_finished_by_running_promote_again(
        registry: Registry, tested_report: Path, tmp_path: Path) -> None:
    """The session's registry dies and is restarted: its layers are there already (a cross-repository mount, not a
    second cold push of the CPU images), and it answers again for the modules after this one."""
    down = registry
    candidates_path = push_candidates(down, tested_report, tmp_path, "ml/dies")
    candidates = json.loads(candidates_path.read_text())
    images = [i["image"] for i in candidates["images"]]
    events: list[StageEvent] = []

    def emit(event: StageEvent) -> None:
        events.append(event)
        if event.kind == "pushed":
            os.kill(down.pid, signal.SIGTERM)  # the registry goes away after the first release tag
            time.sleep(0.5)

    try:
        promotions = promote.plan(manifest.read(candidates_path), dict.fromkeys(images, "linux/amd64"))
        promoter = promote.Promoter(client(down), f"{down.host}/ml/dies", emit, retries=1, backoff=0.2)
        promoter.inspect(promotions)
        promoter.check(promotions)
        promoter.promote(promotions)
        assert [p.state for p in promotions] == ["promoted", "failed", "failed"], promotions
        assert "failed after 2 attempt(s)" in (promotions[1].error or "")

        restarted = restart(down)
        assert restarted.returncode == 0, restarted.stderr
        (tmp_path / "candidates.json").write_text(json.dumps(candidates))
        finished = as_release_user("promote", "--tag", RELEASE, "--candidates", str(tmp_path / "candidates.json"), "--plain",
                            "--registry", f"{down.host}/ml/dies", "--matrix", str(matrix_of(tmp_path, ("cpu",))),
                            "--manifest", str(tmp_path / "release.json"), registry=down, cwd=ROOT)
        assert finished.returncode == 0, finished.stderr
        assert finished.stderr.count(" promote unchanged ") == 1 and finished.stderr.count(" promote pushed ") == 2
        assert release_tags(down, "ml/dies", candidates) == {i["image"]: i["digest"] for i in candidates["images"]}
    finally:
        if not answers(down):
            restart(down)
