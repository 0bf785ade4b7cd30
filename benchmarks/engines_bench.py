#!/usr/bin/env python3
"""One entry on both engine generations, side by side: cold build, no-op rebuild, push and pull, with each builder.
Prints numbers; asserts nothing (docs/engines.md, docs/performance.md).

    .venv/bin/python benchmarks/engines_bench.py                       # the CPU entry, base image only
    .venv/bin/python benchmarks/engines_bench.py --entry torch2.3.1-cu121-cudnn8.9-py3.11 --torch-index-url \\
        https://pypi.org/simple --ca-bundle /etc/ssl/certs/ca-certificates.crt

The engines: the first (DOCKER_HOST, Debian 12's dockerd 20.10, the classic store) and the current one
(TORCHIMAGES_CURRENT_ENGINE, dockerd 26 with the containerd store: scripts/start-current-engine.sh), each holding the
Debian base (docker save | docker load). For each engine and
builder, in one run: `build.py build --no-cache` of the entry's base image (cold), the same again (no-op: the tool
finds the image it built), `docker push` to a local registry (scripts/start-registry.sh; the classic store compresses
the layers here, the containerd store did at the build), then the image removed and pulled back by digest. The
last column gives each time as a share of 20.10's classic builder's.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchimages.input import matrix, specs  # noqa: E402

ENGINES = {"20.10": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
           "26 containerd": os.environ.get("TORCHIMAGES_CURRENT_ENGINE", "unix:///var/run/torchimages-current.sock")}
BASE = "torchimages/debian:bookworm-minbase"


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command[:4])} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return time.monotonic() - started


def registry(folder: Path) -> tuple[str, str]:
    password = secrets.token_hex(8)
    subprocess.run(["bash", "scripts/start-registry.sh", str(folder), "45998", "bench"], cwd=ROOT, input=password + "\n",
                   text=True, check=True, capture_output=True)
    return "127.0.0.1:45998", password


def measure(engine: str, builder: str, spec: specs.ImageSpec, options: list[str], *, registry_at: tuple[str, str],
            folder: Path) -> dict[str, float]:
    host, password = registry_at
    env = dict(os.environ, DOCKER_HOST=engine)
    images = folder / "images"
    build = [sys.executable, "build.py", "build", "--tag", "bench", "--only", spec.name, "--builder", builder,
             "--images", str(images), "--plain", "--report", str(folder / "report.json"), "--logs", str(folder / "logs"),
             *options]
    subprocess.run([sys.executable, "build.py", "render", "--tag", "bench", "--out", str(images)], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    figures = {"cold build": timed([*build, "--no-cache"], env), "no-op rebuild": timed(build, env)}
    record = json.loads((folder / "report.json").read_text())["images"][0]
    api = docker.APIClient(base_url=engine, version="auto", timeout=3600)
    target = f"{host}/bench/{builder}-{engine.rsplit('/', 1)[-1].replace('.', '-')}"
    api.tag(record["tag"], target, "cold")
    auth = {"username": "bench", "password": password}
    started = time.monotonic()
    said = [chunk for chunk in api.push(target, "cold", stream=True, decode=True, auth_config=auth)]
    figures["push"] = time.monotonic() - started
    if errors := [chunk for chunk in said if "error" in chunk]:
        sys.exit(f"push failed: {errors[:1]}")
    digest = next(str(c["status"]).split("digest: ")[1].split()[0] for c in said if "digest: " in str(c.get("status")))
    for reference in (f"{target}:cold", record["tag"]):
        api.remove_image(reference, force=True)
    api.prune_images()
    started = time.monotonic()
    for chunk in api.pull(target, tag=digest, stream=True, decode=True, auth_config=auth):
        if "error" in chunk:
            sys.exit(f"pull failed: {chunk['error']}")
    figures["pull"] = time.monotonic() - started
    figures["size GB"] = (record["size_bytes"] or 0) / 1e9
    api.remove_image(f"{target}@{digest}", force=True)
    return figures


def main() -> None:
    plan = specs.resolve(matrix.load(ROOT / "matrix.yaml"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entry", default=next(s.name for s in plan.specs if s.flavor == "cpu"))
    parser.add_argument("--builders", default="classic,buildkit")
    parser.add_argument("--torch-index-url")
    parser.add_argument("--ca-bundle")
    args = parser.parse_args()
    spec = next(s for s in plan.specs if s.name == args.entry)
    options = ["--base-image", BASE]
    if args.torch_index_url:
        options += ["--torch-index-url", args.torch_index_url, "--ca-bundle", args.ca_bundle or ""]
    else:
        options += ["--wheelhouse", str(ROOT / ".cache" / "wheelhouse"), "--offline"]
    with tempfile.TemporaryDirectory(prefix="engines-bench-") as tmp:
        registry_at = registry(Path(tmp) / "registry")
        rows = {}
        for name, engine in ENGINES.items():
            for builder in args.builders.split(","):
                folder = Path(tmp) / f"{builder}-{len(rows)}"
                folder.mkdir()
                rows[f"{name} {builder}"] = measure(engine, builder, spec, options, registry_at=registry_at, folder=folder)
                print(f"{name} {builder}: " + ", ".join(f"{k} {v:.1f}" for k, v in rows[f"{name} {builder}"].items()),
                      flush=True)
        os.kill(int((Path(tmp) / "registry" / "registry.pid").read_text()), 15)
    first = rows.get("20.10 classic") or next(iter(rows.values()))
    print(f"\n{spec.name}, base image: seconds (and x 20.10 classic)")
    print(f"{'engine, builder':28} " + " ".join(f"{k:>20}" for k in first))
    for label, figures in rows.items():
        print(f"{label:28} " + " ".join(f"{v:>10.1f} ({v / first[k]:4.2f}x)" if first[k] else f"{v:>20.1f}"
                                        for k, v in figures.items()))


if __name__ == "__main__":
    main()
