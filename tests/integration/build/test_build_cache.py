"""An interrupted --no-cache build leaves the user's cache whole: the tool removes what the interrupted build
committed, so the classic builder, which takes the newest child of a parent as the cache hit, finds the last
good build's chain again and the next build reuses every step."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from ..conftest import RELEASE, ROOT, EntryBuild, build_py, tags_set_aside

pytestmark = [pytest.mark.lane("main")]


def test_an_interrupted_no_cache_build_keeps_the_cache_of_the_last_build(api: docker.APIClient, cpu_build: EntryBuild,
                                                                          tmp_path: Path) -> None:
    name, out = cpu_build.spec.name, cpu_build.report_path.parent
    args = ["build", "--matrix", str(cpu_build.matrix), "--tag", RELEASE, "--images", str(out / "images"), "--only", name,
            "--plain", *cpu_build.options]
    process = subprocess.Popen([sys.executable, str(ROOT / "build.py"), *args, "--no-cache", "--report",
                                str(tmp_path / "interrupted.json"), "--logs", str(tmp_path / "interrupted")],
                               cwd=ROOT, env=cpu_build.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if " step " in line and "APT_MIRROR" in line:  # the apt step runs: earlier steps committed new images
            time.sleep(2)
            process.send_signal(signal.SIGTERM)
            break
    output = "".join(lines) + process.communicate(timeout=300)[0]
    assert process.returncode == 130, output[-3000:]
    removed = re.search(r"removed (\d+) intermediate images of the cancelled build", (tmp_path / "interrupted" /
                                                                                       f"{name}.log").read_text())
    assert removed and int(removed.group(1)) > 0, output[-3000:]

    # The last good image is still under its tag, and an image already here is not built again (jobs.py): its tag is set
    # aside for the rebuild, so that the builder itself shows its cache is whole.
    with tags_set_aside(api, [cpu_build.tags["base"]]):
        rebuilt = build_py(*args, "--report", str(tmp_path / "rebuilt.json"), "--logs", str(tmp_path / "rebuilt"),
                           env=cpu_build.env, timeout=900)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    log = (tmp_path / "rebuilt" / f"{name}.log").read_text()
    steps = re.findall(r"^Step \d+/\d+ : (\S+)", log, re.M)
    first_from = steps.index("FROM")
    cacheable = [s for s in steps[first_from:] if s != "FROM"]  # global ARGs and FROM commit nothing
    assert log.count(" ---> Using cache") == len(cacheable), f"steps rebuilt after the interrupted build:\n{log[-3000:]}"
    assert api.inspect_image(cpu_build.tags["base"])["Id"] == cpu_build.record("base")["image_id"], (
        "the rebuild made another image than the last good build")
