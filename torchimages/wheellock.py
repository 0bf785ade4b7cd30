"""The wheel lock: the wheels an image's Python environment was installed from, each by its file and sha256.

pip says what it installs in its installation report (`pip install --report FILE`, format version 1,
https://pip.pypa.io/en/stable/reference/installation-report/): each item's `download_info` holds the URL of the file
(an index's, or file:// in a wheelhouse) and its hashes. The lock is that set written in pip's own hash-checking
format, one wheel a line, so that `pip install --require-hashes -r LOCK` installs exactly these files and refuses any
other:

    torch==2.13.0+cpu --hash=sha256:6746...667b  # torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl from https://...

Upstream wheels disappear (torch 2.5.1 pins nvidia-cudnn-cu12==9.1.0.70, which no index serves any more), so a lock
is checked against what the sources serve now (`build.py wheels check`): a wheelhouse (a folder of wheel files, as
`--wheelhouse` gives a build) by the file's own sha256, an index (PEP 691 JSON or PEP 503 HTML, as pip reads it) by
the hash it lists for the file. Every report, lock and index page read here is input, checked like the matrix.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from .checkedjson import Fields
from .errors import Problem, UserError, visible
from .files import sha256_of
from .input.grammar import (
    LOCKED_WHEEL,
    PIP_STEP,
    SHA256_HEX,
    locked_wheel_problem,
    package_name_problem,
    package_version_problem,
    wheel_name_problem,
)
from .input.indexes import html_links

REPORT_VERSION = "1"
# Where each pip install step of an image keeps its report (templates/partials/macros.j2: keep_pip_report), one file a
# step: torch.json (the torch layer), pip.json (the entry's `pip:` packages), jupyter.json, devel.json.
REPORTS = "/etc/pip/torchimages-wheels"
STEP_REPORT = re.compile(rf"torchimages-wheels/(?P<step>{PIP_STEP.pattern})\.json")
# The steps, in the order an image's build runs them (a variant's after its base's): what a rebuild from a lock installs
# at each (torchimages/build/released.py).
STEPS = ("torch", "pip", "jupyter", "devel")
MAX_REPORT = 16 << 20  # a CUDA image's torch step reports about 40 wheels in some kB
MAX_LOCK = 4 << 20  # a lock of a CUDA image is about 40 lines; megabytes are not a lock
PYPI = "https://pypi.org/simple/"
# A file of a PyTorch wheel index (download.pytorch.org/whl/cu121/torch-...whl): the index is its folder.
TORCH_INDEX_FILE = re.compile(r"(?P<index>https://download\.pytorch\.org/whl/[a-z0-9]+/)[^/]+\.whl")
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"

Fetch = Callable[[str, str], bytes | None]  # (url, accept) -> body, None when the page does not exist


@dataclass(frozen=True)
class LockedWheel:
    name: str  # as the wheel's metadata names it (torch, nvidia-cudnn-cu12)
    version: str
    file: str  # the wheel's file name
    sha256: str  # lowercase hex
    url: str  # where the build got it (an index's URL, or file:// in the build's wheelhouse)
    step: str | None = None  # the image's pip install step that installed it (STEPS); None where a lock does not say

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    def line(self) -> str:
        step = f"{self.step}: " if self.step else ""
        return f"{self.pin} --hash=sha256:{self.sha256}  # {step}{self.file} from {self.url}"


def from_pip_report(data: object, file: str, step: str | None = None) -> list[LockedWheel]:
    """The wheels of one pip installation report (a parsed JSON document), in its order, each marked as installed by
    `step`. A report of another format version, an item without a sha256 or one that is not a wheel is refused: the
    lock names files pip can check."""
    report = Fields(file, data)
    if report.required_text("version") != REPORT_VERSION:
        report.refuse("version", f"is {visible(str(report.data['version']))[:20]!r}; this tool reads pip's "
                                 f"installation report version {REPORT_VERSION}")
    return [replace(wheel_of(Fields(file, item, place)), step=step) for place, item in report.objects("install")]


def from_image_folder(archive: bytes, image: str) -> list[LockedWheel]:
    """The lock of an image, from its REPORTS folder as the engine copies it out (a tar): each step's report, read as
    input (a regular file named for its step, at most MAX_REPORT bytes, JSON, pip's report format); one package in two
    files is refused (one environment)."""
    locks = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as folder:
        for member in folder:
            named = STEP_REPORT.fullmatch(member.name)
            if not (member.isfile() and named):
                continue
            where = f"{image}: {REPORTS}/{member.name.rsplit('/', 1)[-1]}"
            if member.size > MAX_REPORT:
                raise UserError(f"{where}: {member.size} bytes is not a pip report this tool wrote")
            content = folder.extractfile(member)
            try:
                data = json.loads(content.read() if content else b"")
            except (ValueError, RecursionError) as exc:
                raise UserError(f"{where}: not a pip installation report (not JSON: {visible(str(exc))[:120]})") from None
            locks.append(from_pip_report(data, where, named["step"]))
    return merged(locks, one_environment=True)


def wheel_of(item: Fields) -> LockedWheel:
    metadata, download = item.sub("metadata", ()), item.sub("download_info", ())
    assert metadata is not None and download is not None  # sub() refuses what is missing
    url = download.required_text("url", lambda value: None if value.startswith(("https://", "http://", "file://"))
                                 else "is not an http(s) or file URL")
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    if why := wheel_name_problem(name):
        download.refuse("url", f"names no wheel: {why} (a lock holds wheels only: build sdists into the wheelhouse)")
    archive = download.sub("archive_info", ())
    if archive is None:
        download.refuse("archive_info", "is missing: a directory or VCS install has no file to lock")
    hashes = archive.sub("hashes", (), optional=True)
    sha = hashes.text("sha256", optional=True) if hashes else None
    if sha is None and (legacy := archive.text("hash", optional=True)) and legacy.startswith("sha256="):
        sha = legacy.removeprefix("sha256=")  # pip before 23 wrote only "hash": "sha256=HEX"
    if sha is None or not SHA256_HEX.fullmatch(sha):
        archive.refuse("hashes", "holds no sha256 of 64 lowercase hex digits")
    return LockedWheel(name=metadata.required_text("name", package_name_problem),
                       version=metadata.required_text("version", package_version_problem), file=name, sha256=sha, url=url)


def lock_text(wheels: Iterable[LockedWheel]) -> str:
    """The lock in pip's hash-checking format, a wheel a line, sorted by name."""
    return "".join(wheel.line() + "\n" for wheel in sorted(wheels, key=lambda wheel: wheel.name.lower()))


def parse_line(line: str) -> LockedWheel:
    match = LOCKED_WHEEL.fullmatch(line)
    assert match is not None and not locked_wheel_problem(line)  # the caller checked it
    return LockedWheel(match["name"], match["version"], match["file"], match["sha"], match["url"], match["step"])


def read_lock(path: Path) -> list[LockedWheel]:
    """A lock file as lock_text writes it; any other line is refused, naming its number."""
    if not path.is_file():
        raise UserError([Problem(str(path), None, None, None, "is not a file")])
    if path.stat().st_size > MAX_LOCK:
        raise UserError([Problem(str(path), None, None, None, f"is over {MAX_LOCK >> 20} MB: not a wheel lock")])
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError([Problem(str(path), None, None, None, "is not UTF-8 text: not a wheel lock")]) from None
    wheels = []
    for number, text in enumerate(lines, 1):
        if not text.strip() or text.startswith("#"):
            continue
        if why := locked_wheel_problem(text):
            raise UserError([Problem(str(path), number, None, None, why)])
        wheels.append(parse_line(text))
    if not wheels:
        raise UserError([Problem(str(path), None, None, None, "locks no wheel")])
    return wheels


def merged(locks: Iterable[list[LockedWheel]], *, one_environment: bool = False) -> list[LockedWheel]:
    """The wheels of several reports or locks, each once. One file with two sha256s is refused; with
    `one_environment` (the reports of one image's install steps) so is one package in two files."""
    found: dict[str, LockedWheel] = {}
    names: dict[str, LockedWheel] = {}
    for wheel in (wheel for lock in locks for wheel in lock):
        same_file = found.setdefault(wheel.file, wheel)
        if same_file.sha256 != wheel.sha256:
            raise UserError(f"{wheel.file} is locked with two sha256s: {same_file.sha256} and {wheel.sha256}")
        same_name = names.setdefault(canonical(wheel.name), wheel)
        if one_environment and same_name.file != wheel.file:
            raise UserError(f"{wheel.name} is installed from two files, {same_name.file} and {wheel.file}: one "
                            "environment holds one version of a package")
    return list(found.values())


# ---- where a locked wheel is served now


@dataclass(frozen=True)
class Wheelhouse:
    folder: Path

    def __str__(self) -> str:
        return f"wheelhouse {self.folder}"

    def locate(self, wheel: LockedWheel) -> tuple[str | None, str | None]:
        """(the file's URL, None) when the folder holds it with the locked sha256; else (None, why not)."""
        path = self.folder / wheel.file
        if not path.is_file():
            return None, "no such file"
        found = sha256_of(path)
        return (path.resolve().as_uri(), None) if found == wheel.sha256 else (None, f"its file has sha256:{found}")


@dataclass(frozen=True)
class Index:
    url: str
    fetch: Fetch

    def __str__(self) -> str:
        return f"index {visible(self.url)}"

    def locate(self, wheel: LockedWheel) -> tuple[str | None, str | None]:
        """(the file's URL, None) when the index lists the file with the locked sha256; else (None, why not)."""
        page = urllib.parse.urljoin(self.url.rstrip("/") + "/", canonical(wheel.name) + "/")
        try:
            body = self.fetch(page, JSON_ACCEPT)
        except (OSError, ValueError) as exc:  # requests' errors are OSErrors; a refused page a ValueError
            return None, f"not read ({unreachable(exc)})"
        if body is None:
            return None, f"no page {visible(page)}"
        try:
            listed = listed_files(body, page)
        except ValueError as exc:
            return None, visible(str(exc))[:200]
        if wheel.file not in listed:
            return None, "the file is not listed"
        sha, url = listed[wheel.file]
        if sha != wheel.sha256:
            return None, f"lists it with sha256:{sha or 'none'}"
        if not url.startswith(("https://", "http://")):  # an index names files on the web, never on this machine
            return None, f"lists it at {visible(url)[:120]!r}, not an http(s) URL"
        return url, None


Source = Wheelhouse | Index


def unreachable(exc: Exception) -> str:
    """Why a page was not read, in a line: the innermost cause's words ("Name or service not known"), not the pool's."""
    while exc.__context__ is not None and isinstance(exc.__context__, Exception):
        exc = exc.__context__
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return visible(f"{type(exc).__name__}: {text}")[:200]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def listed_hashes(body: bytes, page: str) -> dict[str, str]:
    """File name -> sha256 ('' when none is listed) of an index page: PEP 691 JSON, else PEP 503 HTML."""
    return {name: sha for name, (sha, _) in listed_files(body, page).items()}


def listed_files(body: bytes, page: str) -> dict[str, tuple[str, str]]:
    """File name -> (sha256 or '', the file's URL) of an index page: PEP 691 JSON, else PEP 503 HTML (its links read
    as `compat refresh` reads them, the sha256 from each link's fragment)."""
    try:
        data = json.loads(body)
    except ValueError:
        return {name: (fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else "",
                       urllib.parse.urljoin(page, href))
                for name, (href, _, fragment) in ((name, link.partition("#")) for name, link in html_links(body))}
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError(f"{page}: a JSON page without a list of files is not an index page (PEP 691)")
    found = {}
    for item in data["files"]:
        if isinstance(item, dict) and isinstance(item.get("filename"), str) and isinstance(item.get("url"), str):
            hashes = item.get("hashes") if isinstance(item.get("hashes"), dict) else {}
            sha = hashes.get("sha256")
            found[item["filename"]] = (sha if isinstance(sha, str) else "", urllib.parse.urljoin(page, item["url"]))
    return found


def default_indexes(wheels: Iterable[LockedWheel], pip_index: str | None, torch_index: str | None,
                    fetch: Fetch) -> list[Index]:
    """The indexes a build asks: --pip-index-url (PyPI by default) and --torch-index-url, else each PyTorch index a
    locked wheel came from."""
    urls = [pip_index or PYPI]
    if torch_index:
        urls.append(torch_index)
    else:
        urls += sorted({match["index"] for wheel in wheels if (match := TORCH_INDEX_FILE.fullmatch(wheel.url))})
    return [Index(url, fetch) for url in dict.fromkeys(urls)]


def unserved(wheels: Iterable[LockedWheel], sources: list[Source]) -> list[str]:
    """One line for each locked wheel no source serves with its sha256, naming where it was looked for and why not."""
    return [f"{wheel.pin} ({wheel.file}, sha256:{wheel.sha256}) is served by no source: {looked}"
            for wheel in wheels if (looked := served_by(wheel, sources))]


def served_by(wheel: LockedWheel, sources: list[Source], take: Callable[[str], str | None] = lambda _: None) -> str | None:
    """None when a source serves `wheel` with its sha256 and `take` (given the file's URL) succeeds there; else where
    it was looked for and why not, source by source."""
    answers = []
    for source in sources:
        url, why = source.locate(wheel)
        if url is not None:
            why = take(url)
        if why is None:
            return None
        answers.append(f"{source}: {why}")
    return "; ".join(answers) if answers else "no wheelhouse or index to look in"


# ---- a wheelhouse filled from a lock

MAX_WHEEL = 8 << 30  # torch's CUDA wheels are about 1 GB; the largest CUDA library wheel under 1 GB too


def fill(wheels: Iterable[LockedWheel], sources: list[Source], folder: Path) -> tuple[int, list[str]]:
    """Copy or download each locked wheel into `folder` (a wheelhouse a build's --wheelhouse reads) from the first
    source that serves it with its sha256; a file already there with that sha256 is kept. Each file is written
    under a temporary name and kept only when its bytes hash to the lock's sha256. The count of wheels now in the
    folder, and a line for each that is not, naming where it was looked for."""
    folder.mkdir(parents=True, exist_ok=True)
    present, missing = 0, []
    for wheel in wheels:
        target = folder / wheel.file
        if target.is_file() and not target.is_symlink() and sha256_of(target) == wheel.sha256:
            present += 1
            continue
        looked = served_by(wheel, sources, lambda url, target=target, sha=wheel.sha256: copied(url, target, sha))
        if looked is None:
            present += 1
        else:
            missing.append(f"{wheel.pin} ({wheel.file}, sha256:{wheel.sha256}) was not fetched: {looked}")
    return present, missing


def copied(url: str, target: Path, sha256: str) -> str | None:
    """Write the file at `url` (file:// or http(s)://) to `target` if its bytes hash to `sha256`; else why not."""
    partial = target.with_name(f".{target.name}.partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for chunk in stream(url):
                digest.update(chunk)
                out.write(chunk)
                if out.tell() > MAX_WHEEL:
                    return f"{visible(url)[:120]} is over {MAX_WHEEL >> 30} GB: not a wheel"
        if digest.hexdigest() != sha256:
            return f"{visible(url)[:120]} sent bytes with sha256:{digest.hexdigest()}"
        partial.replace(target)
        return None
    except (OSError, ValueError) as exc:
        return f"{visible(url)[:120]} not read ({unreachable(exc)})"
    finally:
        partial.unlink(missing_ok=True)


def stream(url: str) -> Iterable[bytes]:
    if url.startswith("file://"):
        with Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).open("rb") as local:
            while chunk := local.read(1 << 20):
                yield chunk
        return
    import requests  # here: only `wheels fetch` downloads

    with requests.get(url, stream=True, timeout=60) as response:
        response.raise_for_status()
        yield from response.iter_content(1 << 20)
