#!/usr/bin/env python3
"""Are the same inputs the same layers? Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/reproducible_layers.py                      # the CPU entry, both builders
    .venv/bin/python benchmarks/reproducible_layers.py --entry torch2.3.1-cu121-cudnn8.9-py3.11 --builders classic

Builds one entry's base image twice with --no-cache, each on a clean builder state (BuildKit's cache pruned before
each build; the classic builder with --no-cache reuses nothing), from the same base image and wheelhouse (made as
build_bench.py makes them), under two releases. Then prints, per layer, whether its uncompressed diff ID is the same in
both images, with the layer's size and the instruction that made it; the share of the image's bytes in layers that are
the same; and the share of the environment's files (/opt/venv, /opt/python, /etc/pip) whose sha256 is the same, with
the first few that differ. The environment layers are the torch layer and the `pip:` layer (docs/building.md,
"Reproducible layers").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from build_bench import prepare, sh  # noqa: E402

from torchimages.input import matrix, specs  # noqa: E402

ENVIRONMENT = ("/opt/venv", "/opt/python", "/etc/pip")


def build(out: Path, release: str, spec: specs.ImageSpec, inputs: tuple[str, Path], builder: str) -> tuple[str, float]:
    """A --no-cache build of the entry's base image on a clean builder state (from `inputs`, its base image and
    wheelhouse); its tag and seconds."""
    base, wheelhouse = inputs
    sh("docker", "builder", "prune", "--all", "--force")
    images = out / release / "images"
    sh(sys.executable, "build.py", "render", "--tag", release, "--out", str(images))
    started = time.monotonic()
    subprocess.run([sys.executable, "build.py", "build", "--tag", release, "--images", str(images), "--only", spec.name,
                    "--plain", "--no-cache", "--builder", builder, "--base-image", base, "--wheelhouse", str(wheelhouse),
                    "--offline", "--report", str(out / release / "report.json"), "--logs", str(out / release / "logs")],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads((out / release / "report.json").read_text())
    return report["images"][0]["tag"], time.monotonic() - started


def saved_layers(api: docker.APIClient, tag: str) -> list[tuple[int, str]]:
    """Each layer's uncompressed size and the instruction that made it, in RootFS order, from the image as `docker save`
    streams it (its configuration's history says which entries made a layer: `empty_layer`)."""
    sizes: dict[str, int] = {}
    texts: dict[str, bytes] = {}
    with tarfile.open(fileobj=_Chunks(api.get_image(tag)), mode="r|") as saved:
        for member in saved:
            sizes[member.name] = member.size
            if member.name.endswith(".json") or (member.size < 1 << 20 and "blobs/" in member.name):
                data = saved.extractfile(member)
                texts[member.name] = data.read() if data else b""
    [manifest] = json.loads(texts["manifest.json"])
    history = json.loads(texts[manifest["Config"]]).get("history", [])
    made = [" ".join(entry.get("created_by", "").replace("/bin/bash -o pipefail -c ", "").split())[:70]
            for entry in history if not entry.get("empty_layer")]
    made = made if len(made) == len(manifest["Layers"]) else ["?"] * len(manifest["Layers"])
    return [(sizes[name], words) for name, words in zip(manifest["Layers"], made, strict=True)]


class _Chunks:
    """A file over the chunks `docker save` streams, for tarfile's stream mode."""

    def __init__(self, chunks: object) -> None:
        self.chunks, self.rest = iter(chunks), b""  # type: ignore[call-overload]

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.rest) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.rest += chunk
        taken, self.rest = (self.rest, b"") if size < 0 else (self.rest[:size], self.rest[size:])
        return taken


def file_hashes(api: docker.APIClient, tag: str) -> dict[str, str]:
    """path -> sha256 of every regular file of the environment, read in a container of the image."""
    script = f"find {' '.join(ENVIRONMENT)} -type f -print0 2>/dev/null | xargs -0 -r sha256sum"
    container = api.create_container(tag, ["sh", "-c", script], user="0:0", entrypoint=[])
    try:
        api.start(container)
        api.wait(container, timeout=600)
        text = api.logs(container, stderr=False).decode()
    finally:
        api.remove_container(container, force=True)
    return {line[66:]: line[:64] for line in text.splitlines() if len(line) > 66}


def compare(api: docker.APIClient, builder: str, first: str, second: str) -> None:
    one, other = api.inspect_image(first)["RootFS"]["Layers"], api.inspect_image(second)["RootFS"]["Layers"]
    layers = saved_layers(api, first)
    sizes = [size for size, _ in layers]
    same_bytes = 0
    print(f"[{builder}] {'layer':>5} {'diff ID':>8} {'MB':>9}  instruction")
    for index, (a, b) in enumerate(zip(one, other, strict=False)):
        same = a == b
        same_bytes += sizes[index] if same else 0
        print(f"[{builder}] {index:5} {'same' if same else 'DIFFERS':>8} {sizes[index] / 1e6:9.3f}  {layers[index][1]}")
    if len(one) != len(other):
        print(f"[{builder}] the images have {len(one)} and {len(other)} layers")
    print(f"[{builder}] bytes in layers that are the same: {same_bytes / 1e6:.1f} of {sum(sizes) / 1e6:.1f} MB, "
          f"{same_bytes / sum(sizes):.1%}")
    files, again = file_hashes(api, first), file_hashes(api, second)
    differing = sorted(path for path in files.keys() | again.keys() if files.get(path) != again.get(path))
    print(f"[{builder}] environment files ({', '.join(ENVIRONMENT)}) with the same sha256: "
          f"{len(files) - len(differing)} of {len(files | again)}, {(len(files | again) - len(differing)) / len(files | again):.2%}")
    for path in differing[:8]:
        print(f"[{builder}]   differs: {path}")


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
    with tempfile.TemporaryDirectory() as tmp:
        for builder in args.builders.split(","):
            first, seconds = build(Path(tmp), f"repro-{builder}-1", spec, (base, wheelhouse), builder)
            second, again = build(Path(tmp), f"repro-{builder}-2", spec, (base, wheelhouse), builder)
            print(f"[{builder}] {spec.name}: two --no-cache builds on a clean builder state, {seconds:.0f} s and {again:.0f} s")
            compare(api, builder, first, second)
            for tag in (first, second):
                api.remove_image(tag)


if __name__ == "__main__":
    main()
