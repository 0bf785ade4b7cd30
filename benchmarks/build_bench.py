#!/usr/bin/env python3
"""Build benchmark for the CI entry (the CPU image and its variants). Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/build_bench.py

Measures in one run: cold build seconds (--no-cache), a warm no-op rebuild and their ratio, each
image's size, the bytes each variant adds over its base, whether the variants share every base
layer, and each image's size against its floor (the base OS image plus what is installed, measured
in the image: dpkg's installed sizes over the base OS, and /opt/venv, /opt/python, /etc/pip).
Targets: warm <= 5 % of cold; variants share every base layer; size within 5 % of the floor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "torchimages/debian:bookworm-minbase"
GLOB = "torch*-cpu-py*"
RELEASE = "bench"
MEASURE = ("dpkg-query -W -f='${Installed-Size}\\n' | awk '{s+=$1} END {print s*1024}'; "
           "du -sb /opt/venv /opt/python /etc/pip 2>/dev/null | awk '{s+=$1} END {print s+0}'")


def sh(*command: str) -> str:
    return subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def build(out: Path, *extra: str) -> tuple[float, dict]:
    report = out / f"report{len(list(out.glob('report*')))}.json"
    started = time.monotonic()
    subprocess.run([sys.executable, "build.py", "build", "--tag", RELEASE, "--images", str(out / "images"),
                    "--only", GLOB, "--plain", "--base-image", BASE_IMAGE, "--wheelhouse", str(ROOT / ".cache/wheelhouse"),
                    "--offline", "--report", str(report), "--logs", str(out / "logs"), *extra],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started, json.loads(report.read_text())


def installed_bytes(api: docker.APIClient, image: str) -> tuple[int, int]:
    """(dpkg installed bytes, bytes under /opt/venv, /opt/python, /etc/pip) measured in the image."""
    container = api.create_container(image, entrypoint=["/bin/sh", "-c"], command=[MEASURE], user="0")
    try:
        api.start(container)
        api.wait(container, timeout=120)
        dpkg, files = api.logs(container, stderr=False).decode().split()
    finally:
        api.remove_container(container, force=True)
    return int(dpkg), int(files)


def main() -> None:
    sh("bash", "scripts/start-engine.sh")
    sh("bash", "scripts/make-base-image.sh", BASE_IMAGE)
    sh("bash", "scripts/make-ci-wheelhouse.sh", ".cache/wheelhouse")
    api = docker.APIClient(version="auto")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        sh(sys.executable, "build.py", "render", "--tag", RELEASE, "--out", str(out / "images"))
        cold_total, cold = build(out, "--no-cache")
        warm_total, warm = build(out)
    base_os = api.inspect_image(BASE_IMAGE)["Size"]
    os_dpkg, _ = installed_bytes(api, BASE_IMAGE)
    print(f"cold build (--no-cache), total {cold_total:.1f} s; warm no-op rebuild {warm_total:.1f} s; "
          f"ratio {warm_total / cold_total:.1%} (target <= 5 %)")
    print(f"{'image':34} {'cold s':>7} {'warm s':>7} {'size MB':>9} {'adds MB':>8} {'floor MB':>9} {'size/floor':>10}")
    base_layers = None
    for record, again in zip(cold["images"], warm["images"], strict=True):
        dpkg, files = installed_bytes(api, record["tag"])
        floor = base_os + (dpkg - os_dpkg) + files
        layers = api.inspect_image(record["tag"])["RootFS"]["Layers"]
        if record["variant"] == "base":
            base_layers = layers
        shared = "" if record["variant"] == "base" else (
            "  shares every base layer" if layers[: len(base_layers)] == base_layers else "  DOES NOT share base layers")
        adds = f"{record['adds_bytes'] / 1e6:8.1f}" if record["adds_bytes"] else f"{'-':>8}"
        print(f"{record['image']:34} {record['build_seconds']:7.1f} {again['build_seconds']:7.1f} "
              f"{record['size_bytes'] / 1e6:9.1f} {adds} {floor / 1e6:9.1f} {record['size_bytes'] / floor:10.3f}{shared}")
    print(f"base OS image {BASE_IMAGE}: {base_os / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
