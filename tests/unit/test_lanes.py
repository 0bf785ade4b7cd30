"""The test session's two lanes (tests/lanes.py): which worker runs which module, and why a module is where it is."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import lanes
from tests.buildpy import ROOT
from tests.integration.conftest import CUDA_SIZED_MODULES

INTEGRATION = ROOT / "tests" / "integration"
# The session fixtures that build on the first engine and stay for the session (the CPU entry and its twins)
CPU_SESSION_BUILDS = {"cpu_build", "cpu_buildkit_build", "cpu_docker_buildkit_build", "smoke_run", "tested_report"}


class Worker:
    """What the scheduler sees of an xdist worker: its gateway's ID and the tests it is sent."""

    def __init__(self, gateway_id: str) -> None:
        self.gateway = SimpleNamespace(id=gateway_id)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduled(collection: list[str], gateway_ids: tuple[str, ...]) -> dict[str, list[str]]:
    """Run the lanes' scheduler over `collection` with workers of those IDs: the node IDs each was sent."""
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=False))
    scheduler = lanes.make_scheduler(config, None)  # type: ignore[arg-type]
    workers = [Worker(gateway_id) for gateway_id in gateway_ids]
    for worker in workers:
        scheduler.add_node(worker)
    for worker in workers:
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    return {worker.gateway.id: [collection[i] for i in worker.sent] for worker in workers}


COLLECTION = ["tests/unit/test_cli.py::test_a", "tests/unit/verify/test_fit.py::test_b",
              "tests/integration/build/test_devel_image.py::test_c", "tests/integration/build/test_build_cpu.py::test_d",
              "tests/integration/test_cuda_and_ngc_images.py::test_e", "tests/integration/test_workflows.py::test_f"]


def test_the_first_worker_runs_the_main_lane_and_the_second_the_side_lane_in_collection_order() -> None:
    sent = scheduled(COLLECTION, ("gw1", "gw0"))  # the order workers come up in is not theirs to choose
    assert sent["gw0"] == [COLLECTION[i] for i in (3, 4, 5)]
    assert sent["gw1"] == [COLLECTION[i] for i in (0, 1, 2)]


def test_a_lone_lane_runs_whole_on_one_worker() -> None:
    units = COLLECTION[:2]
    sent = scheduled(units, ("gw0", "gw1"))
    assert sorted(sent["gw0"] + sent["gw1"]) == sorted(units) and not (sent["gw0"] and sent["gw1"])


def fixtures_used(module: Path) -> set[str]:
    """The names of the parameters of the module's functions (tests and fixtures): the fixtures it asks for."""
    tree = ast.parse(module.read_text())
    return {arg.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for arg in node.args.args}


def integration_modules() -> list[Path]:
    return sorted(INTEGRATION.rglob("test_*.py"))


@pytest.mark.parametrize("module", integration_modules(), ids=lambda path: path.name)
def test_each_module_is_in_the_lane_of_what_it_builds(module: Path) -> None:
    """A module that uses the CPU entry's session builds runs on their engine (the main lane); a CUDA-sized module
    runs first or last in its lane and holds the heavy-module lock."""
    lane = lanes.lane_of(str(module.relative_to(ROOT)))
    if fixtures_used(module) & CPU_SESSION_BUILDS:
        assert lane == lanes.MAIN, f"{module.name} uses the main lane's session builds but runs in the {lane} lane"
    if module.name in CUDA_SIZED_MODULES:
        assert module.name in (*lanes.FIRST, *lanes.LATE) and module.name in lanes.HEAVY, module.name
    if "WHEELHOUSES" in module.read_text():  # a CUDA-sized wheelhouse: a CUDA-sized image
        assert module.name in lanes.HEAVY, f"{module.name} builds a CUDA-sized image but does not wait its turn"


def test_every_side_lane_and_heavy_module_exists() -> None:
    names = {path.name for path in integration_modules()}
    assert {*lanes.SIDE_LANE_MODULES, *lanes.HEAVY} <= names, {*lanes.SIDE_LANE_MODULES, *lanes.HEAVY} - names


def item(nodeid: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, path=ROOT / nodeid.split("::", maxsplit=1)[0])


def test_a_heavy_module_keeps_the_lock_into_the_next_module_of_its_lane_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The side lane runs its two CUDA-sized modules back to back: the lock stays between them, or the main lane's
    cache module could take it between them and the side lane would wait with nothing else to run."""
    from tests.integration.conftest import next_module_of_my_lane

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # one process: every module is its own
    session = SimpleNamespace(items=[item(nodeid) for nodeid in COLLECTION])
    devel = ROOT / "tests/integration/build/test_devel_image.py"
    assert next_module_of_my_lane(session, devel) == "test_build_cpu.py"  # in collection order, without -n
    assert next_module_of_my_lane(session, ROOT / "tests/integration/test_workflows.py") is None
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")  # the side lane: the units, then its CUDA-sized module
    assert next_module_of_my_lane(session, ROOT / "tests/unit/verify/test_fit.py") == "test_devel_image.py"


def test_a_worker_count_other_than_two_is_refused() -> None:
    with pytest.raises(pytest.UsageError, match="-n 3"):
        lanes.check_workers(SimpleNamespace(option=SimpleNamespace(numprocesses=3)))  # type: ignore[arg-type]
    lanes.check_workers(SimpleNamespace(option=SimpleNamespace(numprocesses=2)))  # type: ignore[arg-type]
