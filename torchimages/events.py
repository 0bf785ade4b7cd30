"""The build as a stream of events: the progress view, the logs and the report consume it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

Kind = Literal["queued", "started", "step", "log", "built", "failed", "cancelled", "skipped"]


@dataclass(frozen=True)
class BuildEvent:
    image: str
    kind: Kind
    message: str = ""
    step: int | None = None
    steps: int | None = None
    at: float = field(default_factory=time.monotonic)


class EventSink(Protocol):
    def __call__(self, event: BuildEvent) -> None: ...
