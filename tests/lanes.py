"""The test session's two lanes: `pytest -n 2` (pytest-xdist) runs them side by side, one worker each.

Most of a session waits on one core (a pip install, an emulated apt-get, a gzip of a layer push, a container's
suite), so two lanes on a 2-core machine take about the time of the longer one, not the sum. Each lane builds on an
engine of its own, so that a module's cleanup (tests/integration/conftest.py removes the containers, tags and
BuildKit cache a module made) never touches what the other lane is building:

- the cuda lane (worker gw0, the second engine, scripts/start-lane-engine.sh): the unit tests, then the CUDA-sized
  modules, then the modules that share no build with the CPU lane;
- the cpu lane (worker gw1, the first engine): the CPU entry built once (the session fixtures cpu_build and its
  BuildKit twins) and every module that uses it.

Without -n every test runs in one process on the first engine, in the same order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

CUDA, CPU = "cuda", "cpu"
WORKERS = {"gw0": CUDA, "gw1": CPU}
LANE_ENGINE = "unix:///var/run/torchimages-lane.sock"  # scripts/start-lane-engine.sh
FIRST_ENGINE = "TORCHIMAGES_FIRST_ENGINE"  # where the cuda lane's worker finds the first engine (bases to copy)
# Integration modules of the cuda lane: the CUDA-sized ones, and those that build nothing the cpu lane builds.
CUDA_LANE_MODULES = ("test_devel_image.py", "test_cuda_and_ngc_images.py", "test_arm64_cuda_image.py",
                     "test_build_inputs.py", "test_selfcheck.py")


def lane_of(nodeid: str) -> str:
    """The lane of a test, from its node ID (tests/unit/...::test_x)."""
    path = Path(nodeid.split("::", maxsplit=1)[0])
    return CUDA if path.parts[:2] == ("tests", "unit") or path.name in CUDA_LANE_MODULES else CPU


def worker_lane() -> str | None:
    """This process's lane: None when it is not one of the two workers (no -n, or the controller)."""
    return WORKERS.get(os.environ.get("PYTEST_XDIST_WORKER", ""))


def enter_lane() -> None:
    """In the cuda lane's worker, the engine is the second one: every client, script and build.py that the tests
    start reads DOCKER_HOST. The first engine's address is kept for copying the bases it holds."""
    if worker_lane() == CUDA:
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
