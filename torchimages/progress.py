"""Progress of every stage (build, smoke, push): a live table on a terminal, timestamped lines elsewhere, full logs
on disk. All three consume the one event stream (events.StageEvent), so each stage looks the same in each view."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from .errors import visible
from .events import ENDS, EventSink, StageEvent


@dataclass
class ImageState:
    stage: str = "build"
    state: str = "queued"
    step: str = ""
    started: float | None = None
    ended: float | None = None
    last_line: str = ""

    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended or time.monotonic()) - self.started


@dataclass
class LogFiles:
    """The full log of each image in one folder."""

    folder: Path
    _files: dict[str, IO[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: StageEvent) -> None:
        with self._lock:
            key = self.path(event.image, event.stage)
            handle = self._files.get(str(key))
            if handle is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                handle = self._files[str(key)] = key.open("w", encoding="utf-8")
            if event.kind == "log":
                handle.write(event.message + "\n")
            elif event.kind != "step":
                handle.write(f"== {event.kind} {event.message}\n")
            handle.flush()

    def path(self, image: str, stage: str = "build") -> Path:
        """IMAGE.log for the build, IMAGE.smoke.log and IMAGE.push.log for the later stages."""
        return self.folder / (f"{image}.log" if stage == "build" else f"{image}.{stage}.log")

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()


class PlainProgress:
    """Timestamped lines, one per state change, build step and note: for CI logs and pipes.

    "HH:MM:SS +  12.3s IMAGE KIND DETAIL" in the build stage; the later stages name themselves: "IMAGE smoke passed ...".
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, event: StageEvent) -> None:
        if event.kind == "log":
            return
        # what a build, a registry or a file said: its escape sequences and newlines are shown, not obeyed
        message = visible(event.message)
        detail = f"{event.step}/{event.steps}: {message[:100]}" if event.kind == "step" else message[:160]
        stamp = time.strftime("%H:%M:%S")
        what = event.kind if event.stage == "build" else f"{event.stage} {event.kind}"
        with self._lock:
            print(f"{stamp} +{time.monotonic() - self.started:6.1f}s {event.image} {what} {detail}".rstrip(),
                  file=self.stream, flush=True)

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class LiveProgress:
    """A line per image: stage, state, step n/m, elapsed in the stage, last log line or note."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.images: dict[str, ImageState] = {}
        self._lock = threading.Lock()
        self._live = Live(self._table(), console=console, refresh_per_second=4, transient=False,
                          get_renderable=self._table)

    def __call__(self, event: StageEvent) -> None:
        with self._lock:
            state = self.images.setdefault(event.image, ImageState())
            if event.stage != state.stage:
                state.stage, state.step, state.last_line, state.started, state.ended = event.stage, "", "", None, None
            if event.kind in ("log", "note"):
                state.last_line = visible(event.message)[-100:]
            elif event.kind == "step":
                state.step = f"{event.step}/{event.steps}"
            else:
                state.state = event.kind
                if event.kind == "started":
                    state.started = time.monotonic()
                elif event.kind in ENDS:
                    state.ended = time.monotonic()
                    state.last_line = visible(event.message.splitlines()[0])[-100:] if event.message else state.last_line

    def _table(self) -> Table:
        table = Table(expand=True)
        for column in ("image", "stage", "state", "step", "elapsed", "last line"):
            table.add_column(column, overflow="ellipsis", no_wrap=True, ratio=3 if column == "last line" else None)
        with self._lock:
            for image, state in self.images.items():
                table.add_row(image, state.stage, state.state, state.step, f"{state.elapsed():.0f}s", state.last_line)
        return table

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)


def view(console: Console, *, plain: bool) -> PlainProgress | LiveProgress:
    """The live table on a terminal, unless --plain; timestamped lines elsewhere. Every stage asks here."""
    return PlainProgress() if plain or not console.is_terminal else LiveProgress(console)


def fan_out(*sinks: EventSink) -> EventSink:
    """One sink that forwards every event to each of `sinks`."""

    def emit(event: StageEvent) -> None:
        for sink in sinks:
            sink(event)

    return emit
