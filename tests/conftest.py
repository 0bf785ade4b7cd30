"""The test session's hooks; the harness itself is tests/session/ (where a test runs, what it leaves on an engine, what it
costs). `pytest -n 2` runs the main and side lanes side by side (`-n 3 --current-engine` the current lane too);
without -n, one after another."""

from __future__ import annotations

import os
import signal

import pytest

from tests.buildpy import ROOT
from tests.session import disk, engines, lanes

LANES_ON = pytest.StashKey[tuple[str, ...]]()
STARTED = pytest.StashKey[bool]()  # this process ran its first test
CLEANUP = engines.SessionCleanup()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--current-engine", action="store_true",
                     help="also run the current lane (with -n 3): the CPU release on dockerd 26 with the containerd image "
                          "store, TORCHIMAGES_CURRENT_ENGINE (scripts/start-current-engine.sh; tests/session/lanes.py)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lane(name): the lane an integration module runs in: main, side or current "
                                       "(tests/session/lanes.py)")
    config.addinivalue_line("markers", "heavy: a module that holds about 10 GB: alone among heavy modules, first in the "
                                       "side lane, last in the main lane")
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # A session started as a script's background job inherits SIGINT ignored; the tests of Ctrl-C stand for a
        # terminal's, where it is not ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.stash[LANES_ON] = lanes_on(config)
    if os.environ.get("PYTEST_XDIST_WORKER") is None and not config.option.collectonly:
        if config.option.durations is None:
            config.option.durations = disk.SLOWEST
        meter = disk.DiskMeter(disk.metered_folders(ROOT, config.stash[LANES_ON]))
        meter.start()
        config.pluginmanager.register(disk.MeterPlugin(meter, ROOT / ".cache" / "test-session-disk.txt"), "disk-meter")


def lanes_on(config: pytest.Config) -> tuple[str, ...]:
    """The lanes this session runs side by side: -n 2, main and side; -n 3 with --current-engine, the current lane too;
    no -n, or an engine that does not answer, the main lane alone (said once; under CI the session stops)."""
    worker = getattr(config, "workerinput", None)  # in an xdist worker: the controller's word (its -n reads None here)
    workers = worker["workercount"] if worker else getattr(config.option, "numprocesses", None)
    current = config.getoption("--current-engine")
    wanted = {None: 1, 0: 1, 2: 2, 3: 3}.get(workers)
    if wanted is None or (wanted > 1 and (wanted == 3) != current):  # one lane runs what it is given
        raise pytest.UsageError(f"-n {workers}{' --current-engine' if current else ''}: this session runs in two lanes, "
                                "-n 2, or three with the current engine's, -n 3 --current-engine, or one, no -n "
                                "(tests/session/lanes.py)")
    others = lanes.LANES[1:wanted]
    silent = [lane for lane in others if engines.client(10, lanes.engine_of(lane)) is None]
    if not silent:
        return lanes.LANES[:wanted]
    said = "; ".join(f"the {lane} lane's engine does not answer at {lanes.engine_of(lane)}: start it with "
                     f"{lanes.STARTED_BY[lane]}" for lane in silent)
    if os.environ.get("CI"):
        raise pytest.UsageError(said)
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        print(f"note: {said}: every module runs in the main lane, one after another")
    return (lanes.MAIN,)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads each test's group (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if unmarked := lanes.unmarked_modules(items, ROOT):
        raise pytest.UsageError(f"{', '.join(unmarked)}: no lane (main, side or current): give each integration module "
                                "pytestmark = [pytest.mark.lane(NAME)], NAME main, side or current (tests/README.md)")
    if not config.getoption("--current-engine"):  # the current lane is opt-in: deselected (counted as such), not skipped
        opted_in = [item for item in items if lanes.lane_of(item) == lanes.CURRENT]
        config.hook.pytest_deselected(items=opted_in)
        items[:] = [item for item in items if lanes.lane_of(item) != lanes.CURRENT]
    lanes.arrange(items, config.stash[LANES_ON])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before this process's first test: its lane's engine and the engine's state to leave as found."""
    if item.config.stash.get(STARTED, False):
        return
    item.config.stash[STARTED] = True
    lanes.enter(item)
    CLEANUP.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    CLEANUP.finish()
