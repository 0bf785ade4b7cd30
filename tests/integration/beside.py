"""Work that runs beside the test session, on the machine's second core.

A test module whose slow work is single-core and emulated (the arm64 image: its Debian base's debootstrap, its apt
step, its suite run under QEMU) names that work `BESIDE_THE_SESSION`: a function of a folder that returns what its
tests assert on. When the session has selected one of that module's tests and an engine answers, the work starts
as soon as collection ends, in a thread, while the unit tests and the modules listed in `conftest.BESIDE_THE_WORK`
run; the module's own fixture takes the result with `result()`, waiting for it if it is not done (and running it
there when it never started). The modules that follow need the disk it held: the module removes its images when it
ends. While such work runs, the modules that end beside it leave BuildKit's cache to the next module that ends after
it (a prune during a build can hang the build: docker/cli#4021), and nothing of the work is removed by their cleanup:
its images carry the release tag `RELEASE`, and its containers run those images.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RELEASE = "beside"  # the release tag of the images built beside the session: tags `...:beside-<image>`


@dataclass
class Work:
    """One module's work beside the session: its thread, and its result or error once it ends."""

    module: str
    run: Callable[[Path], object]
    folder: Path
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None
    value: object = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"beside:{self.module}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self.run(self.folder)
        except BaseException as error:  # re-raised in the module's fixture, where the test reports it
            self.error = error
        finally:
            self.seconds = time.monotonic() - self.started

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def result(self) -> object:
        if self.thread is None:  # never started (no engine answered at collection): run here
            self._run()
        else:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


WORK: dict[str, Work] = {}


def start(module: str, run: Callable[[Path], object], folder: Path, *, now: bool) -> None:
    """Register `module`'s work; start it in a thread when `now` (an engine answers)."""
    work = WORK.setdefault(module, Work(module, run, folder))
    if now and work.thread is None:
        work.start()


def result(module: str, run: Callable[[Path], object], folder: Callable[[], Path]) -> object:
    """The result of `module`'s work: waited for when it runs beside the session, run here when it was never
    registered (the module's tests selected by a path pytest collected without the hook)."""
    work = WORK.get(module) or WORK.setdefault(module, Work(module, run, folder()))
    return work.result()


def running() -> bool:
    """Whether any work runs beside the session now."""
    return any(work.running() for work in WORK.values())


def is_its_tag(tag: str) -> bool:
    """Whether an image tag is one of the work's (`REPOSITORY:beside-...`)."""
    return tag.rpartition(":")[2].startswith(f"{RELEASE}-")


def summary() -> list[str]:
    return [f"{work.module}: beside the session for {work.seconds:.0f} s" + (" (failed)" if work.error else "")
            for work in WORK.values() if work.seconds is not None]
