"""The test session's hooks; the harness itself is tests/session/ (where a test runs, what it leaves on an engine, what it
costs). `pytest -n 2` runs the two lanes side by side; without -n, one after another."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.buildpy import ROOT
from tests.session import disk, engines, lanes

TWO_LANES = pytest.StashKey[bool]()
STARTED = pytest.StashKey[bool]()  # this process ran its first test
CLEANUP = engines.SessionCleanup()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lane(name): the lane an integration module runs in, main or side "
                                       "(tests/session/lanes.py)")
    config.addinivalue_line("markers", "heavy: a module that holds about 10 GB: alone among heavy modules, first in the "
                                       "side lane, last in the main lane")
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # A session started as a script's background job inherits SIGINT ignored; the tests of Ctrl-C stand for a
        # terminal's, where it is not ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.stash[TWO_LANES] = two_lanes(config)
    if os.environ.get("PYTEST_XDIST_WORKER") is None and not config.option.collectonly:
        if config.option.durations is None:
            config.option.durations = disk.SLOWEST
        side_root = Path("/var/lib/torchimages-side-docker") if config.stash[TWO_LANES] else None
        meter = disk.DiskMeter(disk.metered_folders(ROOT, side_root))
        meter.start()
        config.pluginmanager.register(disk.MeterPlugin(meter, ROOT / ".cache" / "test-session-disk.txt"), "disk-meter")


def two_lanes(config: pytest.Config) -> bool:
    """-n 2 with the side engine answering. Without it, one lane: said once, or (under CI) the session stops."""
    worker = getattr(config, "workerinput", None)  # in an xdist worker: the controller's word (its -n reads None here)
    workers = worker["workercount"] if worker else getattr(config.option, "numprocesses", None)
    if workers not in (None, 0, 2):
        raise pytest.UsageError(f"-n {workers}: this session runs in two lanes (tests/session/lanes.py): -n 2, or no -n")
    if workers != 2:
        return False
    if engines.client(10, lanes.side_engine()) is not None:
        return True
    if os.environ.get("CI"):
        raise pytest.UsageError(f"the side lane's engine does not answer at {lanes.side_engine()}: start it with "
                                "scripts/start-side-engine.sh (scripts/setup.sh does)")
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        print(f"note: no engine answers at {lanes.side_engine()} (scripts/start-side-engine.sh): every module runs in "
              "the main lane, one after another")
    return False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads each test's group (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if unmarked := lanes.unmarked_modules(items, ROOT):
        raise pytest.UsageError(f"{', '.join(unmarked)}: no lane: give each integration module "
                                "pytestmark = [pytest.mark.lane('main' or 'side')] (tests/README.md)")
    lanes.arrange(items, two_lanes=config.stash[TWO_LANES])


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
