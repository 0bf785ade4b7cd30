"""`build.py diff OLD NEW`: what changed between two releases, per image, from their release manifests and SBOMs:
versions (torch, CUDA, cuDNN, NCCL, Python), Debian and Python packages added, removed and changed, size and layers,
smoke results. Markdown for release notes, or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import sbom
from .report import read_manifest

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


def load(path: Path) -> dict[str, Any]:
    """A release manifest, with the folder its SBOM paths are relative to."""
    return {**read_manifest(path), "_folder": path.parent}


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[ImageDiff]:
    before = {image["image"]: image for image in old["images"]}
    after = {image["image"]: image for image in new["images"]}
    found = []
    for name in sorted(before.keys() | after.keys()):
        if name not in before:
            found.append(ImageDiff(name, "added"))
        elif name not in after:
            found.append(ImageDiff(name, "removed"))
        else:
            found.append(image_diff(name, before[name], after[name], old["_folder"], new["_folder"]))
    return found


def image_diff(name: str, old: dict[str, Any], new: dict[str, Any], old_folder: Path, new_folder: Path) -> ImageDiff:
    result = ImageDiff(name, "unchanged")
    for key in VERSIONS:
        a, b = (old.get("versions") or {}).get(key), (new.get("versions") or {}).get(key)
        if a != b:
            result.versions[key] = (a, b)
    result.size = (old.get("size_bytes"), new.get("size_bytes"))
    result.layers = (old.get("layers"), new.get("layers"))
    for key in ("passed", "failed", "skipped", "skipped_no_gpu"):
        a, b = (old.get("smoke") or {}).get(key), (new.get("smoke") or {}).get(key)
        if a != b:
            result.smoke[key] = (a, b)
    old_sbom, new_sbom = sbom_of(old, old_folder, result), sbom_of(new, new_folder, result)
    if old_sbom is not None and new_sbom is not None:
        for kind in KINDS:
            changes = package_changes(old_sbom.get(kind, {}), new_sbom.get(kind, {}))
            if changes:
                result.packages[kind] = changes
    moved = old.get("digest") != new.get("digest")
    same_content = bool(old.get("content_digest")) and old.get("content_digest") == new.get("content_digest")
    if moved and same_content:  # reused by --cache-from previous: the same layers under new release labels
        result.notes.append("the same content (content digest), only the release labels are new")
    if result.versions or result.packages or result.smoke or (moved and not same_content):
        result.state = "changed"
    return result


def sbom_of(image: dict[str, Any], folder: Path, result: ImageDiff) -> dict[str, dict[str, str]] | None:
    entry = image.get("sbom")
    if not entry:
        result.notes.append("an SBOM is missing: packages not compared")
        return None
    path = folder / entry["path"]
    if not path.is_file():
        result.notes.append(f"{path} is missing: packages not compared")
        return None
    return sbom.packages(path)


def package_changes(old: dict[str, str], new: dict[str, str]) -> PackageChanges:
    return PackageChanges(
        added={k: new[k] for k in sorted(new.keys() - old.keys())},
        removed={k: old[k] for k in sorted(old.keys() - new.keys())},
        changed={k: (old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]},
    )


def markdown(old: dict[str, Any], new: dict[str, Any], diffs: list[ImageDiff]) -> str:
    lines = [f"# Changes from {old.get('release')} to {new.get('release')}", ""]
    for item in diffs:
        lines.append(f"## {item.image}: {item.state}")
        if item.state in ("added", "removed"):
            lines.append("")
            continue
        for key, (a, b) in item.versions.items():
            lines.append(f"- {key}: {a} -> {b}")
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
            lines += [f"  - added {n} {v}" for n, v in changes.added.items()]
            lines += [f"  - removed {n} {v}" for n, v in changes.removed.items()]
            lines += [f"  - {n} {a} -> {b}" for n, (a, b) in changes.changed.items()]
        lines += [f"- note: {note}" for note in item.notes]
        lines.append("")
    return "\n".join(lines)


def as_json(old: dict[str, Any], new: dict[str, Any], diffs: list[ImageDiff]) -> str:
    return json.dumps({"old": old.get("release"), "new": new.get("release"), "images": [asdict(d) for d in diffs]},
                      indent=2) + "\n"


def mb(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e6:.0f} MB"


def growth(old: int | None, new: int | None) -> str:
    if not old or new is None:
        return "new"
    return f"{(new - old) / old * 100:+.1f}%"
