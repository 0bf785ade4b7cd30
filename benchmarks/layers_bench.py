"""What a user moves after a small change (issue 32): one entry's base image, before and after a change of layout, in
one run. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/layers_bench.py --before REV [--entry NAME] [--builder buildkit] [--package six] \
        -- BUILD INPUTS
    e.g. ... --before f1dc182 -- --base-image torchimages/debian:bookworm-minbase --wheelhouse .cache/wheelhouse --offline

Runs as root on a machine with a Docker engine (scripts/start-engine.sh). For each tree (REV, checked out in a
temporary git worktree, then this checkout), with the same build inputs and a private registry started here:
1. cold: `build --no-cache` of the entry's base image, then two no-op rebuilds (the builder's cache): the second is
   the no-op figure, the first is printed beside it (it sends the whole context again after --no-cache);
2. push to the registry (release 1);
3. the entry with one small package added to its `pip:` (PACKAGE, which the wheelhouse must hold), rebuilt with the
   builder's cache, and pushed to the same repository (release 2): the bytes the registry received for it;
4. a cold pull of release 2 by an empty engine (its own dockerd and data root): its time, its layers and the largest
   layer's share of the bytes (a pull fetches layers in parallel, so the largest bounds it).
Goals (issue 32): bytes pushed after the change under 2 % of the image; the rebuild after it under 15 % of cold;
a no-op rebuild under 5 % of cold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cache_bench import empty_engine, registry  # noqa: E402

from torchimages.input import matrix, specs  # noqa: E402

REPOSITORY = "bench/layers"


@dataclass
class Figures:
    tree: str
    cold: float = 0.0
    noop: float = 0.0
    after_no_cache: float = 0.0  # the rebuild right after the cold --no-cache build
    change: float = 0.0
    image_bytes: int = 0  # the image's layers, compressed, as pushed
    pushed_first: int = 0
    pushed_after_change: int = 0
    pull: float = 0.0
    layers: int = 0
    largest: int = 0


def run(command: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT) -> float:
    """Run a command; its wall time. A failure stops the benchmark with the command's last output."""
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(command[:4])} ... failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    return took


def entry_matrix(tree: Path, name: str, folder: Path, package: str | None) -> Path:
    """The tree's matrix.yaml with only the entry `name` (and `package` added to its pip:)."""
    document = yaml.safe_load((tree / "matrix.yaml").read_text())
    plan = specs.resolve(matrix.load(tree / "matrix.yaml"))
    index = next(i for i, spec in enumerate(plan.specs) if spec.name == name)
    entry = dict(document["images"][int(plan.specs[index].origin.split("[")[1].split("]")[0])])
    entry["variants"] = []
    if package:
        entry["pip"] = [*entry.get("pip", []), package]
    path = folder / f"matrix-{'changed' if package else 'entry'}.yaml"
    path.write_text(yaml.safe_dump({**document, "images": [entry]}, sort_keys=False))
    return path


def stored_bytes(data: Path) -> int:
    """The bytes of every blob the registry holds."""
    blobs = data / "docker" / "registry" / "v2" / "blobs"
    return sum(path.stat().st_size for path in blobs.rglob("data")) if blobs.exists() else 0


def push(local: str, remote: str, config: Path, data: Path) -> int:
    """Tag and push; the bytes the registry received."""
    before = stored_bytes(data)
    run(["docker", "tag", local, remote])
    run(["docker", "--config", str(config), "push", remote])
    return stored_bytes(data) - before


def manifest_layers(host: str, tag: str, password: str, ca: Path) -> list[int]:
    response = requests.get(f"https://{host}/v2/{REPOSITORY}/manifests/{tag}", auth=("bench", password), verify=str(ca),
                            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"}, timeout=60)
    response.raise_for_status()
    return [layer["size"] for layer in response.json()["layers"]]


@dataclass(frozen=True)
class Target:
    """The registry started here, and a docker config logged in to it."""

    host: str
    password: str
    config: Path
    folder: Path


def measure(tree: Path, label: str, args: argparse.Namespace, folder: Path, target: Target) -> Figures:
    host, password, config = target.host, target.password, target.config
    figures = Figures(label)
    work = folder / label
    work.mkdir()
    build = [sys.executable, str(tree / "build.py"), "build", "--only", args.entry, "--builder", args.builder, "--plain",
             "--logs", str(work / "logs"), *args.inputs]
    first = entry_matrix(tree, args.entry, work, None)
    changed = entry_matrix(tree, args.entry, work, args.package)
    render = [sys.executable, str(tree / "build.py"), "render"]
    run([*render, "--matrix", str(first), "--tag", f"{label}-1", "--out", str(work / "images")], cwd=tree)
    run([*render, "--matrix", str(changed), "--tag", f"{label}-2", "--out", str(work / "images2")], cwd=tree)
    release = ["--matrix", str(first), "--tag", f"{label}-1", "--images", str(work / "images"),
               "--report", str(work / "r1.json")]
    figures.cold = run([*build, *release, "--no-cache"], cwd=tree)
    # The first build after a --no-cache one sends the whole context again (BuildKit keeps no context of a build that
    # used no cache: 2.9 GB, about 28 s, for the CUDA entry); the no-op a user sees follows a build that used the cache.
    figures.after_no_cache = run([*build, *release], cwd=tree)
    figures.noop = run([*build, *release], cwd=tree)
    tag = json.loads((work / "r1.json").read_text())["images"][0]["tag"]
    data = target.folder / "data"
    figures.pushed_first = push(tag, f"{host}/{REPOSITORY}:{label}-1", config, data)
    figures.change = run([*build, "--matrix", str(changed), "--tag", f"{label}-2", "--images", str(work / "images2"),
                          "--report", str(work / "r2.json")], cwd=tree)
    tag = json.loads((work / "r2.json").read_text())["images"][0]["tag"]
    remote = f"{host}/{REPOSITORY}:{label}-2"
    figures.pushed_after_change = push(tag, remote, config, data)
    sizes = manifest_layers(host, f"{label}-2", password, target.folder / "ca.crt")
    figures.image_bytes, figures.layers, figures.largest = sum(sizes), len(sizes), max(sizes)
    with empty_engine(folder / f"engine-{label}") as address:
        started = time.perf_counter()
        for chunk in docker.APIClient(base_url=address, timeout=1800).pull(
                remote, stream=True, decode=True, auth_config={"username": "bench", "password": password}):
            if "error" in chunk:
                sys.exit(f"pulling {remote}: {chunk['error']}")
        figures.pull = time.perf_counter() - started
    # A CUDA-sized tree holds about 20 GB here: its images and the empty engine's copy go before the next tree
    shutil.rmtree(folder / f"engine-{label}", ignore_errors=True)
    for report in ("r1.json", "r2.json"):
        for record in json.loads((work / report).read_text())["images"]:
            subprocess.run(["docker", "rmi", "--force", record["tag"]], capture_output=True, check=False)
    subprocess.run(["docker", "rmi", "--force", f"{host}/{REPOSITORY}:{label}-1", remote], capture_output=True,
                   check=False)
    subprocess.run(["docker", "builder", "prune", "--all", "--force"], capture_output=True, check=False)
    return figures


def report(rows: list[Figures]) -> None:
    mb = 1e6
    print(f"\n{'tree':<10} {'cold s':>7} {'no-op':>12} {'pip change':>14} {'pushed after change':>24} "
          f"{'layers':>6} {'largest layer':>18} {'cold pull s':>11}")
    for f in rows:
        print(f"{f.tree:<10} {f.cold:7.1f} {f.noop:6.1f} {f.noop / f.cold:5.1%} {f.change:7.1f} {f.change / f.cold:6.1%} "
              f"{f.pushed_after_change / mb:12.1f} MB {f.pushed_after_change / f.image_bytes:8.2%} {f.layers:6d} "
              f"{f.largest / mb:9.0f} MB {f.largest / f.image_bytes:6.1%} {f.pull:11.1f}")
    print("(no-op: the second rebuild; the first one after the --no-cache build: "
          + ", ".join(f"{f.tree} {f.after_no_cache:.1f} s {f.after_no_cache / f.cold:.1%}" for f in rows) + ")")
    print(f"(image: {rows[-1].image_bytes / mb:.0f} MB compressed; the first push of each tree: "
          + ", ".join(f"{f.tree} {f.pushed_first / mb:.0f} MB" for f in rows) + ")")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the commit of the layout to compare with")
    parser.add_argument("--entry", default="torch2.13.0-cpu-py3.11")
    parser.add_argument("--builder", default="buildkit", choices=["buildkit", "classic"])
    parser.add_argument("--package", default="six", help="the small package the change adds (in the wheelhouse)")
    parser.add_argument("inputs", nargs="*", help="build inputs after --, e.g. --wheelhouse DIR --offline")
    args = parser.parse_args()
    # Paths among the build inputs are the same files for both trees
    args.inputs = [str(Path(value).resolve()) if not value.startswith("-") and Path(value).exists() else value
                   for value in args.inputs]
    with tempfile.TemporaryDirectory(prefix="layers-bench-") as tmp:
        folder = Path(tmp)
        before = folder / "before-tree"
        run(["git", "worktree", "add", "--detach", str(before), args.before])
        try:
            with registry(folder / "registry") as (host, password):
                config = folder / "docker-config"
                config.mkdir()
                subprocess.run(["docker", "--config", str(config), "login", host, "-u", "bench", "--password-stdin"],
                               input=password, text=True, check=True, capture_output=True)
                target = Target(host, password, config, folder / "registry")
                rows = [measure(before, "before", args, folder, target), measure(ROOT, "after", args, folder, target)]
        finally:
            run(["git", "worktree", "remove", "--force", str(before)])
    print(f"entry {args.entry}, builder {args.builder}, change: pip + [{args.package}]")
    report(rows)


if __name__ == "__main__":
    os.environ.setdefault("DOCKER_CONFIG", str(ROOT / ".cache" / "docker-config"))
    main()
