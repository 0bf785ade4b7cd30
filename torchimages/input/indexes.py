"""What the package indexes say about torch: the primary sources `build.py compat refresh` reads.

- PyPI's simple index (PEP 691 JSON, PEP 503 HTML as a fallback): every torch release and the Python tags and
  platforms of its Linux wheels; each release's wheel metadata file (PEP 658/714, `URL.metadata`; no wheel is
  downloaded) gives the default build's CUDA and its nvidia-cudnn-* and nvidia-nccl-* pins.
- The PyTorch wheel indexes (`/whl/cuXYZ/torch/`, PEP 503 HTML): which CUDA builds exist for each release, for which
  Python and platform.

Everything goes through one `Fetch` (URL -> body, None for 404), so the tests run on recorded pages.
"""

from __future__ import annotations

import html.parser
import json
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from .compat import version_key

PYPI_SIMPLE = "https://pypi.org/simple/torch/"
PYPI_FILES = "https://files.pythonhosted.org/"  # where pypi.org's simple page links its files
WHEEL_INDEX = "https://download.pytorch.org/whl"
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"

Fetch = Callable[[str, str], bytes | None]  # (url, accept) -> body, None when the page does not exist

# torch-2.3.1+cu121-cp311-cp311-linux_x86_64.whl, torch-2.7.0-cp313-cp313t-manylinux_2_28_aarch64.whl
WHEEL = re.compile(r"^torch-(?P<version>\d+\.\d+\.\d+)(?:\+(?P<local>[a-z0-9.]+))?-(?P<python>cp3\d+)-"
                   r"(?P<abi>cp3\d+t?|abi3|none)-(?P<platform>[a-z0-9_]+)\.whl$")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*\(?\s*==\s*(?P<version>[0-9][0-9A-Za-z.+]*)")
# What a value read from an index must be before it is written into compat.yaml: a release is a canonical
# X.Y.Z (no leading zeros), a Python tag names 3.N with N of one or two digits, a cuDNN or NCCL pin is 2 to 4
# dot-separated numbers (no local part).
RELEASE_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
PYTHON_TAG = re.compile(r"cp3(0|[1-9][0-9]?)")
LIBRARY_PIN = re.compile(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)){1,3}")
MAX_PAGE = 64 << 20  # PyPI's torch page is about 1 MB; more is not an index page


class IndexRefused(ValueError):
    """What an index said cannot be written into the compatibility data; nothing is changed."""


@dataclass(frozen=True)
class Wheel:
    version: str
    local: str  # "cu121", "cpu" or "" (PyPI's default build)
    python: str  # "3.11"
    platform: str  # "x86_64" or "aarch64"
    url: str


def parse_wheel(filename: str, url: str) -> Wheel | None:
    """A Linux CPython wheel of torch ("3.13t" for a free-threaded one: its ABI ends in t), or None for anything else."""
    match = WHEEL.match(urllib.parse.unquote(filename))
    if not match or "linux" not in match["platform"]:
        return None
    if not RELEASE_VERSION.fullmatch(match["version"]) or not PYTHON_TAG.fullmatch(match["python"]):
        raise IndexRefused(f"{url}: {filename!r} is not a torch wheel name with a canonical version and a CPython tag")
    platform = next((arch for arch in ("x86_64", "aarch64") if match["platform"].endswith(arch)), None)
    if platform is None:
        return None
    python = f"3.{match['python'][3:]}" + ("t" if match["abi"].endswith("t") else "")
    return Wheel(match["version"], match["local"] or "", python, platform, url)


class _Links(html.parser.HTMLParser):
    """The <a href> links of a PEP 503 page, with their text (the file name)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None and data.strip():
            self.links.append((data.strip(), self._href))
            self._href = None


def html_links(page: bytes) -> list[tuple[str, str]]:
    """(link text, href as written) of each <a href> of a PEP 503 page: the text is the file's name."""
    parser = _Links()
    parser.feed(page.decode("utf-8", errors="replace"))
    return parser.links


def files_of(page: bytes, base: str) -> list[tuple[str, str]]:
    """(file name, absolute URL without fragment) of a simple-index page, JSON (PEP 691) or HTML (PEP 503)."""
    text = page.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        return [(f["filename"], urllib.parse.urljoin(base, f["url"]).split("#")[0]) for f in json.loads(text)["files"]]
    return [(name, urllib.parse.urljoin(base, href).split("#")[0]) for name, href in html_links(page)]


@dataclass
class Release:
    """One torch release as the indexes show it."""

    version: str
    python: set[str] = field(default_factory=set)  # PyPI's Linux wheels
    platforms: set[str] = field(default_factory=set)
    default_cuda: str | None = None  # major.minor of PyPI's default build; None for a CPU-only default
    cudnn: str | None = None
    nccl: str | None = None
    metadata_urls: list[str] = field(default_factory=list)  # of its Linux x86_64 wheels, cp311's first
    metadata_source: str | None = None  # the one the pins were read from
    # The platforms on which PyPI's wheel is that CUDA build: where the CUDA runtime pin's marker holds. Until 2.10 the
    # pins say `platform_machine == "x86_64"`, and the aarch64 wheel (about 100-150 MB) is a CPU build; from 2.11 they
    # hold on every Linux machine, and the aarch64 wheel (about 420-450 MB) is the CUDA build.
    cuda_platforms: set[str] = field(default_factory=set)
    builds: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)  # cuXYZ -> (python, platforms)


def pypi_releases(fetch: Fetch, *, since: str, index: str = PYPI_SIMPLE) -> dict[str, Release]:
    """Every final torch release from `since` on, with its Python tags, platforms and the default build's pins."""
    page = fetch(index, JSON_ACCEPT)
    if page is None:
        raise LookupError(f"{index}: no such page")
    releases: dict[str, Release] = {}
    for name, url in files_of(page, index):
        wheel = parse_wheel(name, url)
        if wheel is None or wheel.local or version_key(wheel.version) < version_key(since):
            continue
        release = releases.setdefault(wheel.version, Release(wheel.version))
        release.python.add(wheel.python)
        release.platforms.add(wheel.platform)
        if wheel.platform == "x86_64":
            release.metadata_urls.insert(0 if wheel.python == "3.11" else len(release.metadata_urls), url + ".metadata")
    for release in releases.values():
        read_pins(fetch, release)
    return releases


def read_pins(fetch: Fetch, release: Release) -> None:
    """The default build's CUDA, cuDNN and NCCL from its wheel's Requires-Dist pins: the PEP 658 metadata file of a
    Linux x86_64 wheel (not every old upload has one; the first that does is read), else PyPI's JSON of the release."""
    requirements = None
    for url in release.metadata_urls:
        body = fetch(url, "*/*")
        if body is not None:
            release.metadata_source = url
            requirements = [line.split(":", 1)[1].strip() for line in body.decode("utf-8", errors="replace").splitlines()
                            if line.startswith("Requires-Dist:")]
            break
    if requirements is None and release.metadata_urls and release.metadata_urls[0].startswith(PYPI_FILES):
        url = f"https://pypi.org/pypi/torch/{release.version}/json"  # pypi.org's own JSON: only for pypi.org's files
        body = fetch(url, "application/json")
        if body is None:  # the pins stay unread: refresh keeps what the data has and says so
            return
        release.metadata_source = url
        requirements = (json.loads(body).get("info") or {}).get("requires_dist") or []
    for requirement in requirements or []:
        marker = requirement.partition(";")[2].replace("'", '"')
        if "extra ==" in marker or not ('platform_machine == "x86_64"' in marker or 'platform_system == "Linux"' in marker):
            continue  # the default build's CUDA wheels are pinned for Linux (x86_64 until 2.10)
        match = PIN.match(requirement)
        if not match:
            continue
        name, version = match["name"].lower(), match["version"]
        if name.startswith(("nvidia-cuda-runtime", "cuda-toolkit", "nvidia-cudnn", "nvidia-nccl")) and \
                not LIBRARY_PIN.fullmatch(version):
            raise IndexRefused(f"{release.metadata_source}: torch {release.version} pins {name}=={version}: not a "
                               "version of 2 to 4 numbers")
        if name.startswith(("nvidia-cuda-runtime", "cuda-toolkit")) and release.default_cuda is None:
            release.default_cuda = ".".join(version.split(".")[:2])
            release.cuda_platforms = {platform for platform in release.platforms if holds_on(marker, platform)}
        elif name.startswith("nvidia-cudnn"):
            release.cudnn = version
        elif name.startswith("nvidia-nccl"):
            release.nccl = version


def holds_on(marker: str, platform: str) -> bool:
    """Whether a Requires-Dist marker holds on Linux on `platform` (x86_64, aarch64); other variables (the Python
    version) are this interpreter's, which the CUDA pins do not ask."""
    from packaging.markers import InvalidMarker, Marker

    try:
        return Marker(marker).evaluate({"platform_system": "Linux", "sys_platform": "linux", "platform_machine": platform,
                                        "os_name": "posix"}) if marker.strip() else True
    except InvalidMarker:
        raise IndexRefused(f"{marker!r} is not a requirement marker") from None


def wheel_index_builds(fetch: Fetch, releases: dict[str, Release], variants: list[str], *,
                       index: str = WHEEL_INDEX) -> list[str]:
    """Fill each release's CUDA builds from the wheel index of each variant; the variants whose page exists."""
    found = []
    for variant in variants:
        url = f"{index.rstrip('/')}/{variant}/torch/"
        page = fetch(url, "text/html")
        if page is None:
            continue
        found.append(variant)
        for name, link in files_of(page, url):
            wheel = parse_wheel(name, link)
            if wheel is None or wheel.local != variant or wheel.version not in releases:
                continue
            python, platforms = releases[wheel.version].builds.setdefault(variant, (set(), set()))
            python.add(wheel.python)
            platforms.add(wheel.platform)
    return found


def http_fetch(timeout: float = 60, deadline: float = 900) -> Fetch:
    """The live indexes over HTTPS (the environment's proxy and CA bundle apply, as they do for pip). Each request
    must end within `timeout` seconds, whole (a server that sends a byte at a time is cut off, not waited for), and
    all of them within `deadline`; a page bigger than MAX_PAGE is refused."""
    import time

    import requests  # here: only `compat refresh` talks to an index

    session = requests.Session()
    run_ends = time.monotonic() + deadline

    def fetch(url: str, accept: str) -> bytes | None:
        ends = min(time.monotonic() + timeout, run_ends)
        if time.monotonic() >= run_ends:
            raise TimeoutError(f"the refresh took more than {deadline:.0f} s in all; {url} was not asked")
        with session.get(url, headers={"Accept": accept}, timeout=timeout, stream=True) as response:
            if response.status_code == 404:
                return None
            response.raise_for_status()
            body = bytearray()
            # read1 returns what has arrived (iter_content would wait for a whole chunk, however slow it comes)
            while chunk := response.raw.read1(1 << 16, decode_content=True):
                body += chunk
                if len(body) > MAX_PAGE:
                    raise IndexRefused(f"{url}: more than {MAX_PAGE >> 20} MB: not an index page")
                if time.monotonic() > ends:
                    raise TimeoutError(f"{url}: not read within {min(timeout, deadline):.0f} s")
            return bytes(body)

    return fetch
