"""Where a test runs: each integration module declares its lane and weight at its top, and the rest follows.

    pytestmark = [pytest.mark.lane("side"), pytest.mark.heavy]

`pytest -n 2` runs the main and side lanes side by side, `pytest -n 3 --current-engine` the current lane too (xdist's
`--dist loadgroup`: a lane is one group, so one worker runs it), each on an engine of its own, so a module's cleanup
touches only what its lane made:
- main: the first engine (DOCKER_HOST), Docker 20.10 with the classic image store;
- side: a second 20.10 engine, TORCHIMAGES_SIDE_ENGINE (default unix:///var/run/torchimages-side.sock, which
  scripts/start-side-engine.sh starts): the CUDA-sized images;
- current (opt-in, --current-engine): the current generation, TORCHIMAGES_CURRENT_ENGINE (default
  unix:///var/run/torchimages-current.sock, scripts/start-current-engine.sh): dockerd 26 with the containerd image
  store. A session with it took 1716-1762 s and 22-23 GB on 2 cores, over the session's budget (docs/engines.md).
A heavy module (a CUDA-sized image, a release) holds about 10 GB: the side lane runs its heavy modules first, the main
lane last, so that they meet the other lanes' light ones; they also take a lock all lanes share (engines.py). The
unit tier is marked in tests/unit/conftest.py. An integration module without a lane is a collection error naming it.

Without -n, or when an engine of the lanes does not answer (and CI is unset: under CI that stops the session), every
module runs in the main lane, one after another (the current lane's modules then need DOCKER_HOST at that engine).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MAIN, SIDE, CURRENT = "main", "side", "current"
LANES = (MAIN, SIDE, CURRENT)
SIDE_ENGINE = "TORCHIMAGES_SIDE_ENGINE"
DEFAULT_SIDE_ENGINE = "unix:///var/run/torchimages-side.sock"
CURRENT_ENGINE = "TORCHIMAGES_CURRENT_ENGINE"
DEFAULT_CURRENT_ENGINE = "unix:///var/run/torchimages-current.sock"
FIRST_ENGINE = "TORCHIMAGES_FIRST_ENGINE"  # the other lanes' scripts find the first engine's bases here (make-base-image)
# what starts each lane's engine, for the message when it does not answer
STARTED_BY = {MAIN: "scripts/start-engine.sh", SIDE: "scripts/start-side-engine.sh",
              CURRENT: "scripts/start-current-engine.sh"}


def side_engine() -> str:
    return os.environ.get(SIDE_ENGINE) or DEFAULT_SIDE_ENGINE


def current_engine() -> str:
    return os.environ.get(CURRENT_ENGINE) or DEFAULT_CURRENT_ENGINE


def first_engine() -> str:
    """The main lane's engine, from any lane."""
    return os.environ.get(FIRST_ENGINE) or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def engine_of(lane: str) -> str:
    return {SIDE: side_engine, CURRENT: current_engine}.get(lane, first_engine)()


def lane_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker("lane")
    return str(marker.args[0]) if marker and marker.args else MAIN


def order_key(item: pytest.Item) -> tuple[int, int]:
    """Side lane first (its heavy modules before its light ones), then the current lane, then the main lane (its heavy
    ones last)."""
    heavy = item.get_closest_marker("heavy") is not None
    lane = lane_of(item)
    if lane == SIDE:
        return 0, 0 if heavy else 1
    if lane == CURRENT:
        return 1, 0
    return 2, 1 if heavy else 0


def unmarked_modules(items: list[pytest.Item], root: Path) -> list[str]:
    """Integration modules that declare no lane (or one that does not exist): each must say where it runs."""
    found = {str(Path(item.path).relative_to(root)) for item in items if "integration" in Path(item.path).parts
             and (item.get_closest_marker("lane") is None or lane_of(item) not in LANES)}
    return sorted(found)


def arrange(items: list[pytest.Item], running: tuple[str, ...]) -> None:
    """Order the items by lane and weight (a stable sort: a module's tests keep their order), and give each its lane as
    xdist's group, or the main lane's where its own lane does not run."""
    items.sort(key=order_key)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(lane_of(item) if lane_of(item) in running else MAIN))


def group_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker and marker.args else MAIN


def enter(item: pytest.Item) -> None:
    """Before a worker's first test: its lane's engine is the one every client, script and build.py it starts reads
    (DOCKER_HOST); the first engine's address stays known for copying the bases it holds."""
    lane = group_of(item)
    if lane != MAIN and os.environ.get(FIRST_ENGINE) is None:
        os.environ[FIRST_ENGINE] = first_engine()
        os.environ["DOCKER_HOST"] = engine_of(lane)
