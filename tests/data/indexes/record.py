"""Record the index pages the compat refresh tests run on (python tests/data/indexes/record.py).

- pypi/: PyPI's real simple page of torch (PEP 691 JSON), trimmed to the Linux wheels of torch >= 2.0, and the real
  metadata files of the wheels the refresh reads, trimmed to their header and Requires-Dist lines.
- whl/: the PyTorch wheel indexes (/whl/cuXYZ/torch/) cannot be reached from these machines, so their pages are written
  in the index's own format (PEP 503 HTML) from the facts in ../shared/reference/compat-facts.yaml: each release's
  wheel variants, for its Python versions, linux_x86_64, without hashes (none are recorded there).
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
from torchimages.input import indexes  # noqa: E402

FACTS = ROOT.parent / "shared" / "reference" / "compat-facts.yaml"
SINCE = "2.0"


def local_path(url: str) -> Path:
    """Where a recorded URL lives under this folder."""
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc == "pypi.org":
        return HERE / "pypi" / ("simple-torch.json" if parsed.path == "/simple/torch/" else parsed.path.strip("/"))
    if parsed.netloc == "files.pythonhosted.org":
        return HERE / "pypi" / "metadata" / Path(parsed.path).name
    return HERE / parsed.path.strip("/") / "index.html"


def record_pypi() -> None:
    fetch = indexes.http_fetch()
    page = json.loads(fetch(indexes.PYPI_SIMPLE, indexes.JSON_ACCEPT) or b"{}")
    page["files"] = [f for f in page["files"] if (w := indexes.parse_wheel(f["filename"], f["url"])) and not w.local
                     and indexes.version_key(w.version) >= indexes.version_key(SINCE)]
    page.pop("versions", None)
    target = local_path(indexes.PYPI_SIMPLE)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(page, indent=1) + "\n")
    releases = indexes.pypi_releases(lambda url, accept: fetch(url, accept) if "pypi.org/simple" not in url
                                     else target.read_bytes(), since=SINCE)
    for release in releases.values():
        for url in release.metadata_urls:  # the ones read, and the 404s before them, which stay absent
            body = fetch(url, "*/*")
            if body is not None:
                lines = [line for line in body.decode().splitlines()
                         if line.startswith(("Metadata-Version:", "Name:", "Version:", "Requires-Python:", "Requires-Dist:"))]
                path = local_path(url)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(lines) + "\n")
                break


def write_wheel_indexes() -> None:
    pages: dict[str, list[str]] = {}
    for entry in yaml.safe_load(FACTS.read_text())["torch_releases"]["entries"]:
        pythons = [p for p in entry.get("python") or [] if not p.endswith("t")]
        for variant in entry.get("wheel_variants") or []:
            if not variant.startswith("cu"):
                continue
            for patch in entry["patches"]:
                for python in pythons:
                    tag = f"cp{python.replace('.', '')}"
                    name = f"torch-{patch}+{variant}-{tag}-{tag}-linux_x86_64.whl"
                    pages.setdefault(variant, []).append(
                        f'    <a href="/whl/{variant}/{urllib.parse.quote(name)}">{name}</a><br/>')
    for variant, links in pages.items():
        path = HERE / "whl" / variant / "torch" / "index.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for torch</h1>\n" + "\n".join(links)
                        + "\n  </body>\n</html>\n")


if __name__ == "__main__":
    if "--whl-only" not in sys.argv:
        record_pypi()
    write_wheel_indexes()
