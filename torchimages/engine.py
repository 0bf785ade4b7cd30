"""The Docker engine, through the SDK's low-level API, streaming.

The SDK reports most build errors inside the JSON stream instead of raising, so every stream is
read to its end and checked for `error` entries.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from .errors import UserError
from .events import StageEvent

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
RUNNING_IN = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})$")
STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")  # the image a step committed, or found in the cache
USING_CACHE = " ---> Using cache"
# A step's command that failed, as each builder words it (the whole command quoted inside, which the step already
# shows): the classic builder; BuildKit before 0.10 (Docker 20.10); BuildKit since (buildx, Docker 23 and newer).
COMMAND_FAILED = (re.compile(r"^The command '.*' returned a non-zero code: (\d+)$", re.S),
                  re.compile(r"^executor failed running \[.*\]: exit code: (\d+)$", re.S),
                  re.compile(r'^process ".*" did not complete successfully: exit code: (\d+)$', re.S))
MISSING_BASE = ("pull access denied", "not found", "no such host", "manifest unknown", "repository does not exist",
                "failed to resolve", "no basic auth credentials", "unauthorized")


class EngineUnavailable(UserError):
    """No engine answers: nothing can be built."""


@dataclass
class BuildOutcome:
    image: str
    tag: str
    image_id: str | None = None
    error: str | None = None
    step: str | None = None
    log_tail: list[str] = field(default_factory=list)
    cancelled: bool = False
    skipped: bool = False  # never started: its base was not built
    # Images this build's steps committed (not the cache hits it reused), oldest first, and how many of them
    # were removed after a failure or a cancel.
    created: list[str] = field(default_factory=list)
    removed: int = 0
    # What the build runner knows of the build (torchimages.buildjobs): set when the build ran, None when it never
    # started: its seconds, its content digest (torchimages.buildcache), the previous release's image it reused.
    seconds: float | None = None
    content_digest: str | None = None
    reused: str | None = None
    _reused: bool = field(default=False, init=False, repr=False)  # stream state: the current step reused the cache

    @property
    def ok(self) -> bool:
        return self.image_id is not None and self.error is None and not self.cancelled


def engine_address() -> str:
    """Where the engine is looked for: DOCKER_HOST, else the default socket (as the docker CLI does)."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class Engine:
    """One connection per thread: the SDK client is not shared between concurrent builds."""

    def __init__(self, timeout: int = 3600, *, no_cache: bool = False) -> None:
        self.timeout = timeout
        self.no_cache = no_cache
        self._local = threading.local()
        # image -> its build's intermediate containers, so a cancel can stop a silent step at once
        self.running_containers: dict[str, list[str]] = {}
        _ = self.api  # connect now, so an absent engine fails before any work starts

    @property
    def api(self) -> docker.APIClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = connect(self.timeout)
            self._local.client = client
        return client

    def build(self, image: str, context: Path, tag: str, *, buildargs: dict[str, str],
              emit: Callable[[StageEvent], None], cancel: threading.Event, cache_from: list[str] | None = None,
              labels: dict[str, str] | None = None) -> BuildOutcome:
        """Build `context` into `tag`, emitting step and log events; never raises for build errors."""
        outcome = BuildOutcome(image=image, tag=tag)
        tail: deque[str] = deque(maxlen=20)
        containers = self.running_containers.setdefault(image, [])
        stream = self._stream(context, tag, buildargs, outcome, cache_from=cache_from or None, labels=labels or None)
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
                self.api.remove_image(image_id, noprune=True)
                removed += 1
        return removed

    def _stream(self, context: Path, tag: str, buildargs: dict[str, str], outcome: BuildOutcome, *,
                cache_from: list[str] | None, labels: dict[str, str] | None) -> Iterator[dict]:
        try:
            yield from self.api.build(path=str(context), tag=tag, buildargs=buildargs, decode=True, rm=True,
                                      forcerm=True, pull=False, nocache=self.no_cache, cache_from=cache_from,
                                      labels=labels)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            outcome.error = f"the engine failed during the build: {exc}"

    def _handle(self, chunk: dict[str, Any], image: str, outcome: BuildOutcome, *, tail: deque[str],
                containers: list[str], emit: Callable[[StageEvent], None]) -> None:
        if "error" in chunk:
            detail = chunk.get("errorDetail") or {}
            outcome.error = ANSI.sub("", str(detail.get("message") or chunk["error"])).strip()
            return
        if "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
            outcome.image_id = chunk["aux"]["ID"]
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
        return f"the classic builder through the Docker SDK (engine {self.api.version().get('Version', 'unknown')})"

    def stop_builds(self) -> None:
        """Kill the containers of running steps: each build then ends with an error, untagged (called on the main
        thread, whose client no build uses)."""
        client = self.api
        for containers in list(self.running_containers.values()):
            for container in list(containers):
                with contextlib.suppress(docker.errors.APIError):  # the step may have finished already
                    client.kill(container)

    def _remove_containers(self, containers: list[str]) -> None:
        for container in containers:
            with contextlib.suppress(docker.errors.APIError):  # already removed by the daemon (forcerm)
                self.api.remove_container(container, force=True)

    def pull(self, reference: str, auth_config: dict[str, str] | None = None) -> str | None:
        """Pull an image (a tag or repository@digest); None when it arrived, else why not. Without auth_config the
        SDK uses what `docker login` stored."""
        if image_exists(self.api, reference):
            return None
        try:
            for chunk in self.api.pull(reference, stream=True, decode=True, auth_config=auth_config):
                if "error" in chunk:
                    return str((chunk.get("errorDetail") or {}).get("message") or chunk["error"])[:300]
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            return str(exc).splitlines()[0][:300]
        return None

    def image_id(self, reference: str) -> str | None:
        """The ID of a local image, or None."""
        try:
            return str(self.api.inspect_image(reference)["Id"])
        except docker.errors.ImageNotFound:
            return None

    def image_labels(self, reference: str) -> dict[str, str]:
        """The labels of a local image ({} when it has none)."""
        return dict(self.api.inspect_image(reference)["Config"].get("Labels") or {})

    def image_info(self, tag: str) -> dict[str, Any]:
        """ID, size in bytes and layer count of a built image."""
        data = self.api.inspect_image(tag)
        return {"id": data["Id"], "size": data["Size"], "layers": len(data["RootFS"]["Layers"])}



def image_exists(api: docker.APIClient, tag: str) -> bool:
    try:
        api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def connect(timeout: int) -> docker.APIClient:
    """A low-level client found the way the docker CLI finds the engine; a clear error if none answers."""
    address = engine_address()
    try:
        client = docker.APIClient(base_url=address, timeout=timeout, version="auto")
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        reason = str(exc).splitlines()[0][:200]
        raise EngineUnavailable(f"no Docker engine answers at {address} ({reason}); start it "
                                "(scripts/start-engine.sh starts Debian's dockerd) or set DOCKER_HOST") from None
    return client


def failure_hint(outcome: BuildOutcome, base_image: str | None) -> str:
    """What to try, from the kind of failure."""
    error = (outcome.error or "").lower()
    if "no space left on device" in error:
        return ("the engine's disk is full: see `docker system df`, then free space (`docker image prune`, "
                "`docker builder prune` for BuildKit's cache) and build again")
    if command_exit_code(outcome.error) is not None:
        return ("fix the failing command (a package name in the entry's apt/pip, or the network: --pip-index-url, "
                "--ca-bundle, --wheelhouse with --offline) and build again; finished steps are cached")
    if any(marker in error for marker in MISSING_BASE) or (outcome.step or "").split(" : ")[-1].startswith("FROM"):
        return (f"the base image{f' {base_image}' if base_image else ''} is not on this engine and cannot be pulled: "
                "make it locally (scripts/make-base-image.sh), mirror it, or pass --base-image")
    return "check that the engine is healthy (docker info) and build again"


def command_exit_code(error: str | None) -> int | None:
    """The exit code of the step's command when that is what failed the build, from either builder's words."""
    for pattern in COMMAND_FAILED:
        if match := pattern.match((error or "").strip()):
            return int(match.group(1))
    return None


def short_error(error: str | None) -> str:
    """The error without the step's whole command repeated in it."""
    code = command_exit_code(error)
    return f"the step's command exited with code {code}" if code is not None else (error or "")
