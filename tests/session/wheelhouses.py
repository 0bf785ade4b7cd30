"""The CUDA-sized wheelhouses (about 3 GB each, 9 GB on a fresh machine): a module declares what it builds from
(`WHEELHOUSES`, functions returning a `Wheelhouse`), its fixture fills it (`Wheelhouse.make`), and under CI each goes
when the last module that declares it ends (`Spent`: the disk holds one at a time; TORCHIMAGES_KEEP_WHEELHOUSES=1 keeps
them). No fill ahead: the side lane starts with a CUDA-sized module, and with one wheelhouse on disk at a time the next
one could only start when the module before ends, which is when the next module's fixture fills it."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
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
        """Fill the folder (or wait for another fill of it under way); a failure fails the calling fixture."""
        result = subprocess.run(self.command(), cwd=ROOT, env=self.env(), capture_output=True, text=True,
                                timeout=timeout, check=False)
        assert result.returncode == 0, f"scripts/make-wheelhouse.sh failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        return self.folder


def declarations(modules: Iterable[object]) -> Iterator[tuple[str, Wheelhouse]]:
    """Each module's name with each wheelhouse it declares (`WHEELHOUSES`), in the modules' order."""
    for module in modules:
        for make in getattr(module, "WHEELHOUSES", ()):
            yield getattr(module, "__name__", str(module)), make()


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
