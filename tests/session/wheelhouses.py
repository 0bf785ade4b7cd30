"""The CUDA-sized wheelhouses (about 9 GB on a fresh machine): a module declares what it builds from
(`WHEELHOUSES`, functions returning a `Wheelhouse`), and a thread fills them from the lane's first test on, in the order
the lane runs them, while the CPU is busy elsewhere; under CI one at a time, and each goes when the last module that
declares it ends (`Spent`: the disk a session needs is then its images'; TORCHIMAGES_KEEP_WHEELHOUSES=1 keeps them). A
module's fixture still fills its own (`Wheelhouse.make`, which waits for a fill under way: make-wheelhouse.sh locks
the folder)."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.buildpy import ROOT

DEBIAN_PYTHON = "3.11.2"  # wheels are resolved for the container's Python, not the host's


@dataclass(frozen=True)
class Wheelhouse:
    """A folder of wheels for Debian's Python on `machine`: every requirement and its dependencies."""

    folder: Path
    requirements: tuple[str, ...]
    machine: str = "x86_64"

    def command(self) -> list[str]:
        return ["bash", str(ROOT / "scripts" / "make-wheelhouse.sh"), str(self.folder), DEBIAN_PYTHON,
                *self.requirements]

    def env(self) -> dict[str, str]:
        return {**os.environ, "WHEEL_MACHINE": self.machine}

    def make(self, timeout: float = 1800) -> Path:
        """Fill the folder (or wait for the prefetch filling it); a failure fails the calling fixture."""
        result = subprocess.run(self.command(), cwd=ROOT, env=self.env(), capture_output=True, text=True,
                                timeout=timeout, check=False)
        assert result.returncode == 0, f"scripts/make-wheelhouse.sh failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        return self.folder


def declarations(modules: Iterable[object]) -> Iterator[tuple[str, Wheelhouse]]:
    """Each module's name with each wheelhouse it declares (`WHEELHOUSES`), in the modules' order."""
    for module in modules:
        for make in getattr(module, "WHEELHOUSES", ()):
            yield getattr(module, "__name__", str(module)), make()


def declared(modules: Iterable[object]) -> list[Wheelhouse]:
    """The wheelhouses the modules declare, in the modules' order, each folder once."""
    found: dict[Path, Wheelhouse] = {}
    for _, wheelhouse in declarations(modules):
        found.setdefault(wheelhouse.folder, wheelhouse)
    return list(found.values())


@dataclass
class Prefetch:
    """Fills the wheelhouses one after another in a thread; `stop` ends the fill under way."""

    wheelhouses: list[Wheelhouse]
    log: Path
    at_most: int | None = None  # wheelhouses on disk at once, counting the one filling (when spent ones go: CI)
    poll: float = 5.0  # seconds between looks at the disk while waiting for room
    done: list[str] = field(default_factory=list)  # one line per wheelhouse: its folder, exit code and seconds
    _process: subprocess.Popen[bytes] | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="wheelhouse-prefetch", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            for index, wheelhouse in enumerate(self.wheelhouses):
                if not self._room_for(index):
                    return
                started = time.monotonic()
                with self._lock:
                    if self._stopped.is_set():
                        return
                    self._process = subprocess.Popen(wheelhouse.command(), cwd=ROOT, env=wheelhouse.env(),
                                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                code = self._process.wait()
                self.done.append(f"{wheelhouse.folder.name}: rc {code}, {time.monotonic() - started:.0f} s")

    def _room_for(self, index: int) -> bool:
        """Wait until fewer than `at_most` of the earlier wheelhouses are still on disk (a spent one goes when its
        last module ends): the next module's wheels download during the one before it, the rest wait. False when
        the session stopped meanwhile."""
        while self.at_most is not None and sum(w.folder.is_dir() for w in self.wheelhouses[:index]) >= self.at_most:
            if self._stopped.wait(self.poll):
                return False
        return not self._stopped.is_set()

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()
            if self._process is not None and self._process.poll() is None:
                os.killpg(self._process.pid, signal.SIGTERM)
                self._process.wait()


def start(modules: Iterable[object], log: Path) -> Prefetch | None:
    """Prefetch what the modules declare; None when they declare nothing."""
    wheelhouses = declared(modules)
    if not wheelhouses:
        return None
    prefetch = Prefetch(wheelhouses, log, at_most=1 if removes_spent() else None)
    prefetch.start()
    return prefetch


@dataclass
class Spent:
    """The wheelhouses to remove when a module ends: each after the last selected module that declares it."""

    last_user: dict[str, list[Wheelhouse]]  # module name -> the wheelhouses no later module declares
    removed: list[str] = field(default_factory=list)  # one line per wheelhouse removed: its folder, the module

    @classmethod
    def of(cls, modules: Iterable[object]) -> Spent:
        last = {wheelhouse.folder: (name, wheelhouse) for name, wheelhouse in declarations(modules)}
        by_module: dict[str, list[Wheelhouse]] = {}
        for name, wheelhouse in last.values():
            by_module.setdefault(name, []).append(wheelhouse)
        return cls(by_module)

    def module_ended(self, name: str) -> None:
        for wheelhouse in self.last_user.pop(name, []):
            if remove(wheelhouse.folder):
                self.removed.append(f"{wheelhouse.folder.name} after {name.rsplit('.', 1)[-1]}")


def remove(folder: Path) -> bool:
    """Remove a wheelhouse unless a fill holds its lock (scripts/make-wheelhouse.sh): False when it stays."""
    if not folder.is_dir():
        return False
    with (folder / ".lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(folder)
    return True


def removes_spent() -> bool:
    """Under CI the checkout is thrown away after the run; elsewhere the wheelhouses stay for the next session."""
    return bool(os.environ.get("CI")) and os.environ.get("TORCHIMAGES_KEEP_WHEELHOUSES") != "1"
