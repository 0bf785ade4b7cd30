"""The test session's hooks; the harness itself is tests/session/ (where a test runs, what it leaves on an engine, what it
costs). `pytest -n 3` runs the three lanes side by side; without -n, one after another."""

from __future__ import annotations

import os
import signal

import pytest

from tests.buildpy import ROOT
from tests.session import disk, engines, lanes

ALL_LANES = pytest.StashKey[bool]()
STARTED = pytest.StashKey[bool]()  # this process ran its first test
CLEANUP = engines.SessionCleanup()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lane(name): the lane an integration module runs in: main, side or current "
                                       "(tests/session/lanes.py)")
    config.addinivalue_line("markers", "heavy: a module that holds about 10 GB: alone among heavy modules, first in the "
                                       "side lane, last in the main lane")
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # A session started as a script's background job inherits SIGINT ignored; the tests of Ctrl-C stand for a
        # terminal's, where it is not ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.stash[ALL_LANES] = all_lanes(config)
    if os.environ.get("PYTEST_XDIST_WORKER") is None and not config.option.collectonly:
        if config.option.durations is None:
            config.option.durations = disk.SLOWEST
        meter = disk.DiskMeter(disk.metered_folders(ROOT, lanes_on=config.stash[ALL_LANES]))
        meter.start()
        config.pluginmanager.register(disk.MeterPlugin(meter, ROOT / ".cache" / "test-session-disk.txt"), "disk-meter")


def all_lanes(config: pytest.Config) -> bool:
    """-n 3 with every lane's engine answering. Without it, one lane: said once, or (under CI) the session stops."""
    worker = getattr(config, "workerinput", None)  # in an xdist worker: the controller's word (its -n reads None here)
    workers = worker["workercount"] if worker else getattr(config.option, "numprocesses", None)
    if workers not in (None, 0, len(lanes.LANES)):
        raise pytest.UsageError(f"-n {workers}: this session runs in {len(lanes.LANES)} lanes (tests/session/lanes.py): "
                                f"-n {len(lanes.LANES)}, or no -n")
    if workers != len(lanes.LANES):
        return False
    silent = [lane for lane in lanes.LANES[1:] if engines.client(10, lanes.engine_of(lane)) is None]
    if not silent:
        return True
    said = "; ".join(f"the {lane} lane's engine does not answer at {lanes.engine_of(lane)}: start it with "
                     f"{lanes.STARTED_BY[lane]}" for lane in silent)
    if os.environ.get("CI"):
        raise pytest.UsageError(f"{said} (scripts/setup.sh does)")
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        print(f"note: {said}: every module runs in the main lane, one after another")
    return False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads each test's group (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if unmarked := lanes.unmarked_modules(items, ROOT):
        raise pytest.UsageError(f"{', '.join(unmarked)}: no lane (main, side or current): give each integration module "
                                "pytestmark = [pytest.mark.lane(NAME)], NAME main, side or current (tests/README.md)")
    lanes.arrange(items, all_lanes=config.stash[ALL_LANES])


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
