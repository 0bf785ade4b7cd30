"""Base images pinned by digest: `build.py lock` resolves each base tag of the matrix through the registry API and
writes the lock file beside the matrix (matrix.yaml -> matrix.lock); render writes `FROM tag@digest` for what it pins.

A tag upstream can move or vanish (pytorch/pytorch#166897); a digest cannot, so the same release rebuilt later is the
same base. The lock moves only when asked (`lock --refresh`), and says what moved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..checkedjson import Fields
from ..errors import UserError, visible
from ..files import atomic_write, load
from . import grammar
from .grammar import digest_problem
from .specs import Plan

DOCKER_HUB = "registry-1.docker.io"  # where docker.io's API answers (its token flow is the anonymous one)


@dataclass(frozen=True)
class Pin:
    digest: str
    locked_at: str  # UTC, ISO 8601
    source: str  # the manifest URL the digest was read from


@dataclass(frozen=True)
class Location:
    """Where a reference's manifest is served: registry host for the API, the host docker login names, path, tag."""

    api_host: str
    login_host: str
    repository: str
    tag: str

    @property
    def url(self) -> str:
        return f"https://{self.api_host}/v2/{self.repository}/manifests/{self.tag}"


@dataclass
class LockFile:
    path: Path
    pins: dict[str, Pin] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> LockFile:
        """The lock beside the matrix, every pin checked: a tag that is an image reference, a sha256 digest (what
        render writes into FROM), and one-line text for when and where it was read."""
        if not path.is_file():
            return cls(path)
        top = Fields(str(path), load(path, "a lock file"), allowed=("comment", "pins"))
        top.text("comment", grammar.control_problem, optional=True)
        pins = top.sub("pins", ())
        assert pins is not None
        found = {}
        for tag in pins.data:
            why = grammar.control_problem(tag) or grammar.image_reference_problem(tag)
            if why or "@" in tag:
                pins.refuse(tag, f"{why or 'is pinned already (it holds a digest)'}; delete the pin and run "
                                 "python build.py lock")
            pin = pins.sub(tag, ("digest", "locked_at", "source"))
            assert pin is not None
            digest = pin.required_text("digest", digest_problem)
            locked_at = pin.required_text("locked_at", grammar.timestamp_problem)
            source = pin.required_text("source")
            if source != locate(tag).url:  # derived from the tag, never taken from the file (file://, user:password@)
                pin.refuse("source", f"{visible(source)[:80]!r} is not where the tag's manifest is served: "
                                     f"{locate(tag).url}; delete the pin and run python build.py lock")
            found[tag] = Pin(digest=digest, locked_at=locked_at, source=source)
        return cls(path, found)

    def write(self) -> None:

        data = {"comment": "Base images pinned by digest: written by python build.py lock; review moves like code.",
                "pins": {tag: vars(self.pins[tag]) for tag in sorted(self.pins)}}
        atomic_write(self.path, json.dumps(data, indent=2) + "\n")

    def digests(self) -> dict[str, str]:
        return {tag: pin.digest for tag, pin in self.pins.items()}


def base_tags(plan: Plan) -> list[str]:
    """Every base image the matrix names by tag (one already given by digest needs no pin)."""
    return sorted({spec.base_image for spec in plan.specs if "@" not in spec.base_image})


def stale(plan: Plan, lock: LockFile) -> list[str]:
    """Why the lock does not fit the matrix: a base tag it lacks, or a pin the matrix no longer uses."""
    wanted = set(base_tags(plan))
    return ([f"{lock.path.name} has no pin for {tag}" for tag in sorted(wanted - lock.pins.keys())]
            + [f"{lock.path.name} pins {tag}, which the matrix no longer uses" for tag in sorted(lock.pins.keys() - wanted)])


def locate(reference: str) -> Location:
    """Docker's normalization: a first component with '.' or ':' (or 'localhost') is a registry, else Docker Hub,
    where a one-component name lives under library/."""
    name, _, tag = reference.rpartition(":") if ":" in reference.rsplit("/", 1)[-1] else (reference, "", "latest")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        if first not in ("docker.io", "index.docker.io"):
            return Location(first, first, rest, tag)
        name = rest  # docker.io/debian is Docker Hub's library/debian, as debian is
    return Location(DOCKER_HUB, "docker.io", name if "/" in name else f"library/{name}", tag)


Resolver = Callable[[Location], str | None]


@dataclass(frozen=True)
class Change:
    tag: str
    old: str | None
    new: str | None

    def line(self) -> str:
        if self.old is None:
            return f"pinned  {self.tag} -> {self.new}"
        if self.new is None:
            return f"dropped {self.tag} (was {self.old})"
        return f"moved   {self.tag}: {self.old} -> {self.new}"


def update(plan: Plan, lock: LockFile, resolve: Resolver, *, refresh: bool) -> list[Change]:
    """Pin every base tag the lock lacks (all of them with `refresh`), drop pins the matrix no longer uses."""
    changes: list[Change] = []
    wanted = base_tags(plan)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for tag in wanted:
        old = lock.pins.get(tag)
        if old and not refresh:
            continue
        location = locate(tag)
        digest = resolve(location)
        if digest is None:
            raise UserError(f"{tag}: the registry has no such tag ({location.url}); fix base_image in the matrix")
        if why := digest_problem(digest):  # what is written here is rendered into every FROM line
            raise UserError(f"{location.url}: the registry answered a digest that cannot be pinned: {why}")
        if old is None or old.digest != digest:
            changes.append(Change(tag, old.digest if old else None, digest))
            lock.pins[tag] = Pin(digest=digest, locked_at=now, source=location.url)
    for tag in sorted(lock.pins.keys() - set(wanted)):
        changes.append(Change(tag, lock.pins.pop(tag).digest, None))
    return changes


def registry_resolver() -> Resolver:
    """Resolve through each registry's API: anonymous tokens (Docker Hub, nvcr.io), or what docker login stored."""
    import requests  # here, not at the top: validate and render never talk to a registry

    from ..registry import credentials_from_docker_config, registry_client

    def resolve(location: Location) -> str | None:
        client = registry_client(location.api_host, credentials_from_docker_config(location.login_host))
        try:
            return client.digest(location.repository, location.tag)
        except requests.HTTPError as exc:
            raise UserError(f"{location.url}: {exc.response.status_code} from the registry; for a private registry "
                            f"run docker login {location.login_host}") from None
        except requests.RequestException as exc:
            raise UserError(f"{location.url}: the registry does not answer ({type(exc).__name__}: "
                            f"{str(exc)[:200]})") from None

    return resolve
