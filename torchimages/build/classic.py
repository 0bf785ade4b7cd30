"""The classic builder: a build through the Docker SDK's build API, streamed.

The SDK reports most build errors inside the JSON stream instead of raising, so every stream is read to its end and
checked for `error` entries. A peer of torchimages.build.buildkit: both build on the shared Engine.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import requests.exceptions

from ..engine import ANSI, BuildOutcome, Engine
from ..errors import visible
from ..events import StageEvent
from ..input.grammar import digest_problem

STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
RUNNING_IN = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})$")
STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")  # the image a step committed, or found in the cache
USING_CACHE = " ---> Using cache"


class ClassicBuilder:
    # Every step of a build for another platform runs under the engine's emulator, the torch install too: the classic
    # builder has no stage of the build's own platform (BuildKit's $BUILDPLATFORM).
    cross_installs = False
    dockerfile = "Dockerfile"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # image -> its build's intermediate containers, so a cancel can stop a silent step at once
        self.running_containers: dict[str, list[str]] = {}

    def build(self, image: str, context: Path, tag: str, *, buildargs: dict[str, str],
              emit: Callable[[StageEvent], None], cancel: threading.Event, cache_from: list[str] | None = None,
              labels: dict[str, str] | None = None, platform: str | None = None) -> BuildOutcome:
        """Build `context` into `tag` (for `platform`, its FROM image's by default), emitting step and log events;
        never raises for build errors."""
        outcome = BuildOutcome(image=image, tag=tag)
        tail: deque[str] = deque(maxlen=20)
        containers = self.running_containers.setdefault(image, [])
        stream = self._stream(context, tag, buildargs, outcome, cache_from=cache_from or None, labels=labels or None,
                              platform=platform)
        try:
            for chunk in stream:
                if cancel.is_set():
                    outcome.cancelled = True
                    break
                self._handle(chunk, image, outcome, tail=tail, containers=containers, emit=emit)
        finally:
            close = getattr(stream, "close", None)
            if close:
                close()  # closing the connection makes the daemon stop the build
        outcome.log_tail = list(tail)
        if outcome.cancelled:
            self._remove_containers(containers)
        if not outcome.ok and outcome.created:
            outcome.removed = self._remove_intermediates(outcome.created)
            emit(StageEvent(image, "log", f"removed {outcome.removed} intermediate images of the "
                                          f"{'cancelled' if outcome.cancelled else 'failed'} build"))
        return outcome

    def _remove_intermediates(self, created: list[str]) -> int:
        """Remove what a failed or cancelled build committed, newest first.

        The classic builder takes the newest child of a parent with the same instruction as the cache hit:
        a shorter chain left by an interrupted or failed build (above all a --no-cache one) would hide the
        complete chain of the last good build, and every later build would start over from there.
        noprune keeps the cache images this build reused; an image another build now uses is not removed.
        """
        removed = 0
        for image_id in reversed(created):
            with contextlib.suppress(docker.errors.APIError):
                self.engine.api.remove_image(image_id, noprune=True)
                removed += 1
        return removed

    def _stream(self, context: Path, tag: str, buildargs: dict[str, str], outcome: BuildOutcome, *,
                cache_from: list[str] | None, labels: dict[str, str] | None, platform: str | None) -> Iterator[dict]:
        try:
            yield from self.engine.api.build(path=str(context), tag=tag, buildargs=buildargs, decode=True, rm=True,
                                             forcerm=True, pull=False, nocache=self.engine.no_cache,
                                             cache_from=cache_from, labels=labels, platform=platform)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            outcome.error = f"the engine failed during the build: {exc}"

    def _handle(self, chunk: dict[str, Any], image: str, outcome: BuildOutcome, *, tail: deque[str],
                containers: list[str], emit: Callable[[StageEvent], None]) -> None:
        if "error" in chunk:
            detail = chunk.get("errorDetail") or {}
            outcome.error = ANSI.sub("", str(detail.get("message") or chunk["error"])).strip()
            return
        if "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
            answered = str(chunk["aux"]["ID"])
            if digest_problem(answered):  # the engine's answer, checked as BuildKit's --iidfile is
                outcome.error = f"the engine answered {visible(answered)[:100]!r} as the image ID, not a digest"
            else:
                outcome.image_id = answered
            return
        text = chunk.get("stream") or chunk.get("status") or ""
        for raw in ANSI.sub("", text).splitlines():
            line = raw.rstrip()
            if not line:
                continue
            if match := STEP.match(line):
                outcome.step = line
                # A FROM step names an existing image (the base, or an earlier stage): never this build's to remove.
                outcome._reused = match.group(3).upper().startswith("FROM ")
                emit(StageEvent(image, "step", match.group(3), int(match.group(1)), int(match.group(2))))
            elif match := RUNNING_IN.match(line):
                containers.append(match.group(1))
            elif line == USING_CACHE:
                outcome._reused = True
            elif match := STEP_IMAGE.match(line):
                if not outcome._reused:
                    outcome.created.append(match.group(1))
                outcome._reused = False
            else:
                tail.append(line)
            emit(StageEvent(image, "log", line))

    def describe(self) -> str:
        return f"the classic builder through the Docker SDK (engine {self.engine.api.version().get('Version', 'unknown')})"

    def stop_builds(self) -> None:
        """Kill the containers of running steps: each build then ends with an error, untagged (called on the main
        thread, whose client no build uses)."""
        client = self.engine.api
        for containers in list(self.running_containers.values()):
            for container in list(containers):
                with contextlib.suppress(docker.errors.APIError):  # the step may have finished already
                    client.kill(container)

    def _remove_containers(self, containers: list[str]) -> None:
        for container in containers:
            with contextlib.suppress(docker.errors.APIError):  # already removed by the daemon (forcerm)
                self.engine.api.remove_container(container, force=True)
