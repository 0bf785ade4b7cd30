"""`build.py compat refresh`: bring data/compat.yaml up to what the package indexes say (indexes.py), as a diff.

What the indexes state is written over the data with their source (PYPI_INDEX, WHL_INDEX): each release's Python
wheels and platforms, the default build and its cuDNN and NCCL pins, each CUDA build's Python wheels and platforms.
New releases and builds get rows; what only people know (GPU archs, domain library pairs, the driver table, NGC) is
never touched, and a new row marks it UNCONFIRMED. Nothing is deleted: a build the index no longer lists is reported.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..consoles import out
from ..errors import UserError
from . import compat, indexes
from .indexes import Release

DATA = Path(__file__).parents[1] / "data" / "compat.yaml"

SOURCES = {
    "PYPI_INDEX": "PyPI simple index of torch (PEP 691 JSON) https://pypi.org/simple/torch/ and the wheels' metadata files "
                  "(PEP 658/714 .metadata, Requires-Dist pins), read by `python build.py compat refresh`",
    "WHL_INDEX": "PyTorch wheel indexes https://download.pytorch.org/whl/cuXYZ/torch/ (PEP 503 pages), read by "
                 "`python build.py compat refresh`",
}
HEADER = "#"


@dataclass
class Refresh:
    data: dict[str, Any]
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    diff: str = ""
    path: Path = Path()
    # id(build) -> (the build, its wheels before this refresh, Python, platforms and sources read in this one)
    seen: dict[int, tuple[dict[str, Any], Any, set[str], set[str], set[str]]] = field(default_factory=dict)


def run(*, since: str, check: bool, pypi_index: str, wheel_index: str | None, fetch: indexes.Fetch | None = None,
        path: Path = DATA) -> Refresh:
    """Read the indexes, apply what they say to the data file, and write it (and its compiled copy) unless `check`.
    `wheel_index` None reads PyPI alone (where the PyTorch indexes cannot be reached): the other builds stay as they are."""
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    fetch = fetch or indexes.http_fetch()
    try:
        releases = indexes.pypi_releases(fetch, since=since, index=pypi_index)
        read = indexes.wheel_index_builds(fetch, releases, candidate_variants(data), index=wheel_index) if wheel_index else []
    except Exception as exc:  # requests' errors are not imported here: any failure to read is one message
        raise UserError(f"could not read the indexes ({type(exc).__name__}: {str(exc)[:300]}); give a reachable "
                        "mirror with --pypi-index / --wheel-index") from None
    if not releases:
        raise UserError(f"{pypi_index} lists no torch release from {since} on: is it torch's simple page?")
    result = apply(data, releases, read)
    if wheel_index is None:
        result.notes.append("the PyTorch wheel indexes were not read (--skip-wheel-index): only PyPI's default builds "
                            "are refreshed")
    new_text = dump(result.data, header_of(text))
    result.diff, result.path = diff(text, new_text, path), path
    if result.diff and not check:
        path.write_text(new_text, encoding="utf-8")
        compat.write_cache(path.parent)
    return result


def variant_cuda(variant: str) -> str:
    """cu121 -> 12.1, cu130 -> 13.0, cu118 -> 11.8."""
    digits = variant[2:]
    return f"{digits[:-1]}.{digits[-1]}"


def cuda_variant(cuda: str) -> str:
    major, minor = cuda.split(".")[:2]
    return f"cu{major}{minor}"


def sorted_versions(values: set[str]) -> list[str]:
    """Python versions in order, a free-threaded build after its own: 3.13, 3.13t, 3.14."""
    return sorted(values, key=lambda v: (indexes.version_key(v.removesuffix("t")), v.endswith("t")))


def candidate_variants(data: dict[str, Any]) -> list[str]:
    """Wheel indexes to read: every build variant the data knows, and one per CUDA minor of the driver table (a new
    CUDA gets its driver row by hand first, with its source; then its builds are found)."""
    known = {b["variant"] for row in data["torch"] for b in row["builds"]}
    known |= {cuda_variant(v) for v in data["cuda_min_driver"]["toolkit"] if int(v.split(".")[0]) >= 11}
    return sorted(known, key=lambda v: indexes.version_key(variant_cuda(v)))


def apply(data: dict[str, Any], releases: dict[str, Release], read_variants: list[str]) -> Refresh:
    """`data` with what `releases` state written over it; every change and note as a line."""
    result = Refresh(data)
    data["sources"].update(SOURCES)
    rows = data["torch"]
    versions: dict[int, str] = {}
    for version in sorted(releases, key=indexes.version_key):
        release = releases[version]
        row = next((r for r in rows if r["version"] == version), None)
        if row is None:
            row = new_row(version)
            rows.append(row)
            rows.sort(key=lambda r: indexes.version_key(r["version"]))
            result.changes.append(f"torch {version}: new release (torchvision, torchaudio and GPU archs to be added by hand)")
        update_python(row, release, result)
        update_default_build(row, release, result)
        for variant in sorted(release.builds, key=lambda v: indexes.version_key(variant_cuda(v))):
            update_build(row, variant, *release.builds[variant], result)
        for build in row["builds"]:
            versions[id(build)] = version
            if build["variant"] in read_variants and build["variant"] not in release.builds and not build["default"]:
                result.notes.append(f"torch {version} {build['variant']}: in the data, not on its wheel index (kept)")
    report_wheels(result, versions)
    return result


def new_row(version: str) -> dict[str, Any]:
    return {"version": version, "python": [], "python_sources": ["PYPI_INDEX"], "torchvision": None, "torchaudio": None,
            "domain_libs_sources": [], "builds": []}


def update_python(row: dict[str, Any], release: Release, result: Refresh) -> None:
    python = sorted_versions(release.python)
    if row["python"] != python:
        result.changes.append(f"torch {row['version']}: Python wheels {row['python']} -> {python}")
        row["python"] = python
    add_source(row.setdefault("python_sources", []), "PYPI_INDEX")


def update_default_build(row: dict[str, Any], release: Release, result: Refresh) -> None:
    """PyPI's own wheel is one CUDA build: the default. Its pins are the cuDNN and NCCL that build bundles."""
    if release.default_cuda is None:
        if release.metadata_urls and release.metadata_source is None:
            result.notes.append(f"torch {row['version']}: no metadata file on the index; default build and pins kept")
        return
    build = find_build(row, cuda_variant(release.default_cuda), result)
    for other in row["builds"]:
        if other["default"] != (other is build):
            result.changes.append(f"torch {row['version']} {other['variant']}: default {other['default']} -> {other is build}")
            other["default"] = other is build
    set_wheels(row["version"], build, release.python, release.cuda_platforms, source="PYPI_INDEX", result=result)
    for name, value in (("cudnn", release.cudnn), ("nccl", release.nccl)):
        if value is None:
            continue
        if build.get(name) != value:
            result.changes.append(f"torch {row['version']} {build['variant']}: {name} {build.get(name)} -> {value}")
            build[name] = value
            build["sources"][name] = ["PYPI_INDEX"]
        else:
            add_source(build["sources"].setdefault(name, []), "PYPI_INDEX")
        if name in build.get("unconfirmed", []):
            build["unconfirmed"].remove(name)


def update_build(row: dict[str, Any], variant: str, python: set[str], platforms: set[str], result: Refresh) -> None:
    build = find_build(row, variant, result)
    set_wheels(row["version"], build, python, platforms, source="WHL_INDEX", result=result)
    add_source(build["sources"].setdefault("build", []), "WHL_INDEX")


def find_build(row: dict[str, Any], variant: str, result: Refresh) -> dict[str, Any]:
    build = next((b for b in row["builds"] if b["variant"] == variant), None)
    if build is None:
        build = {"variant": variant, "cuda": variant_cuda(variant), "default": False, "cudnn": None, "nccl": None,
                 "sources": {"build": []}, "archs": [], "archs_source": "UNCONFIRMED (not on any index: add by hand)",
                 "unconfirmed": ["cudnn", "nccl", "archs"]}
        row["builds"].append(build)
        row["builds"].sort(key=lambda b: indexes.version_key(b["cuda"]))
        result.changes.append(f"torch {row['version']} {variant}: new CUDA build")
    return build


def set_wheels(version: str, build: dict[str, Any], python: set[str], platforms: set[str], *, source: str,
               result: Refresh) -> None:
    """Which Python versions and platforms this build has wheels for: what `validate` proves an entry against. The
    default build is on PyPI and on its wheel index: what both list."""
    _, _, seen_python, seen_platforms, sources = result.seen.setdefault(
        id(build), (build, build.get("wheels"), set(), set(), set()))
    seen_python |= python
    seen_platforms |= platforms
    sources.add(source)
    build["wheels"] = {"python": sorted_versions(seen_python), "platforms": sorted(seen_platforms),
                       "sources": sorted(sources)}


def report_wheels(result: Refresh, versions: dict[int, str]) -> None:
    """One line per build whose recorded wheels changed; one for those recorded for the first time."""
    first = 0
    for key, (build, before, *_) in result.seen.items():
        after = build["wheels"]
        if before is None:
            first += 1
        elif before != after:
            result.changes.append(f"torch {versions[key]} {build['variant']}: wheels {before['python']} "
                                  f"{before['platforms']} -> {after['python']} {after['platforms']}")
    if first:
        result.changes.append(f"wheels (Python versions and platforms) recorded for {first} builds")


def add_source(sources: list[str], key: str) -> None:
    if key not in sources:
        sources.append(key)


class PlainDumper(yaml.SafeDumper):
    """Writes repeated lists in full: anchors would make the data file hard to review."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(data: dict[str, Any], header: str) -> str:
    """The data file's text: its header comment, then the data in the layout tools/import_compat_facts.py writes (so
    a diff shows facts only)."""
    return header + yaml.dump(data, Dumper=PlainDumper, sort_keys=False, width=110, allow_unicode=True)


def header_of(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith(HEADER):
            break
        lines.append(line)
    return "".join(lines)


def diff(old: str, new: str, path: Path) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}", n=2))


def shown(result: Refresh, *, check: bool) -> int:
    """Print what changed, the notes and the diff; the exit code (with `check`: 1 when the data is behind)."""
    for line in result.changes:
        out.print(f"changed: {line}")
    for line in result.notes:
        out.print(f"note:    {line}")
    if result.diff:
        out.print(result.diff, end="")
    if check:
        state = "behind the indexes: run python build.py compat refresh" if result.diff else "up to date with the indexes"
        out.print(f"{result.path}: {state}")
        return 1 if result.diff else 0
    out.print(f"{result.path}: {len(result.changes)} changes written" if result.diff else f"{result.path}: up to date")
    return 0
