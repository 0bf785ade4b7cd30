"""What one pip install step of an image's build installed, kept in the image (macros.j2: keep_pip_report).

    python keep-pip-report.py REPORT OUT [--forget-requested]

REPORT is pip's installation report (`pip install --report`); OUT gets each wheel's name, version, URL and sha256, in
the order of their names. The rest of pip's report describes the build machine (its kernel, its Python's paths), which
would make the layer differ from one build host to the next; pip writes no credentials into it.
--forget-requested: pip marks each package named on its command line REQUESTED (a file in its .dist-info, listed in its
RECORD). A rebuild from the wheel lock names every wheel, so the marks would say how the image was built, not what it
holds, and its layer would differ from the first build's: the marks of the running Python's environment go, with their
RECORD lines.
"""

import json
import sys
import sysconfig
from pathlib import Path


def keep(report_path: Path, out: Path) -> None:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    items = [{"metadata": {"name": item["metadata"]["name"], "version": item["metadata"]["version"]},
              "download_info": item["download_info"]} for item in report["install"]]
    items.sort(key=lambda item: (item["metadata"]["name"].lower(), item["metadata"]["version"]))
    out.write_text(json.dumps({"version": report["version"], "install": items}, indent=1, sort_keys=True),
                   encoding="utf-8")


def forget_requested(site: Path) -> None:
    for mark in sorted(site.glob("*.dist-info/REQUESTED")):
        mark.unlink()
        record = mark.parent / "RECORD"
        if record.is_file():  # its bytes as pip wrote them (CSV: lines end in CR LF), less the mark's line
            entry = f"{mark.parent.name}/REQUESTED,".encode()
            lines = record.read_bytes().splitlines(keepends=True)
            record.write_bytes(b"".join(line for line in lines if not line.startswith(entry)))


if __name__ == "__main__":
    keep(Path(sys.argv[1]), Path(sys.argv[2]))
    if "--forget-requested" in sys.argv[3:]:
        forget_requested(Path(sysconfig.get_paths()["purelib"]))
