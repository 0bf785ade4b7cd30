"""What the session leaves on an engine: each module removes what it made when it ends (containers, tags, untagged
images, BuildKit cache), except the session's own builds that later modules use (`kept`) and the bases setup makes
(`torchimages/*`, slow to make again); when the session ends, each lane removes what it made on its engine since its
first test, its kept builds included, so an engine holds after a session what it held before. A heavy module takes a
lock both lanes share, so the disk holds one heavy module at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import docker

T = TypeVar("T")
BASES = "torchimages/"
KEPT: set[str] = set()  # tags of the session's builds that later modules use
KEPT_CACHE: set[str] = set()  # the BuildKit cache records those builds made
HEAVY_LOCK = Path(tempfile.gettempdir()) / "torchimages-heavy-module.lock"


def client(timeout: int = 300, address: str | None = None) -> docker.APIClient | None:
    """The engine at `address`, by default this process's lane's (DOCKER_HOST), or None when none answers."""
    try:
        api = docker.APIClient(base_url=address or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
                               version="auto", timeout=timeout)
        api.ping()
    except Exception:  # an engine that is not there answers in many ways
        return None
    return api


def build_cache(api: docker.APIClient) -> frozenset[str]:
    return frozenset(record["ID"] for record in api.df().get("BuildCache") or ())


def kept(make: Callable[[], T], tags: Callable[[T], list[str]]) -> T:
    """A session build that later modules use: its tags and BuildKit cache stay when the module that made it ends."""
    api = client()
    before = build_cache(api) if api else frozenset()
    made = make()
    KEPT.update(tags(made))
    if api:
        KEPT_CACHE.update(build_cache(api) - before)
    return made


@dataclass(frozen=True)
class EngineState:
    containers: frozenset[str]
    images: frozenset[str]
    tags: frozenset[str]
    cache: frozenset[str]

    @classmethod
    def of(cls, api: docker.APIClient) -> EngineState:
        images = api.images(all=True)  # the classic builder's intermediate images too
        return cls(frozenset(c["Id"] for c in api.containers(all=True)), frozenset(i["Id"] for i in images),
                   frozenset(t for i in images for t in i.get("RepoTags") or () if t != "<none>:<none>"),
                   build_cache(api))

    def remove_made_since(self, api: docker.APIClient, *, keep: set[str], keep_cache: set[str]) -> None:
        """Containers, tags, untagged images and BuildKit cache made since this state, less `keep` and the bases."""
        now = EngineState.of(api)
        tags = sorted(t for t in now.tags - self.tags if t not in keep and not t.startswith(BASES))
        for container in now.containers - self.containers:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                api.remove_container(container, force=True, v=True)
        for tag in tags:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                api.remove_image(tag, force=True)
        # Then what has no tag left: intermediate images and images known only by repository@digest (pulled by digest)
        untagged = [i for i in api.images(all=True) if i["Id"] not in self.images
                    and not [t for t in i.get("RepoTags") or () if t != "<none>:<none>"]]
        for image in deepest_first(untagged):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):  # a kept image's parent stays
                api.remove_image(image, force=True)
        self.prune_cache(api, keep_cache)

    def prune_cache(self, api: docker.APIClient, keep: set[str]) -> None:
        """BuildKit's cache made since this state, less `keep`, record by record (a parent goes once its children
        have); with nothing to keep, the whole cache (a record-by-record prune once left a 5 GB snapshot listed by no
        record)."""
        if not keep and not self.cache:
            api.prune_builds(all=True)
            return
        for _ in range(8):
            made = build_cache(api) - self.cache - keep
            if not [r for r in made if api.prune_builds(filters={"id": r}, all=True).get("CachesDeleted")]:
                return


def deepest_first(images: list[dict]) -> list[str]:
    """Image IDs, each before its parent (a classic build's chain; the steps built on a pulled image), whatever their
    times say: a pulled image and the steps on it share one."""
    parent = {image["Id"]: image.get("ParentId") or "" for image in images}

    def depth(image: str) -> int:
        return 1 + depth(parent[image]) if parent.get(image) in parent else 0
    return sorted(parent, key=depth, reverse=True)


@contextlib.contextmanager
def module_cleaned_up(heavy: bool) -> Iterator[None]:
    """A module's run: alone among heavy modules (the lock), and what it made removed when it ends."""
    descriptor = os.open(HEAVY_LOCK, os.O_CREAT | os.O_RDWR, 0o600) if heavy else None
    if descriptor is not None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
    api = client()
    before = EngineState.of(api) if api else None
    try:
        yield
    finally:
        if api is not None and before is not None:
            before.remove_made_since(api, keep=KEPT, keep_cache=KEPT_CACHE)
        if descriptor is not None:
            os.close(descriptor)


class SessionCleanup:
    """The engine's state at this lane's first test; at the session's end, everything made since goes."""

    def __init__(self) -> None:
        self.api: docker.APIClient | None = None
        self.before: EngineState | None = None

    def start(self) -> None:
        if self.before is None and (api := client()) is not None:
            self.api, self.before = api, EngineState.of(api)

    def finish(self) -> None:
        if self.api is not None and self.before is not None:
            self.before.remove_made_since(self.api, keep=set(), keep_cache=set())
