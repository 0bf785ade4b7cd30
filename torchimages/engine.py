"""The Docker engine, through the SDK's low-level API: the connection and image queries every stage shares, the
outcome of a build and the words a failed build is explained in, for both builders."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from .errors import UserError
from .unpacked import LayerSizes, UncountedLayer

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A step's command that failed, as each builder words it (the whole command quoted inside, which the step already
# shows): the classic builder; BuildKit before 0.10 (Docker 20.10); BuildKit since (buildx, Docker 23 and newer).
COMMAND_FAILED = (re.compile(r"^The command '.*' returned a non-zero code: (\d+)$", re.S),
                  re.compile(r"^executor failed running \[.*\]: exit code: (\d+)$", re.S),
                  re.compile(r'^process ".*" did not complete successfully: exit code: (\d+)$', re.S))
MISSING_BASE = ("pull access denied", "not found", "no such host", "manifest unknown", "repository does not exist",
                "failed to resolve", "no basic auth credentials", "unauthorized")
# What a call through the seam may raise: the SDK's errors, and the HTTP client's when the connection fails.
ENGINE_ERRORS: tuple[type[Exception], ...] = (docker.errors.DockerException, requests.exceptions.RequestException)


class EngineUnavailable(UserError):
    """No engine answers: nothing can be built."""


@dataclass(frozen=True)
class HeldImage:
    """What the engine holds under a reference: the image's ID, labels and layers (diff IDs, bottom first)."""

    id: str
    labels: dict[str, str]
    layers: list[str]


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
    # What the build runner knows of the build (torchimages.build.jobs): set when the build ran, None when it never
    # started: its seconds, its content digest (torchimages.build.cache), the previous release's image it reused.
    seconds: float | None = None
    content_digest: str | None = None
    reused: str | None = None
    materials: dict[str, object] | None = None  # what the build read, for its provenance (build.jobs.materials_of)
    _reused: bool = field(default=False, init=False, repr=False)  # stream state: the current step reused the cache

    @property
    def ok(self) -> bool:
        return self.image_id is not None and self.error is None and not self.cancelled


def engine_address() -> str:
    """Where the engine is looked for: DOCKER_HOST, else the default socket (as the docker CLI does)."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class Engine:
    """The engine every stage shares: one SDK connection per thread (a client is not shared between concurrent
    builds), the image queries (pull, ID, labels, configuration, size) and the image moves (tag, push). The seam:
    only the builders (torchimages.build.classic; torchimages.build.buildkit drives the docker CLI) and torchimages.containers
    use `api`, the SDK's client; every other stage asks these methods. `api` given: that client, in every thread (the
    unit tests' fake engine)."""

    def __init__(self, timeout: int = 3600, *, no_cache: bool = False, api: docker.APIClient | None = None) -> None:
        self.timeout = timeout
        self.no_cache = no_cache
        self._local = threading.local()
        self._given = api
        self._store: str | None = None
        self.layer_sizes = LayerSizes()
        _ = self.api  # connect now, so an absent engine fails before any work starts

    @property
    def api(self) -> docker.APIClient:
        if self._given is not None:
            return self._given
        client = getattr(self._local, "client", None)
        if client is None:
            client = connect(self.timeout)
            self._local.client = client
        return client

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
        held = self.held_image(reference)
        return held.id if held else None

    def held_image(self, reference: str) -> HeldImage | None:
        """A local image's ID, labels and layers, read by one inspect; None when it is not here."""
        try:
            info = self.api.inspect_image(reference)
        except docker.errors.ImageNotFound:
            return None
        return HeldImage(str(info["Id"]), dict((info.get("Config") or {}).get("Labels") or {}),
                         list((info.get("RootFS") or {}).get("Layers") or []))

    def image_layers(self, reference: str) -> list[str]:
        """A local image's layers (diff IDs, bottom first); [] when it is not here."""
        held = self.held_image(reference)
        return held.layers if held else []

    def image_exists(self, reference: str) -> bool:
        return image_exists(self.api, reference)

    def image_labels(self, reference: str) -> dict[str, str]:
        """The labels of a local image ({} when it has none)."""
        return dict(self.image_config(reference).get("Labels") or {})

    def image_config(self, reference: str) -> dict[str, Any]:
        """A local image's configuration (user, labels, environment, entrypoint, command)."""
        return dict(self.api.inspect_image(reference)["Config"] or {})

    def image_platform(self, reference: str) -> str | None:
        """OS/architecture of a local image (linux/arm64), as its configuration says; None when it is not here."""
        try:
            data = self.api.inspect_image(reference)
        except docker.errors.ImageNotFound:
            return None
        return f"{data.get('Os') or 'linux'}/{data.get('Architecture') or 'amd64'}"

    def version(self) -> str:
        """The engine's version (20.10.24, 26.1.5), as its API answers it."""
        return str(self.api.version().get("Version") or "unknown")

    def describe(self) -> str:
        """The engine as a report names it: "Docker 26.1.5+dfsg1, the containerd image store"."""
        return f"Docker {self.version()}, the {self.store()} image store"

    def default_builder(self) -> str:
        """The builder this engine uses when none is named: BuildKit from Docker 23 (its `docker build` is BuildKit's,
        the classic builder deprecated), the classic builder before (docs/engines.md)."""
        found = re.match(r"(\d+)\.", self.version())
        return "buildkit" if found and int(found[1]) >= BUILDKIT_BY_DEFAULT else "classic"

    def platform(self) -> str:
        """The engine's own platform (linux/amd64): what it builds without emulation."""
        version = self.api.version()
        return f"{version.get('Os') or 'linux'}/{version.get('Arch') or 'amd64'}"

    def store(self) -> str:
        """The engine's image store, as `docker info` names its driver: CONTAINERD_STORE (`driver-type:
        io.containerd.snapshotter.v1`, Docker 29's default) or CLASSIC_STORE (a graph driver: overlay2)."""
        if self._store is None:
            status = {str(pair[0]): str(pair[1]) for pair in self.api.info().get("DriverStatus") or []
                      if isinstance(pair, list | tuple) and len(pair) == 2}
            self._store = CONTAINERD_STORE if status.get("driver-type") == CONTAINERD_SNAPSHOTTER else CLASSIC_STORE
        return self._store

    def image_size(self, reference: str) -> int | None:
        """A local image's unpacked size in bytes, the same quantity on both stores: the classic store answers it;
        on the containerd store (whose `Size` is the packed content) it is counted from the saved layers
        (torchimages.unpacked); None when they cannot be counted there."""
        return self._size(reference, int(self.api.inspect_image(reference)["Size"]))

    def image_info(self, tag: str) -> dict[str, Any]:
        """ID, unpacked size in bytes (image_size) and layer count of a built image."""
        data = self.api.inspect_image(tag)
        return {"id": data["Id"], "size": self._size(tag, int(data["Size"])), "layers": len(data["RootFS"]["Layers"])}

    def _size(self, reference: str, answered: int) -> int | None:
        if self.store() == CLASSIC_STORE:
            return answered
        try:
            return self.layer_sizes.image_size(self.api.get_image(reference))
        except UncountedLayer:
            return None

    def folder_archive(self, reference: str, path: str) -> bytes | None:
        """A folder of a local image as a tar (`docker cp` from a container created, never started, then removed);
        None when the image has no such folder; a UserError when there is no such image."""
        try:
            container = self.api.create_container(reference, command=["true"])["Id"]
        except docker.errors.ImageNotFound:
            raise UserError(f"{reference}: no such image on the engine") from None
        try:
            stream, _ = self.api.get_archive(container, path)
            return b"".join(stream)
        except docker.errors.NotFound:
            return None
        finally:
            self.api.remove_container(container, force=True)

    def save_image(self, reference: str, path: Path) -> None:
        """The image as `docker save` streams it, written to `path` (on the containerd store: an OCI archive)."""
        with path.open("wb") as out:
            for chunk in self.api.get_image(reference):
                out.write(chunk)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.api.tag(image_id, repository, tag)

    def push(self, repository: str, tag: str, auth_config: dict[str, str] | None) -> Iterator[dict[str, Any]]:
        """The push's stream, chunk by chunk: errors arrive inside it, so the caller reads it to its end."""
        yield from self.api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth_config)


def image_exists(api: docker.APIClient, tag: str) -> bool:
    try:
        api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def connect(timeout: int) -> docker.APIClient:
    """A low-level client found the way the docker CLI finds the engine; a clear error if none answers, or if it is a
    Docker engine older than the oldest this tool is tested on."""
    address = engine_address()
    try:
        client = docker.APIClient(base_url=address, timeout=timeout, version="auto")
        client.ping()
        version = client.version()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0][:200]  # ValueError: a DOCKER_HOST the SDK cannot parse (tcp://[::1)
        raise EngineUnavailable(f"no Docker engine answers at {address} ({reason}); start it "
                                "(scripts/start-engine.sh starts Debian's dockerd) or set DOCKER_HOST") from None
    if why := too_old(version):
        raise UnsupportedEngine(f"the Docker engine at {address} is {why}")
    return client


# The image stores (docs/engines.md): the graph drivers' (overlay2), and containerd's, which `docker info` names by the
# snapshotter's plugin type.
CLASSIC_STORE, CONTAINERD_STORE = "classic", "containerd"
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
# The oldest Docker engine generation this tool is tested on (docs/engines.md): Debian 12's dockerd 20.10.
OLDEST_ENGINE = (20, 10)
# The first Docker engine whose `docker build` is BuildKit (Docker 23.0's release notes: "BuildKit is now the default
# builder on Linux"); before it, the classic builder.
BUILDKIT_BY_DEFAULT = 23


# The first Docker engine that pulls zstd-compressed layers: Docker 23.0's release notes ("Add support for pulling zstd
# compressed layers", moby/moby#41759, moby/moby#42862, https://github.com/moby/moby/releases/tag/v23.0.0). Debian 12's
# dockerd 20.10.24 stops on such a layer with "failed to register layer: Error processing tar file(exit status 1):
# archive/tar: invalid tar header" (tried here, docs/engines.md). An image pushed with one records this floor for `fit`.
ZSTD_PULL_FLOOR = "23.0"
ENGINE_RELEASE = re.compile(r"^([0-9]{1,4})\.([0-9]{1,4})")  # 26.1.5+dfsg1 -> (26, 1): what a floor compares


def pull_floor(layer_media_types: tuple[str, ...]) -> str | None:
    """The oldest Docker engine that pulls an image of these layers: ZSTD_PULL_FLOOR where one is zstd, else None
    (every engine this tool supports reads gzip)."""
    return ZSTD_PULL_FLOOR if any(media_type.endswith("+zstd") for media_type in layer_media_types) else None


def engine_release(version: str) -> tuple[int, int] | None:
    """A Docker engine version's major and minor ('26.1.5+dfsg1' -> (26, 1)); None for what is not a version."""
    found = ENGINE_RELEASE.match(version)
    return (int(found[1]), int(found[2])) if found else None


class UnsupportedEngine(UserError):
    """An engine older than the oldest supported one: builds there fail in ways this tool does not explain."""


def too_old(version: dict[str, Any]) -> str | None:
    """Why a Docker engine's /version answer is below the floor, or None. Only Docker's own engine (its component is
    named Engine, or it names none, as before 17.06) is judged: another engine speaking its API (Podman) numbers its
    versions otherwise."""
    components = [str(c.get("Name")) for c in version.get("Components") or [] if isinstance(c, dict)]
    found = re.match(r"(\d+)\.(\d+)", str(version.get("Version") or ""))
    if (components and "Engine" not in components) or not found:
        return None
    if (int(found[1]), int(found[2])) >= OLDEST_ENGINE:
        return None
    shown = ANSI.sub("", str(version.get("Version")))[:40].encode("ascii", "replace").decode()
    oldest = ".".join(map(str, OLDEST_ENGINE))
    return (f"{shown!r}, older than {oldest}, the oldest this tool is tested on (docs/engines.md): upgrade it, or "
            "point DOCKER_HOST at a newer one")


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
