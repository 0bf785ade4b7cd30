"""Build caches from a registry: `--cache-from REF` and `--cache-from previous`.

`--cache-from REF` hands pulled images to the classic builder's cache_from. That restores the layers of
one image per build: after its first hit the engine looks only at that image (moby's imageCache narrows
its sources), so a multi-stage build is restored only up to the first stage whose steps the image's
history lacks. Our base images copy their venv from a builder stage that no pushed image contains, so a
base image's builder stage runs again however many images are given.

`--cache-from previous` therefore reuses whole images, the way BuildKit's cache keys do: each image's
*content digest* covers everything its build reads except the release (the build context above the
release stamp, the build arguments, the FROM image's ID or, for a variant, its base's content digest).
When the previous release's manifest records the same digest for the image, that image is pulled and
only the release stamp (the template's last instruction, the labels that name the release) is written
on top of it: the same layers, the same configuration, a new release label. Otherwise the image is
built, with the previous release's image as a classic cache_from source.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from ..errors import UserError
from .digests import DigestMemo, sha256_of
from .inputs import PROXY_VARIABLES
from .render import BUILDKIT_DOCKERFILE

if TYPE_CHECKING:
    from ..manifest import ReleaseManifest

STAMP_MARKER = "# ---- release stamp:"
DOCKERFILES = ("Dockerfile", BUILDKIT_DOCKERFILE)  # both syntaxes end in the same stamp
CONTENT_LABEL = "io.torchimages.content-digest"
PREVIOUS = "previous"


@dataclass(frozen=True)
class Reusable:
    """A previous release's image: its pinned reference (REPOSITORY@DIGEST) and the content digest it was built from."""

    reference: str
    content_digest: str | None


@dataclass(frozen=True)
class CacheSources:
    """Where builds may take cached layers or whole images from."""

    refs: tuple[str, ...] = ()  # --cache-from REF: pulled, then every build's cache_from
    previous: dict[str, Reusable] = field(default_factory=dict)  # image -> the previous release's

    @classmethod
    def parse(cls, values: tuple[str, ...], previous_manifest: ReleaseManifest | None,
              repository: str) -> CacheSources:
        """The --cache-from values; `previous` takes the images of the --previous manifest, which must be this
        release's repository's (`repository`): a downloaded manifest naming another registry is not pulled from."""
        refs = tuple(value for value in values if value != PREVIOUS)
        if PREVIOUS not in values:
            return cls(refs=refs)
        if previous_manifest is None:
            raise UserError("--cache-from previous needs --previous MANIFEST: the previous release's manifest names "
                            "its images (releases/RELEASE.json, written by push or promote)")
        if previous_manifest.repository != repository:
            raise UserError(f"--cache-from previous: the --previous manifest's images are in "
                            f"{previous_manifest.repository}, not in this release's repository {repository}; only the "
                            "release's own images are reused")
        images = {item.image: Reusable(previous_manifest.reference(item), item.content_digest)
                  for item in previous_manifest.images}
        return cls(refs=refs, previous=images)

    @property
    def used(self) -> bool:
        return bool(self.refs or self.previous)

    def reusable(self, image: str, digest: str | None) -> str | None:
        """The previous release's image (by digest) when its content is this build's, else None; the pulled image's
        content label must say so too (Builds.reuse_checked)."""
        entry = self.previous.get(image)
        if digest and entry and entry.content_digest == digest:
            return entry.reference
        return None

    def layer_sources(self, image: str) -> list[str]:
        """cache_from for a build of `image`: its previous release first, then every --cache-from REF."""
        entry = self.previous.get(image)
        return ([entry.reference] if entry else []) + list(self.refs)


def content_digest(context: Path, buildargs: dict[str, str], parent: str, memo: DigestMemo | None = None) -> str:
    """What an image's build reads, release aside: its FROM image (`parent`), build arguments, files, Dockerfile.
    `memo` gives the digests of large files it already read (digests.py); without one every file is read."""
    digest = hashlib.sha256()
    file_sha256 = memo.sha256 if memo else sha256_of

    def feed(*parts: str) -> None:
        for part in parts:
            digest.update(part.encode() + b"\0")

    feed("parent", parent)
    for name in sorted(buildargs):
        if name not in PROXY_VARIABLES and name != "BASE_IMAGE":  # proxies change no content; the parent stands in
            feed("arg", name, without_credentials(buildargs[name]))
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        relative = path.relative_to(context).as_posix()
        if relative in DOCKERFILES:
            feed("dockerfile", relative, content_of(path.read_text(encoding="utf-8")))
        else:
            feed("file", relative, oct(path.stat().st_mode & 0o777), file_sha256(path))
    return f"sha256:{digest.hexdigest()}"


def without_credentials(value: str) -> str:
    """A URL without its user and password: they change no content, and the digest is shown in a label (a hash of a
    known context and a weak password could be searched)."""
    parts = urlsplit(value)
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return value


def content_of(dockerfile: str) -> str:
    """The instructions above the release stamp, without comments or the FROM image's default; then the names
    (not the values) of the stamp's labels, so a label added or dropped counts as a change."""
    above, _, stamp = dockerfile.partition(STAMP_MARKER)
    kept = [line for line in above.splitlines()
            if line.strip() and not line.lstrip().startswith("#") and not line.startswith("ARG BASE_IMAGE=")]
    return "\n".join(kept + sorted(label_names(stamp)))


def label_names(stamp: str) -> set[str]:
    lines = stamp.splitlines()
    start = next((number for number, line in enumerate(lines) if line.startswith("LABEL ")), len(lines))
    return {line.strip().removeprefix("LABEL ").split("=", 1)[0] for line in lines[start:] if "=" in line}


def stamp_of(dockerfile: str) -> str:
    """The release stamp: the template's last lines, from the marker on."""
    _, marker, stamp = dockerfile.partition(STAMP_MARKER)
    if not marker:
        raise UserError("the rendered Dockerfile has no release stamp: render again with this version's template")
    return marker + stamp


def stamp_labels(dockerfile: str) -> dict[str, str] | None:
    """The labels the release stamp's LABEL instruction writes, as the engine stores them (key="value" pairs,
    quotes removed); {} for a stamp without one, None for one that cannot be read (unbalanced quotes)."""
    lines = stamp_of(dockerfile).splitlines()
    start = next((number for number, line in enumerate(lines) if line.startswith("LABEL ")), len(lines))
    instruction = " ".join(line.strip().removesuffix("\\") for line in lines[start:] if not line.startswith("#"))
    try:
        words = shlex.split(instruction.removeprefix("LABEL "))
    except ValueError:
        return None
    return dict(word.split("=", 1) for word in words if "=" in word)


def stamp_dockerfile(reference: str, dockerfile: str) -> str:
    """A Dockerfile that writes this release's stamp onto a previous release's identical image."""
    return f"# hadolint ignore=DL3006\nFROM {reference}\n{stamp_of(dockerfile)}"


def from_default(dockerfile: str) -> str | None:
    """The FROM image a rendered Dockerfile names when no BASE_IMAGE build argument is given."""
    for line in dockerfile.splitlines():
        if line.startswith("ARG BASE_IMAGE="):
            return line.split("=", 1)[1].strip() or None
    return None
