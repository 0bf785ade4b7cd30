"""JUnit XML of the smoke suite's results (`--junit DIR`), the format CI systems, GitLab, Jenkins and test dashboards
read: one file per image, DIR/IMAGE.xml, a <testsuite> of the image with a <testcase> per check.

What pytest itself writes inside the runner is not handed on: its per-check properties (the tier) are outside the
JUnit schema, and an image whose suite never ran (its container did not start, its build failed) has no pytest file
at all. So the file is written from the checks the report keeps: a failed check is a <failure>, a skipped one a
<skipped> with its reason, the GPU checks skipped for lack of a GPU marked so (`needs a GPU: `, and counted in the
suite's properties), a suite that could not run one <error>. The counts are the report's: a dashboard shows what the
summary says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree

from ..files import atomic_write
from .suite import NO_GPU

if TYPE_CHECKING:  # selfcheck writes JUnit too, on a GPU host with neither rich nor the Docker SDK
    from ..report import ImageRecord, Report

HOST_PARAMETER = re.compile(r"-?(?:docker|local)://[0-9a-f]*")  # testinfra's host id in test names

GPU_SKIP = "needs a GPU: "  # how a GPU check skipped for lack of a GPU reads in a dashboard


def checks_suite(name: str, checks: Sequence[dict[str, Any]], *, properties: dict[str, str], seconds: float = 0.0,
                 error: str | None = None) -> ElementTree.Element:
    """A <testsuite> named `name`: a <testcase> per check (each a dict of name, outcome, message as the report keeps
    them), and one that is an <error> when the suite could not run (`error`)."""
    suite = ElementTree.Element("testsuite", name=name)
    listed = ElementTree.SubElement(suite, "properties")
    for key, value in properties.items():
        ElementTree.SubElement(listed, "property", name=key, value=printable(value))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for check in checks:
        case = test_case(str(check.get("name", "")), str(check.get("outcome", "")), str(check.get("message") or ""))
        suite.append(case)
        counts["tests"] += 1
        counts["failures"] += case.find("failure") is not None
        counts["skipped"] += case.find("skipped") is not None
    if error is not None:
        case = ElementTree.SubElement(suite, "testcase", classname="torchimages", name="suite")
        ElementTree.SubElement(case, "error", message=first_line(error)).text = printable(error)
        counts["tests"] += 1
        counts["errors"] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{seconds:.3f}")
    return suite


def test_case(name: str, outcome: str, message: str) -> ElementTree.Element:
    """A check `MODULE::TEST` as classname smoke.MODULE, name TEST."""
    module, _, test = name.rpartition("::")
    case = ElementTree.Element("testcase", classname=f"smoke.{module}" if module else "smoke", name=printable(test))
    if outcome == "failed":
        ElementTree.SubElement(case, "failure", message=first_line(message)).text = printable(message)
    elif outcome == "skipped":
        said = f"{GPU_SKIP}{message}" if NO_GPU in message else message
        ElementTree.SubElement(case, "skipped", message=printable(said))
    return case


def image_suite(record: ImageRecord) -> ElementTree.Element:
    """One image of a report: its checks, or why its suite did not run."""
    properties = {"image": record.image, "tag": record.tag, "platform": record.platform, "variant": record.variant}
    smoke = record.smoke
    if smoke is None:
        why = (f"not built: {record.error}" if record.error else f"the build's result is {record.result}"
               if record.result not in ("built", "not built here") else "the smoke suite did not run")
        return checks_suite(record.image, [], properties=properties, error=why)
    properties.update({"image_id": smoke.image_id or "", "gpus": str(smoke.gpus),
                       "skipped_no_gpu": str(smoke.skipped_no_gpu)})
    return checks_suite(record.image, smoke.checks, properties=properties, seconds=smoke.seconds, error=smoke.error)


def document(suites: Iterable[ElementTree.Element]) -> bytes:
    """A <testsuites> file of `suites`, with their totals."""
    root = ElementTree.Element("testsuites", name="torchimages smoke suite")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for suite in suites:
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        seconds += float(suite.get("time", "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{seconds:.3f}")
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_report(report: Report, folder: Path, images: Iterable[str]) -> list[Path]:
    """DIR/IMAGE.xml for each of `images` the report holds (this run's), in the report's order."""
    wanted = set(images)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for record in report.images:
        if record.image in wanted:
            path = folder / f"{record.image}.xml"
            atomic_write(path, document([image_suite(record)]))
            written.append(path)
    return written


def pytest_checks(path: Path) -> list[dict[str, str]]:
    """The checks of the JUnit file pytest wrote for the suite (junit_family xunit2, each check's tier and note as
    properties): name (MODULE::TEST), outcome, message, tier. A file that cannot be read (a suite killed while writing
    it) is a RuntimeError."""
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError) as exc:
        raise RuntimeError(f"the suite's results ({path.name}) could not be read: {exc}") from None
    checks = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{HOST_PARAMETER.sub('', case.get('name', ''))}"
        name = name.replace("[]", "")
        outcome, message = "passed", ""
        properties = {p.get("name"): p.get("value", "") for p in case.iter("property")}
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", (child.get("message") or "") + "\n" + (child.text or "")[-1500:]
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message") or ""
        if outcome == "passed":
            message = properties.get("note", "")  # what a passing check could not prove here
        checks.append({"name": name, "outcome": outcome, "message": message.strip(), "tier": properties.get("tier", "")})
    return checks


def first_line(text: str) -> str:
    return printable(next((line for line in text.splitlines() if line.strip()), ""))[:300]


def printable(text: str) -> str:
    """XML 1.0 cannot hold a control character other than tab, newline and carriage return (a check's output may have
    one: a terminal's colour codes), nor a surrogate or U+FFFE/U+FFFF: each is written as its code point instead, so
    the file stays one any parser reads."""
    return "".join(f"\\x{ord(c):02x}" if not xml_char(c) else c for c in text)


def xml_char(c: str) -> bool:
    code = ord(c)
    return c in "\t\n\r" or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or code >= 0x10000
