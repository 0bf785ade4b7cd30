"""What a session costs: per test module, its seconds and the disk the session held at its peak while it ran (from its
first test's start, its fixtures' builds included; the lanes share the disk, so a module is charged what all hold),
printed at the end with the 25 slowest tests, and the session's peak, with the modules running then, written to
.cache/test-session-disk.txt, the figure .ci/run prints."""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.session.lanes import CURRENT, LANES, SIDE

GB = 2**30
SLOWEST = 25


def free_bytes(folders: list[Path]) -> int:
    """Free bytes over the distinct filesystems holding `folders` (os.statvfs: tests fake shutil.disk_usage)."""
    by_device = {folder.stat().st_dev: folder for folder in folders if folder.exists()}
    return sum(stats.f_bavail * stats.f_frsize for stats in map(os.statvfs, by_device.values()))


@dataclass
class ModuleCost:
    seconds: float = 0.0
    peak: int = 0  # bytes above the session's start, at the module's peak
    end: int = 0  # bytes above the session's start when its last test ended


@dataclass
class DiskMeter:
    """Samples the free disk in a thread and charges it to the modules running (one per lane)."""

    folders: list[Path]
    every: float = 2.0
    start_free: int = 0
    modules: dict[str, ModuleCost] = field(default_factory=dict)
    current: dict[str, str] = field(default_factory=dict)  # lane (or "") -> the module it runs
    peak: tuple[int, tuple[str, ...]] = (0, ())  # the session's peak and the modules running then
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self.start_free = free_bytes(self.folders)
        threading.Thread(target=self._run, name="disk-meter", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.sample()

    def enter(self, lane: str, module: str) -> None:
        with self._lock:
            self.current[lane] = module
            self.modules.setdefault(module, ModuleCost())

    def sample(self) -> None:
        used = self.start_free - free_bytes(self.folders)
        with self._lock:
            for module in self.current.values():
                cost = self.modules[module]
                cost.peak, cost.end = max(cost.peak, used), used
            if used > self.peak[0]:
                self.peak = used, tuple(sorted(self.current.values()))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def peak_line(self) -> str:
        if not self.modules:
            return "session peak: nothing metered"
        used, running = self.peak
        return (f"session peak: {used / GB:.1f} GB above its start, while {' and '.join(running) or 'nothing'} ran; "
                f"{sum(c.seconds for c in self.modules.values()):.0f} s of tests in all")

    def lines(self) -> list[str]:
        width = max([len(m) for m in self.modules] + [6])
        rows = [f"{'module':<{width}}  {'seconds':>8}  {'peak GB':>8}  {'at end GB':>9}"]
        rows += [f"{m:<{width}}  {c.seconds:8.0f}  {c.peak / GB:8.1f}  {c.end / GB:9.1f}" for m, c in self.modules.items()]
        return [*rows, self.peak_line()]


class MeterPlugin:
    """Feeds the meter from the test reports (in the one process, or in xdist's controller) and prints it."""

    def __init__(self, meter: DiskMeter, written: Path) -> None:
        self.meter, self.written = meter, written

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """A test starts (its setup, where a module's builds run): with -n its id ends in its lane (`@side`)."""
        lane = nodeid.rpartition("@")[2]
        self.meter.enter(lane if lane in LANES else "", nodeid.split("::", maxsplit=1)[0])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", maxsplit=1)[0]
        self.meter.modules.setdefault(module, ModuleCost()).seconds += report.duration

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        self.meter.stop()
        terminalreporter.section("time and disk per test module (disk: above the session's start)")
        for line in self.meter.lines():
            terminalreporter.write_line(line)
        self.written.parent.mkdir(parents=True, exist_ok=True)
        self.written.write_text(self.meter.peak_line() + "\n")


# the data roots of the other lanes' engines (scripts/start-side-engine.sh, scripts/start-current-engine.sh)
LANE_ROOTS = {SIDE: Path("/var/lib/torchimages-side-docker"), CURRENT: Path("/var/lib/torchimages-current-docker")}


def metered_folders(root: Path, running: tuple[str, ...]) -> list[Path]:
    """Where a session writes: the running lanes' engines' data roots, the temporary folder, the checkout's .cache."""
    folders = [Path("/var/lib/docker"), Path(tempfile.gettempdir()), root / ".cache",
               *(LANE_ROOTS[lane] for lane in running if lane in LANE_ROOTS)]
    return [folder for folder in folders if folder.exists()]
