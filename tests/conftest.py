"""What a test session costs, at the end of every run of tests/unit and tests/integration: the 25 slowest tests
(pytest's --durations) and, per test module, its time and the disk it held at its peak, so that the next change
sees what it added. The smoke suite (tests/smoke, run inside images by build.py test) is not metered."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import lanes
from tests.buildpy import ROOT

SLOWEST = 25
GB = 2**30


def written_folders() -> list[Path]:
    """Where a test session writes: the engine's data root (images, build cache, containers), the temporary folder
    (pytest's folders, registries, build contexts) and the checkout's .cache (wheelhouses)."""
    folders = [Path(os.environ.get("TORCHIMAGES_DOCKER_ROOT", "/var/lib/docker")), Path(tempfile.gettempdir()),
               ROOT / ".cache", Path(os.environ.get("TORCHIMAGES_LANE_ROOT", "/var/lib/torchimages-lane-docker"))]
    return [folder for folder in folders if folder.exists()]


def free_bytes(folders: list[Path]) -> int:
    """Free bytes summed over the distinct filesystems that hold `folders`. Read with os.statvfs, not
    shutil.disk_usage: a unit test that fakes the free disk (test_sbom_stage.py patches shutil's) must not fake
    the meter's (it once reported a 58 GB peak for it)."""
    by_device = {folder.stat().st_dev: folder for folder in folders}
    return sum(free_of(folder) for folder in by_device.values())


def free_of(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def tree_bytes(folder: Path) -> int:
    """Disk blocks held by the files under `folder` (links not followed; a file that goes meanwhile counts 0)."""
    total = 0
    for path, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                total += (Path(path) / name).lstat().st_blocks * 512
            except OSError:
                continue
    return total


@dataclass
class ModuleCost:
    seconds: float = 0.0
    peak: int = 0  # bytes above the session's start, at the module's peak
    temp_peak: int = 0  # of which pytest's temporary folders held, at most
    end: int = 0  # bytes above the session's start when its last test ended


@dataclass
class DiskMeter:
    """Samples the free disk every `every` seconds in a thread and charges it to the modules whose tests run (one
    per lane under -n 2: the disk is shared, so each is charged what both lanes hold)."""

    folders: list[Path]
    temp: Path | None
    every: float = 2.0
    temp_every: float = 15.0
    start_free: int = 0
    modules: dict[str, ModuleCost] = field(default_factory=dict)
    by_lane: bool = False  # -n 2: a module runs in each lane at once
    current: dict[str, str] = field(default_factory=dict)  # lane -> module
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self.start_free = free_bytes(self.folders)
        threading.Thread(target=self._run, name="disk-meter", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.sample(measure_temp=True)

    def used(self) -> int:
        return self.start_free - free_bytes(self.folders)

    def enter(self, module: str) -> None:
        with self._lock:
            self.current[lanes.lane_of(module) if self.by_lane else ""] = module
            self.modules.setdefault(module, ModuleCost())

    def sample(self, *, measure_temp: bool = False) -> None:
        used = self.used()
        temp = tree_bytes(self.temp) if measure_temp and self.temp and self.temp.exists() else 0
        with self._lock:
            for module in self.current.values():
                cost = self.modules[module]
                cost.peak, cost.end = max(cost.peak, used), used
                cost.temp_peak = max(cost.temp_peak, temp)

    def _run(self) -> None:
        last_temp = 0.0
        while not self._stop.wait(self.every):
            now = time.monotonic()
            self.sample(measure_temp=now - last_temp >= self.temp_every)
            last_temp = now if now - last_temp >= self.temp_every else last_temp

    def lines(self) -> Iterator[str]:
        width = max([len(m) for m in self.modules] + [6])
        yield f"{'module':<{width}}  {'seconds':>8}  {'peak GB':>8}  {'temp GB':>8}  {'at end GB':>9}"
        for module, cost in self.modules.items():
            yield (f"{module:<{width}}  {cost.seconds:8.0f}  {cost.peak / GB:8.1f}  {cost.temp_peak / GB:8.1f}  "
                   f"{cost.end / GB:9.1f}")
        if self.modules:
            name, top = max(self.modules.items(), key=lambda item: item[1].peak)
            where = ", ".join(str(f) for f in self.folders)
            yield (f"session peak: {top.peak / GB:.1f} GB above its start, in {name}; the temporary folders held at most "
                   f"{max(c.temp_peak for c in self.modules.values()) / GB:.1f} GB; total "
                   f"{sum(c.seconds for c in self.modules.values()):.0f} s (on the filesystems of {where})")


def metered(config: pytest.Config) -> bool:
    """tests/unit and tests/integration are metered; a run of the smoke suite alone is not."""
    smoke = ROOT / "tests" / "smoke"
    paths = [Path(arg.split("::", maxsplit=1)[0]).resolve() for arg in config.args]
    return not paths or not all(path.is_relative_to(smoke) for path in paths)


class MeterPlugin:
    """The hooks that feed the meter and print it at the end of the run."""

    def __init__(self, meter: DiskMeter) -> None:
        self.meter = meter

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.meter.enter(nodeid.split("::", maxsplit=1)[0])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.meter.modules.setdefault(report.nodeid.split("::", maxsplit=1)[0], ModuleCost()).seconds += report.duration

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        self.meter.stop()
        terminalreporter.section("time and disk per test module (disk: above the session's start)")
        for line in self.meter.lines():
            terminalreporter.write_line(line)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: -n 2 runs the two lanes of tests/lanes.py
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    return lanes.make_scheduler(config, log)


@pytest.hookimpl(trylast=True)  # after pytest's own configure has made the temporary-path factory
def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # A session started as a script's background job (`.ci/run &`) inherits SIGINT ignored and passes that on to
        # every process it starts; the tests of Ctrl-C stand for a terminal's, where it is not ignored. (The tests
        # that a tool started that way still stops its children set SIGINT ignored themselves.)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    lanes.check_workers(config)
    lanes.enter_lane()
    # The meter runs where the reports arrive: in the one process, or in -n 2's controller (not in its workers)
    if not metered(config) or config.option.collectonly or lanes.worker_lane() is not None:
        return
    if config.option.durations is None:
        config.option.durations = SLOWEST
    factory = getattr(config, "_tmp_path_factory", None)
    meter = DiskMeter(written_folders(), factory.getbasetemp() if factory else None,
                      by_lane=getattr(config.option, "numprocesses", None) == 2)
    meter.start()
    config.pluginmanager.register(MeterPlugin(meter), "torchimages-disk-meter")
