"""Failures end in one short message (image, step, last log lines, what to try) and a non-zero exit."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from ..conftest import RELEASE, ROOT, BuilderWay, EntryBuild, build_py, render_cpu_entry, tags_set_aside

pytestmark = [pytest.mark.lane("main")]


@pytest.fixture
def private_base(api: docker.APIClient, base_image: str) -> Iterator[str]:
    """The base image plus a test-only LABEL: an image ID of its own, so the builds these tests fail or
    interrupt (--no-cache ones too) never meet the user's cache. It must be left without children: the tool
    removes what a failed or cancelled build committed."""
    tag = f"torchimages-test/parent:{uuid.uuid4().hex[:12]}"
    dockerfile = f"FROM {base_image}\nLABEL io.torchimages.test-parent={tag.rsplit(':', 1)[1]}\n"
    stream = api.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, decode=True)
    assert not [chunk for chunk in stream if "error" in chunk]
    image_id = api.inspect_image(tag)["Id"]
    yield tag
    children = [i["Id"] for i in api.images(all=True) if i.get("ParentId") == image_id]
    api.remove_image(tag, force=True)
    assert children == [], f"failed or cancelled builds left images on {tag}: {children}"


def test_wrong_base_image(api: docker.APIClient, tmp_path: Path) -> None:
    matrix_file, images = render_cpu_entry(tmp_path, "wrong-base")
    result = build_py("build", "--matrix", str(matrix_file), "--tag", "fail", "--images", str(images), "--plain",
                      "--base-image", "no-such-registry.invalid/debian:never", "--report", str(tmp_path / "r.json"),
                      "--logs", str(tmp_path / "logs"), timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "FAILED wrong-base failed at Step 2/" in result.stderr and "FROM ${BASE_IMAGE}" in result.stderr
    assert "the base image no-such-registry.invalid/debian:never is not on this engine" in result.stderr
    assert "scripts/make-base-image.sh" in result.stderr
    record = json.loads((tmp_path / "r.json").read_text())["images"][0]
    assert record["result"] == "failed" and "is not on this engine" in record["error"]


def building_with(output: str) -> str:
    """The line that names the builder ("building with ...")."""
    return next((line for line in output.splitlines() if line.startswith("building with ")), "")


def test_failing_run_step(api: docker.APIClient, private_base: str, builder_way: BuilderWay, tmp_path: Path) -> None:
    """Each builder's failure ends in the same short message: the step, its command's exit code (not the whole
    command again), the last log lines, the full log, what to try."""
    matrix_file, images = render_cpu_entry(tmp_path, "bad-apt",
                                           "    apt: [no-such-package-torchimages]\n    variants: [jupyter, ssh]\n")
    result = build_py("build", "--matrix", str(matrix_file), "--tag", "fail", "--images", str(images), "--plain",
                      *builder_way.options, "--base-image", private_base, "--report", str(tmp_path / "r.json"),
                      "--logs", str(tmp_path / "logs"), timeout=600, env=builder_way.env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert builder_way.says in building_with(result.stderr), result.stderr[:500]
    message = result.stderr.split("FAILED ", 1)[1].split("\nSKIPPED ", 1)[0]
    step, error = message.splitlines()[:2]
    assert re.match(r"bad-apt failed at (Step \d+/\d+ : |\[system \d+/\d+\] )RUN set -eux;", step), step
    assert len(step) < 260 and step.endswith(" ..."), f"the step is cut, its whole text is in the log: {step}"
    assert error == "  error: the step's command exited with code 100", error
    assert "Unable to locate package no-such-package-torchimages" in message, "the last log lines are shown"
    assert f"full log: {tmp_path / 'logs' / 'bad-apt.log'}" in message
    assert "try: fix the failing command" in message
    if builder_way.name == "classic":  # BuildKit commits no intermediate images
        assert re.search(r"removed [1-9]\d* intermediate images of the failed build", message), message
    tail = message.split("last log lines:")[1].split("full log:")[0].strip().splitlines()
    assert 0 < len(tail) <= 20
    assert not any(t for t in docker.APIClient().images(name="registry.example.com/ml/failures")
                   if "registry.example.com/ml/failures:fail-bad-apt" in (t.get("RepoTags") or []))
    # A failed base stops its variants: they are not started, and say why, each by name.
    records = {r["image"]: r for r in json.loads((tmp_path / "r.json").read_text())["images"]}
    for variant in ("bad-apt-jupyter", "bad-apt-ssh"):
        assert records[variant]["result"] == "skipped", records[variant]
        assert records[variant]["error"] == "its base bad-apt was not built", records[variant]
        assert f"SKIPPED {variant}: its base bad-apt was not built" in result.stderr
        assert f"{variant} started" not in result.stdout + result.stderr
    assert builder_way.says in records["bad-apt"]["builder"] and records["bad-apt-ssh"]["builder"] is None


def test_no_engine_is_a_clear_error(tmp_path: Path) -> None:
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    result = build_py("build", "--tag", "v2.7", "--only", "*cpu*", env=env, timeout=60)
    assert result.returncode == 2
    assert f"no Docker engine answers at unix://{tmp_path}/no-engine.sock" in result.stderr
    assert "scripts/start-engine.sh" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_signal_stops_the_build_and_leaves_no_tag(api: docker.APIClient, private_base: str, tmp_path: Path,
                                                        builder_way: BuilderWay, stop: signal.Signals) -> None:
    name = f"cancel-{uuid.uuid4().hex[:8]}"
    matrix_file, images = render_cpu_entry(tmp_path, name)
    containers_before = {c["Id"] for c in api.containers(all=True)}
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), "build", "--matrix", str(matrix_file), "--tag", "fail", "--images",
         str(images), "--plain", "--no-cache", *builder_way.options, "--base-image", private_base, "--logs",
         str(tmp_path / "logs"), "--report", str(tmp_path / "r.json")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=builder_way.env)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if " step " in line and "APT_MIRROR" in line:  # the apt step is running
            time.sleep(2)
            process.send_signal(stop)  # Ctrl-C in a terminal sends SIGINT to the process group
            break
    output = "".join(lines) + process.communicate(timeout=120)[0]
    assert process.returncode == 130, output
    assert "interrupted: running builds were stopped" in output
    tags = [t for image in api.images() for t in (image.get("RepoTags") or [])]
    assert f"registry.example.com/ml/failures:fail-{name}" not in tags
    time.sleep(1)
    left = {c["Id"] for c in api.containers(all=True)} - containers_before
    assert left == set(), f"intermediate containers left behind: {left}"
    assert builder_way.says in building_with(output), output[:500]
    still_building = [cmd for cmd in command_lines() if f"fail-{name}" in cmd]
    assert still_building == [], f"a docker CLI still builds after the stop: {still_building}"


def command_lines() -> list[str]:
    """The command line of every process on this machine."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # it ended meanwhile
            continue
    return found


def test_jobs_2_builds_variants_side_by_side_after_their_base(api: docker.APIClient, cpu_build: EntryBuild) -> None:
    """--jobs 2: neither variant starts before its base is built; then both run at once (the builder runs: the images'
    tags are set aside, or nothing would be built again)."""
    out = cpu_build.report_path.parent
    with tags_set_aside(api, list(cpu_build.tags.values())):
        result = build_py("build", "--matrix", str(cpu_build.matrix), "--tag", RELEASE, "--images", str(out / "images"),
                          "--only", f"{cpu_build.spec.name}*", "--plain", "--jobs", "2", *cpu_build.options,
                          "--report", str(out / "jobs2.json"), "--logs", str(out / "jobs2-logs"), env=cpu_build.env,
                          timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    at = event_times(result.stdout + result.stderr)
    base, jupyter, ssh = cpu_build.spec.name, f"{cpu_build.spec.name}-jupyter", f"{cpu_build.spec.name}-ssh"
    for variant in (jupyter, ssh):
        assert at[(variant, "started")] >= at[(base, "built")], f"{variant} started before its base was built"
    first, second = sorted((jupyter, ssh), key=lambda image: at[(image, "started")])
    assert at[(second, "started")] <= at[(first, "built")], "with --jobs 2 the variants did not build side by side"


def event_times(output: str) -> dict[tuple[str, str], float]:
    """(image, event) -> seconds since the build began, from the --plain lines ("HH:MM:SS +  12.3s IMAGE EVENT ...")."""
    found = {}
    for match in re.finditer(r"^\S+ \+\s*([\d.]+)s (\S+) (started|built|failed|skipped)\b", output, re.M):
        found.setdefault((match.group(2), match.group(3)), float(match.group(1)))
    return found
