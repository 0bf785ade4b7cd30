"""A release as one stream of events: build, smoke and push emit them; the progress views, logs and report consume them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

Stage = Literal["build", "smoke", "push", "sbom", "promote"]
Kind = Literal["queued", "started", "step", "log", "note",  # progress
               "built", "passed", "pushed", "unchanged",  # ends that succeeded
               "failed", "cancelled", "skipped"]  # ends that did not
ENDS = frozenset({"built", "passed", "pushed", "unchanged", "failed", "cancelled", "skipped"})


@dataclass(frozen=True)
class StageEvent:
    image: str
    kind: Kind
    message: str = ""
    step: int | None = None
    steps: int | None = None
    stage: Stage = "build"
    at: float = field(default_factory=time.monotonic)


class EventSink(Protocol):
    def __call__(self, event: StageEvent) -> None: ...


def ignore(event: StageEvent) -> None:
    """A sink for callers that show nothing (tests, scripts)."""
