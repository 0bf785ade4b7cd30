"""What a test session left on an engine: the images and containers made since a snapshot, less the bases that setup
and the session make on purpose and keep (torchimages/*: debootstrap and CUDA bases, slow to make again; free-disk.sh
keeps them too) with the layers under them. .ci/run takes a snapshot of each engine before the tests and checks after.

    usage: engine-leftovers.py snapshot FILE | engine-leftovers.py check FILE   (the engine: DOCKER_HOST)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import docker

KEPT_BASES = "torchimages/"


def state(api: docker.APIClient) -> dict[str, list[str]]:
    return {"images": sorted(i["Id"] for i in api.images(all=True)),
            "containers": sorted(c["Id"] for c in api.containers(all=True))}


def bases_and_their_layers(api: docker.APIClient) -> set[str]:
    """The kept bases and every image under them (their parents: a base made by a Dockerfile has some)."""
    kept = set()
    for image in api.images(all=True):
        if any(tag.startswith(KEPT_BASES) for tag in image.get("RepoTags") or ()):
            reference = image["Id"]
            while reference and reference not in kept:
                kept.add(reference)
                try:
                    reference = api.inspect_image(reference).get("Parent") or ""
                except docker.errors.NotFound:  # the containerd store names a parent it does not list
                    reference = ""
    return kept


def leftovers(api: docker.APIClient, before: dict[str, list[str]]) -> list[str]:
    now = state(api)
    images = set(now["images"]) - set(before["images"]) - bases_and_their_layers(api)
    containers = set(now["containers"]) - set(before["containers"])
    sizes = {i["Id"]: i["Size"] for i in api.images(all=True)}
    return [f"image {i[7:19]} ({sizes.get(i, 0) / 1e9:.2f} GB)" for i in sorted(images)] + \
           [f"container {c[:12]}" for c in sorted(containers)]


def main(action: str, file: str) -> int:
    api = docker.APIClient(base_url=os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock", timeout=60)
    engine = os.environ.get("DOCKER_HOST", "the first engine")
    if action == "snapshot":
        Path(file).write_text(json.dumps(state(api)))
        return 0
    left = leftovers(api, json.loads(Path(file).read_text()))
    if left:
        print(f"engines: {engine}: the test session left {len(left)} things it made: {', '.join(left[:20])}")
        return 1
    print(f"engines: {engine} holds what it held before the session (and the kept torchimages/* bases)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("snapshot", "check"):
        sys.exit(__doc__.split("usage: ")[1].strip())
    sys.exit(main(sys.argv[1], sys.argv[2]))
