"""`--cache-from previous` on a real registry. The session's tested CPU images are pushed as the
previous release; the next release of the unchanged entry pulls them by digest and writes only its release stamp:
the same layers and configuration, the new release's labels, no build step run again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import docker
import pytest

from torchimages.build.cache import CONTENT_LABEL
from torchimages.build.jobs import GPU_ARCHS_LABEL, PLATFORM_LABEL

from ..conftest import EntryBuild, Registry, build_py, push_candidates, tags_set_aside

pytestmark = [pytest.mark.lane("main")]

NEXT = "it-next"
STAMPED = ("org.opencontainers.image.version", "org.opencontainers.image.base.name")
BUILD_LABELS = (CONTENT_LABEL, PLATFORM_LABEL, GPU_ARCHS_LABEL)  # one LABEL step each in the classic builder
SAME_CONFIG = ("User", "Entrypoint", "Cmd", "Env", "WorkingDir", "ExposedPorts", "Healthcheck")


def test_an_unchanged_entry_is_reused_from_the_previous_release(
        api: docker.APIClient, registry: Registry, cpu_build: EntryBuild, tested_report: Path, tmp_path: Path) -> None:
    previous = json.loads(push_candidates(registry, tested_report, tmp_path, "ml/cache").read_text())
    assert len(previous["images"]) == 3
    for image in previous["images"]:
        assert image["content_digest"].startswith("sha256:"), image
        api.remove_image(image["tag"])  # only the registry's tag: the build must pull the reference itself
    (tmp_path / "previous.json").write_text(json.dumps(previous))

    images = tmp_path / "images"
    rendered = build_py("render", "--tag", NEXT, "--out", str(images), env=cpu_build.env)
    assert rendered.returncode == 0, rendered.stderr
    env = dict(cpu_build.env, TORCHIMAGES_REGISTRY_PASSWORD=registry.password)
    result = build_py("build", "--tag", NEXT, "--images", str(images), "--only", f"{cpu_build.spec.name}*", "--plain",
                      *cpu_build.options, "--previous", str(tmp_path / "previous.json"), "--cache-from", "previous",
                      "--registry", f"{registry.host}/ml/cache", "--registry-user", registry.user,
                      "--report", str(tmp_path / "report.json"), env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stderr.count("reused: content unchanged since") == 3, result.stderr[-4000:]
    steps = [line.split(": ", 1)[1] for line in result.stderr.splitlines() if re.search(r" step \d+/\d+: ", line)]
    # per image: its FROM, the release stamp, and the labels the build adds (content digest, platform, GPU generations)
    assert len(steps) == 3 * (2 + len(BUILD_LABELS)), f"a build step ran again: {steps}"
    assert all(s.startswith(("FROM ", "LABEL ")) for s in steps), f"a build step ran again: {steps}"

    report = {r["image"]: r for r in json.loads((tmp_path / "report.json").read_text())["images"]}
    for old in previous["images"]:
        new = report[old["image"]]
        assert new["reused"] == old["reference"] and new["content_digest"] == old["content_digest"], new
        was, now = api.inspect_image(old["reference"]), api.inspect_image(new["tag"])
        assert now["RootFS"]["Layers"] == was["RootFS"]["Layers"], f"{old['image']}: other layers"
        for key in SAME_CONFIG:
            assert now["Config"].get(key) == was["Config"].get(key), f"{old['image']}: {key} differs"
        labels, old_labels = now["Config"]["Labels"], was["Config"]["Labels"]
        assert labels["org.opencontainers.image.version"] == NEXT and labels[CONTENT_LABEL] == old["content_digest"]
        assert {k: v for k, v in labels.items() if k not in STAMPED} == \
               {k: v for k, v in old_labels.items() if k not in STAMPED}, old["image"]
        if old["variant"] != "base":
            assert labels["org.opencontainers.image.base.name"].endswith(f":{NEXT}-{cpu_build.spec.name}")

    # A manifest that names another image under this one's content digest (an edited or forged release asset): the
    # pulled image's own content label decides, so it is not reused and is built instead, while its base, named
    # truly, is reused. (The ssh variant: its build is one apt step, the cheapest to run again.)
    base = next(i for i in previous["images"] if i["variant"] == "base")
    ssh = next(i for i in previous["images"] if i["variant"] == "ssh")
    other = next(i for i in previous["images"] if i["variant"] == "jupyter")
    forged = {**previous, "images": [base, {**ssh, "digest": other["digest"], "reference": other["reference"]}]}
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    # The first build's images are here under these tags, and an image already here is not built again (jobs.py): the
    # tags are set aside, so that the forged manifest is what decides.
    with tags_set_aside(api, [report[base["image"]]["tag"], report[ssh["image"]]["tag"]]):
        result = build_py("build", "--tag", NEXT, "--images", str(images), "--only", ssh["image"], "--plain",
                          *cpu_build.options, "--previous", str(tmp_path / "forged.json"), "--cache-from", "previous",
                          "--registry", f"{registry.host}/ml/cache", "--registry-user", registry.user,
                          "--report", str(tmp_path / "forged-report.json"), env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    said = f"cache: not reused: the pulled image's content label is {other['content_digest'][:19]}, not this build's"
    assert said in result.stderr, result.stderr[:4000]
    assert result.stderr.count("reused: content unchanged since") == 1, result.stderr[-4000:]  # the base, named truly
    built = {r["variant"]: r for r in json.loads((tmp_path / "forged-report.json").read_text())["images"]}
    assert built["base"]["reused"] == base["reference"], built["base"]
    assert built["ssh"]["reused"] is None and built["ssh"]["image_id"] != api.inspect_image(other["reference"])["Id"]
