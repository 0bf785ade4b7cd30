"""The test session's two lanes: `pytest -n 2` (pytest-xdist) runs them side by side, one worker each.

Most of a session waits on one core (a pip install, an emulated apt-get, a gzip of a layer push, a container's
suite), so two lanes on a 2-core machine take less than the sum. Each lane builds on an engine of its own, so that a
module's cleanup (tests/integration/conftest.py removes the containers, tags and BuildKit cache a module made) never
touches what the other lane is building:

- the main lane (worker gw0, the first engine): the CPU entry built once (cpu_build and its BuildKit twins) and every
  module that uses it, then the CUDA and ngc images, the cache and the workflow modules;
- the side lane (worker gw1, the second engine, scripts/start-lane-engine.sh): the arm64 CUDA image and the devel
  image, then the unit tests and the modules that build nothing the main lane builds.

The disk holds one heavy module at a time (10-15 GB each): the modules of HEAVY hold a lock across both lanes while
they run (tests/integration/conftest.py), and each lane runs its heavy modules where the other lane's are not (FIRST,
LATE).

Without -n every test runs in one process on the first engine, in the same order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

MAIN, SIDE = "main", "side"
WORKERS = {"gw0": MAIN, "gw1": SIDE}
LANE_ENGINE = "unix:///var/run/torchimages-lane.sock"  # scripts/start-lane-engine.sh
FIRST_ENGINE = "TORCHIMAGES_FIRST_ENGINE"  # where the side lane's worker finds the first engine (bases to copy)
# Integration modules of the side lane: the CUDA-sized ones but the CUDA and ngc images (which the main lane runs
# first), and those that build nothing the main lane builds.
SIDE_LANE_MODULES = ("test_build_inputs.py", "test_selfcheck.py", "test_packaging.py", "test_compat_refresh_live.py",
                     "test_lock.py", "test_arm64_cuda_image.py", "test_devel_image.py")
# The CUDA-sized modules and the main lane's largest (10-15 GB above their start each): one at a time.
HEAVY = ("test_devel_image.py", "test_cuda_and_ngc_images.py", "test_arm64_cuda_image.py", "test_cache_from.py",
         "test_workflows.py")
# Where the heavy modules run in their lane: the side lane's CUDA-sized ones first, before its unit tests, while the main
# lane builds the CPU entry (its images are then all the main engine holds); the main lane's heavy ones at its end, when
# the side lane runs its unit tests and light modules.
FIRST = ("test_arm64_cuda_image.py", "test_devel_image.py")
LATE = ("test_cuda_and_ngc_images.py", "test_cache_from.py", "test_workflows.py")


def lane_of(nodeid: str) -> str:
    """The lane of a test, from its node ID (tests/unit/...::test_x)."""
    path = Path(nodeid.split("::", maxsplit=1)[0])
    return SIDE if path.parts[:2] == ("tests", "unit") or path.name in SIDE_LANE_MODULES else MAIN


def rank(nodeid: str) -> int:
    """Where a test runs among the others of its lane: FIRST first (the disk holds little else yet), then the unit
    tests, then the other integration modules, LATE last."""
    path = Path(nodeid.split("::", maxsplit=1)[0])
    if path.parts[:2] == ("tests", "unit"):
        return 1
    return 0 if path.name in FIRST else 3 if path.name in LATE else 2


def worker_lane() -> str | None:
    """This process's lane: None when it is not one of the two workers (no -n, or the controller)."""
    return WORKERS.get(os.environ.get("PYTEST_XDIST_WORKER", ""))


def enter_lane() -> None:
    """In the side lane's worker, the engine is the second one: every client, script and build.py that the tests
    start reads DOCKER_HOST. The first engine's address is kept for copying the bases it holds."""
    if worker_lane() == SIDE:
        os.environ[FIRST_ENGINE] = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        os.environ["DOCKER_HOST"] = os.environ.get("TORCHIMAGES_LANE_ENGINE", LANE_ENGINE)


def in_my_lane(items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """The collected items this process runs: every worker collects them all, and runs its lane's."""
    lane = worker_lane()
    return [item for item in items if lane is None or lane_of(item.nodeid) == lane]


def make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scheduler for two workers: the work unit of a test is its lane, and each worker takes its own."""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            lane = WORKERS.get(node.gateway.id)  # type: ignore[attr-defined]
            if lane in self.workqueue:  # its own lane first; a lone worker (one lane selected) takes what is left
                self.workqueue.move_to_end(lane, last=False)
            super()._assign_work_unit(node)

    return LaneScheduling(config, log)


def check_workers(config: pytest.Config) -> None:
    """Two lanes, two workers: -n with another count is refused, clearly, before anything runs."""
    count = getattr(config.option, "numprocesses", None)
    if count not in (None, 0, 2):
        raise pytest.UsageError(f"-n {count}: this session runs in two lanes (tests/lanes.py); use -n 2, or no -n")
