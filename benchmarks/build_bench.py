#!/usr/bin/env python3
"""Build benchmark for one matrix entry and its variants. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/build_bench.py                      # the CPU entry (CI's image)
    .venv/bin/python benchmarks/build_bench.py --entry torch2.3.1-cu121-cudnn8.9-py3.11
    .venv/bin/python benchmarks/build_bench.py --builders buildkit  # one backend only [classic,buildkit]

The base image and wheelhouse are made the way CI makes them: a Debian base (a local CUDA base for a cuda
entry) and an offline wheelhouse in .cache/. Measures in one run: cold build seconds (--no-cache), a warm
no-op rebuild and their ratio, each image's size, the bytes each variant adds over its base, whether the
variants share every base layer, and each image's size against its floor (the build report's floor: the
OS base plus what was installed, each file counted once).
Each backend (--builder classic: the Docker SDK; buildkit: a docker CLI) is measured in turn in the same run, and
the side-by-side table gives BuildKit's cold and warm times as a share of the classic builder's.
Targets: warm <= 5 % of cold; variants share every base layer; size within 5 % of the floor; BuildKit cold
<= 0.6x classic on the CUDA entry (issue 14).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchimages.input import matrix, specs  # noqa: E402
from torchimages.settings import SETTINGS  # noqa: E402

DEBIAN = "torchimages/debian:bookworm-minbase"
DEBIAN_PYTHON = "3.11.2"
RELEASE = "bench"


def sh(*command: str) -> str:
    return subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def prepare(spec: specs.ImageSpec) -> tuple[str, Path]:
    """The base image and wheelhouse for the entry, made if missing."""
    sh("bash", "scripts/start-engine.sh")
    sh("bash", "scripts/make-base-image.sh", DEBIAN)
    if spec.flavor == "cpu":
        sh("bash", "scripts/make-ci-wheelhouse.sh", ".cache/wheelhouse", spec.torch, SETTINGS.jupyterlab, SETTINGS.notebook)
        return DEBIAN, ROOT / ".cache/wheelhouse"
    if spec.flavor != "cuda":
        raise SystemExit(f"{spec.name}: only cpu and cuda entries can be built here")
    base = f"torchimages/cuda:{spec.cuda_image}-base-debian12"
    sh("bash", "scripts/make-cuda-base-image.sh", spec.cuda_image, base, DEBIAN)
    wheelhouse = ROOT / ".cache" / f"wheelhouse-{spec.torch_variant}"
    sh("bash", "scripts/make-wheelhouse.sh", str(wheelhouse), DEBIAN_PYTHON, f"torch=={spec.torch}", *spec.domain_pins,
       "numpy", f"jupyterlab=={SETTINGS.jupyterlab}", f"notebook=={SETTINGS.notebook}", "ipykernel")
    return base, wheelhouse


def build(out: Path, spec: specs.ImageSpec, base: str, wheelhouse: Path, *extra: str) -> tuple[float, dict]:
    """Build into one report path, as users do (a no-op rebuild then reuses the floors measured before)."""
    report = out / "report.json"
    started = time.monotonic()
    subprocess.run([sys.executable, "build.py", "build", "--tag", RELEASE, "--images", str(out / "images"),
                    "--only", f"{spec.name}*", "--plain", "--base-image", base, "--wheelhouse", str(wheelhouse),
                    "--offline", "--report", str(report), "--logs", str(out / "logs"), *extra],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started, json.loads(report.read_text())


def interrupt_at_apt(out: Path, spec: specs.ImageSpec, base: str, wheelhouse: Path, builder: str) -> None:
    """A --no-cache build of the base stopped with SIGTERM once its apt step runs (as a user's Ctrl-C would)."""
    command = [sys.executable, "build.py", "build", "--tag", RELEASE, "--images", str(out / "images"), "--only", spec.name,
               "--plain", "--no-cache", "--base-image", base, "--wheelhouse", str(wheelhouse), "--offline",
               "--report", str(out / "interrupted.json"), "--logs", str(out / "interrupted-logs"), "--builder", builder]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout:
            if " step " in line and "APT_MIRROR" in line:
                time.sleep(2)
                process.send_signal(signal.SIGTERM)
                break
        process.communicate(timeout=300)


def measure(out: Path, spec: specs.ImageSpec, base: str, wheelhouse: Path, builder: str) -> dict:
    """Cold, warm, and warm after an interrupted --no-cache build, with one backend."""
    # Cold means cold for both: BuildKit would otherwise reuse the build context it synced before (not its layers,
    # which --no-cache already ignores).
    sh("docker", "builder", "prune", "--all", "--force")
    cold_total, cold = build(out, spec, base, wheelhouse, "--no-cache", "--builder", builder)
    warm_total, warm = build(out, spec, base, wheelhouse, "--builder", builder)
    interrupt_at_apt(out, spec, base, wheelhouse, builder)
    after_total, _ = build(out, spec, base, wheelhouse, "--builder", builder)
    print(f"[{builder}] {spec.name} on {base}: cold build (--no-cache), total {cold_total:.1f} s; warm no-op rebuild "
          f"{warm_total:.1f} s; ratio {warm_total / cold_total:.1%} (target <= 5 %)")
    print(f"[{builder}] no-op rebuild after a --no-cache build interrupted at its apt step: {after_total:.1f} s, "
          f"{after_total / cold_total:.1%} of cold (target <= 5 %: the cache stays whole)")
    return {"cold": cold_total, "warm": warm_total, "cold_report": cold, "warm_report": warm}


def print_images(api: docker.APIClient, builder: str, cold: dict, warm: dict) -> None:
    print(f"[{builder}] {'image':44} {'cold s':>7} {'warm s':>7} {'size MB':>9} {'adds MB':>8} {'floor MB':>9} "
          f"{'size/floor':>10}")
    base_layers: list[str] = []
    for record, again in zip(cold["images"], warm["images"], strict=True):
        layers = api.inspect_image(record["tag"])["RootFS"]["Layers"]
        if record["variant"] == "base":
            base_layers = layers
        shared = "" if record["variant"] == "base" else (
            "  shares every base layer" if layers[: len(base_layers)] == base_layers else "  DOES NOT share base layers")
        adds = f"{record['adds_bytes'] / 1e6:8.1f}" if record["adds_bytes"] else f"{'-':>8}"
        floor = record["floor_bytes"]
        print(f"[{builder}] {record['image']:44} {record['build_seconds']:7.1f} {again['build_seconds']:7.1f} "
              f"{record['size_bytes'] / 1e6:9.1f} {adds} {floor / 1e6:9.1f} {record['size_bytes'] / floor:10.3f}{shared}")


def main() -> None:
    plan = specs.resolve(matrix.load(ROOT / "matrix.yaml"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entry", default=next(s.name for s in plan.specs if s.flavor == "cpu"),
                        help="matrix entry (base image name) to build [the CPU entry]")
    parser.add_argument("--builders", default="classic,buildkit", help="backends to measure, in this order")
    args = parser.parse_args()
    spec = next((s for s in plan.specs if s.name == args.entry), None)
    if spec is None:
        raise SystemExit(f"no entry {args.entry!r}; entries: {', '.join(s.name for s in plan.specs)}")
    base, wheelhouse = prepare(spec)
    api = docker.APIClient(version="auto")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        sh(sys.executable, "build.py", "render", "--tag", RELEASE, "--out", str(out / "images"))
        for builder in args.builders.split(","):
            results[builder] = measure(out, spec, base, wheelhouse, builder)
            print_images(api, builder, results[builder]["cold_report"], results[builder]["warm_report"])
    print(f"base image {base}: {api.inspect_image(base)['Size'] / 1e6:.1f} MB")
    if {"classic", "buildkit"} <= results.keys():
        classic, buildkit = results["classic"], results["buildkit"]
        print(f"| {spec.name} | classic s | BuildKit s | BuildKit / classic |")
        print("|---|---|---|---|")
        for phase in ("cold", "warm"):
            print(f"| {phase} | {classic[phase]:.1f} | {buildkit[phase]:.1f} | {buildkit[phase] / classic[phase]:.2f}x |")


if __name__ == "__main__":
    main()
