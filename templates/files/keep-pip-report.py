"""What one pip install step of an image's build installed, kept in the image (macros.j2: keep_pip_report).

    python keep-pip-report.py REPORT OUT [--forget-requested]

REPORT is pip's installation report (`pip install --report`); OUT gets each wheel's name, version, URL and sha256, in
the order of their names. The rest of pip's report describes the build machine (its kernel, its Python's paths), which
would make the layer differ from one build host to the next; pip writes no credentials into it.
--forget-requested: pip marks each package named on its command line REQUESTED (a file in its .dist-info, listed in its
RECORD). A rebuild from the wheel lock names every wheel, so the marks would say how the image was built, not what it
holds, and its layer would differ from the first build's: the marks of the packages this step installed (in the running
Python's environment) go, with their RECORD lines. Another package's are left as they are: rewriting its RECORD would
put a second copy of it into this step's layer.
"""

import json
import re
import sys
import sysconfig
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def keep(report_path: Path, out: Path) -> set[str]:
    """The report reduced and sorted into `out`; the installed packages' names (canonical)."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    items = [{"metadata": {"name": item["metadata"]["name"], "version": item["metadata"]["version"]},
              "download_info": item["download_info"]} for item in report["install"]]
    items.sort(key=lambda item: (item["metadata"]["name"].lower(), item["metadata"]["version"]))
    out.write_text(json.dumps({"version": report["version"], "install": items}, indent=1, sort_keys=True),
                   encoding="utf-8")
    return {canonical(item["metadata"]["name"]) for item in items}


def forget_requested(site: Path, installed: set[str]) -> None:
    for mark in sorted(site.glob("*.dist-info/REQUESTED")):
        if canonical(mark.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0]) not in installed:
            continue
        mark.unlink()
        record = mark.parent / "RECORD"
        if record.is_file():  # its bytes as pip wrote them (CSV: lines end in CR LF), less the mark's line
            entry = f"{mark.parent.name}/REQUESTED,".encode()
            lines = record.read_bytes().splitlines(keepends=True)
            record.write_bytes(b"".join(line for line in lines if not line.startswith(entry)))


if __name__ == "__main__":
    installed = keep(Path(sys.argv[1]), Path(sys.argv[2]))
    if "--forget-requested" in sys.argv[3:]:
        forget_requested(Path(sysconfig.get_paths()["purelib"]), installed)
