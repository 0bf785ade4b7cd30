"""`build.py diff OLD NEW`: what changed between two releases, per image, from their release manifests and SBOMs:
versions (torch, CUDA, cuDNN, NCCL, Python), Debian and Python packages added, removed and changed, size and layers,
smoke results. Markdown for release notes, or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import manifest
from ..errors import markdown_text
from ..manifest import ManifestImage, ReleaseManifest
from . import sbom

VERSIONS = ("torch", "cuda", "cudnn", "nccl", "python")
KINDS = {"deb": "Debian", "pypi": "Python"}


@dataclass
class PackageChanges:
    added: dict[str, str] = field(default_factory=dict)
    removed: dict[str, str] = field(default_factory=dict)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


@dataclass
class ImageDiff:
    image: str
    state: str  # changed, unchanged, added, removed
    versions: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    packages: dict[str, PackageChanges] = field(default_factory=dict)
    size: tuple[int | None, int | None] = (None, None)
    layers: tuple[int | None, int | None] = (None, None)
    smoke: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def load(path: Path) -> ReleaseManifest:
    """A release manifest, every field checked (manifest.read)."""
    return manifest.read(path)


def diff(old: ReleaseManifest, new: ReleaseManifest) -> list[ImageDiff]:
    before, after = old.by_name(), new.by_name()
    found = []
    for name in sorted(before.keys() | after.keys()):
        if name not in before:
            found.append(ImageDiff(name, "added"))
        elif name not in after:
            found.append(ImageDiff(name, "removed"))
        else:
            found.append(image_diff(name, before[name], after[name]))
    return found


def image_diff(name: str, old: ManifestImage, new: ManifestImage) -> ImageDiff:
    result = ImageDiff(name, "unchanged")
    for key in VERSIONS:
        a, b = old.versions.get(key), new.versions.get(key)
        if a != b:
            result.versions[key] = (a, b)
    result.size = (old.size_bytes, new.size_bytes)
    result.layers = (old.layers, new.layers)
    for key in ("passed", "failed", "skipped", "skipped_no_gpu"):
        a, b = getattr(old.smoke, key), getattr(new.smoke, key)
        if a != b:
            result.smoke[key] = (a, b)
    old_sbom, new_sbom = sbom_of(old, result), sbom_of(new, result)
    if old_sbom is not None and new_sbom is not None:
        for kind in KINDS:
            changes = package_changes(old_sbom.get(kind, {}), new_sbom.get(kind, {}))
            if changes:
                result.packages[kind] = changes
    moved = old.digest != new.digest
    same_content = bool(old.content_digest) and old.content_digest == new.content_digest
    if moved and same_content:  # reused by --cache-from previous: the same layers under new release labels
        result.notes.append("the same content (content digest), only the release labels are new")
    if result.versions or result.packages or result.smoke or old.layers != new.layers or (moved and not same_content):
        result.state = "changed"
    return result


def sbom_of(image: ManifestImage, result: ImageDiff) -> dict[str, dict[str, str]] | None:
    """type -> name -> version from the image's SBOM, once its bytes match its sha256; a missing file is a note."""
    if image.sbom is None:
        result.notes.append("an SBOM is missing: packages not compared")
        return None
    if not image.sbom.file.is_file():
        result.notes.append(f"{image.sbom.file.name} is missing: packages not compared")
        return None
    return sbom.packages_of(image.sbom.read(image.image), image.sbom.file)


def package_changes(old: dict[str, str], new: dict[str, str]) -> PackageChanges:
    return PackageChanges(
        added={k: new[k] for k in sorted(new.keys() - old.keys())},
        removed={k: old[k] for k in sorted(old.keys() - new.keys())},
        changed={k: (old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]},
    )


def markdown(old: ReleaseManifest, new: ReleaseManifest, diffs: list[ImageDiff]) -> str:
    """Release notes: every value from a manifest or an SBOM is escaped (errors.markdown_text), so none can forge a
    heading, a link or HTML."""
    m = markdown_text
    lines = [f"# Changes from {m(old.release)} to {m(new.release)}", ""]
    for item in diffs:
        lines.append(f"## {m(item.image)}: {item.state}")
        if item.state in ("added", "removed"):
            lines.append("")
            continue
        for key, (a, b) in item.versions.items():
            lines.append(f"- {key}: {m(a)} -> {m(b)}")
        if item.size != (None, None):
            lines.append(f"- size: {mb(item.size[0])} -> {mb(item.size[1])} ({growth(*item.size)})")
        if item.layers[0] != item.layers[1]:
            lines.append(f"- layers: {item.layers[0]} -> {item.layers[1]}")
        for key, (a, b) in item.smoke.items():
            lines.append(f"- smoke {key}: {a} -> {b}")
        for kind, changes in item.packages.items():
            label = KINDS[kind]
            lines += [f"- {label} packages: {len(changes.added)} added, {len(changes.removed)} removed, "
                      f"{len(changes.changed)} changed"]
            lines += [f"  - added {m(n)} {m(v)}" for n, v in changes.added.items()]
            lines += [f"  - removed {m(n)} {m(v)}" for n, v in changes.removed.items()]
            lines += [f"  - {m(n)} {m(a)} -> {m(b)}" for n, (a, b) in changes.changed.items()]
        lines += [f"- note: {m(note)}" for note in item.notes]
        lines.append("")
    return "\n".join(lines)


def as_json(old: ReleaseManifest, new: ReleaseManifest, diffs: list[ImageDiff]) -> str:
    return json.dumps({"old": old.release, "new": new.release, "images": [asdict(d) for d in diffs]}, indent=2) + "\n"


def mb(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e6:.0f} MB"


def growth(old: int | None, new: int | None) -> str:
    if not old or new is None:
        return "new"
    return f"{(new - old) / old * 100:+.1f}%"
