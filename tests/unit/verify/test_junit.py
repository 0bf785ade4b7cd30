"""`--junit DIR` (torchimages/verify/junit.py): a JUnit XML file per tested image, read back by junitparser (a JUnit
parser CI tools use) and checked against the JUnit schema CI systems read (tests/unit/data/junit.xsd), its counts the
report's. The files a real suite run writes: tests/integration/verify/test_smoke.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import junitparser
import pytest
import xmlschema

from torchimages.report import ImageRecord, Report, SmokeStage
from torchimages.verify import junit, selfcheck, smoke
from torchimages.verify.suite import NO_GPU

from ..conftest import digest

SCHEMA = xmlschema.XMLSchema(Path(__file__).parents[1] / "data" / "junit.xsd")
CHECKS = [
    {"name": "test_versions::test_torch", "outcome": "passed", "message": "", "tier": ""},
    {"name": "test_versions::test_python", "outcome": "passed", "message": "", "tier": ""},
    {"name": "test_hygiene::test_no_secrets", "outcome": "failed",
     "message": "found a token\n\x1b[31mAssertionError\x1b[0m: ghp_ in /etc/x", "tier": ""},
    {"name": "test_gpu::test_matmul[float16]", "outcome": "skipped", "message": f"{NO_GPU} (--gpus all)",
     "tier": "needs-gpu"},
    {"name": "test_compute::test_torch_compile_cpu", "outcome": "skipped", "message": "under emulation", "tier": ""},
]


def record(image: str, **changes: object) -> ImageRecord:
    values = {"image": image, "entry": image, "variant": "base", "tag": f"r.example/ml:v2.7-{image}", "result": "built",
              "versions": {}, "image_id": digest(image)}
    return ImageRecord(**{**values, **changes})


def stage(checks: list[dict], error: str | None = None) -> SmokeStage:
    outcomes = [check["outcome"] for check in checks]
    no_gpu = sum(1 for check in checks if check["outcome"] == "skipped" and NO_GPU in check["message"])
    return SmokeStage(outcomes.count("passed"), outcomes.count("failed"), outcomes.count("skipped"), no_gpu, 12.5, 0,
                      {}, error, image_id=digest("id"), checks=checks)


def report() -> Report:
    return Report("v2.7", "matrix.yaml", images=[
        record("tested", smoke=stage(CHECKS)),
        record("container-failed", smoke=stage([], error="the container exited at once: exec format error")),
        record("build-failed", result="failed", error="pip: no matching distribution for torch==9"),
        record("not-this-run", smoke=stage(CHECKS[:1])),
    ])


def test_each_tested_image_gets_a_file_the_schema_accepts_and_a_junit_parser_counts_as_the_report_did(
        tmp_path: Path) -> None:
    written = junit.write_report(report(), tmp_path, ["tested", "container-failed", "build-failed"])
    assert [path.name for path in written] == ["tested.xml", "container-failed.xml", "build-failed.xml"]
    for path in written:
        SCHEMA.validate(str(path))  # raises, naming the element, when it is not valid
    suite = next(iter(junitparser.JUnitXml.fromfile(str(tmp_path / "tested.xml"))))
    tested = report().images[0].smoke
    assert (suite.name, suite.tests, suite.failures, suite.skipped, suite.errors) == (
        "tested", tested.passed + tested.failed + tested.skipped, tested.failed, tested.skipped, 0)
    cases = {f"{case.classname}::{case.name}": case for case in suite}
    assert set(cases) == {f"smoke.{check['name']}" for check in CHECKS}
    failure = cases["smoke.test_hygiene::test_no_secrets"].result[0]
    assert isinstance(failure, junitparser.Failure) and failure.message == "found a token"
    assert "\\x1b[31mAssertionError" in failure.text  # a control character written as its code, the file still XML
    gpu = cases["smoke.test_gpu::test_matmul[float16]"].result[0]
    assert isinstance(gpu, junitparser.Skipped) and gpu.message == f"{junit.GPU_SKIP}{NO_GPU} (--gpus all)"
    other = cases["smoke.test_compute::test_torch_compile_cpu"].result[0]
    assert other.message == "under emulation"  # a skip for another reason is not called a GPU one
    assert not cases["smoke.test_versions::test_torch"].result
    properties = {p.name: p.value for p in suite.properties()}
    assert properties["skipped_no_gpu"] == "1" and properties["tag"] == "r.example/ml:v2.7-tested"


@pytest.mark.parametrize(("image", "words"), [
    ("container-failed", "the container exited at once: exec format error"),
    ("build-failed", "not built: pip: no matching distribution for torch==9"),
])
def test_an_image_whose_suite_did_not_run_is_one_error_saying_why(tmp_path: Path, image: str, words: str) -> None:
    junit.write_report(report(), tmp_path, [image])
    suite = next(iter(junitparser.JUnitXml.fromfile(str(tmp_path / f"{image}.xml"))))
    assert (suite.tests, suite.errors, suite.failures) == (1, 1, 0)
    error = next(iter(suite)).result[0]
    assert isinstance(error, junitparser.Error) and error.message == words


def test_pytests_own_file_is_read_into_the_checks_the_runner_keeps(tmp_path: Path) -> None:
    """What the runner and selfcheck read: pytest's xunit2 file of a small suite, testinfra's host id left out."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_ok(record_property):\n    record_property('tier', 'gpu-ready')\n"
        "def test_bad():\n    assert 1 == 2, 'one is not two'\n"
        f"def test_gpu():\n    pytest.skip({NO_GPU!r})\n")
    out = tmp_path / "pytest.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_sample.py"),
                    f"--junitxml={out}", "-o", "junit_family=xunit1", "--rootdir", str(tmp_path)],
                   capture_output=True, check=False, timeout=120, cwd=tmp_path)
    checks = {check["name"]: check for check in junit.pytest_checks(out)}
    assert {name: check["outcome"] for name, check in checks.items()} == {
        "test_sample::test_ok": "passed", "test_sample::test_bad": "failed", "test_sample::test_gpu": "skipped"}
    assert checks["test_sample::test_ok"]["tier"] == "gpu-ready" and "one is not two" in checks["test_sample::test_bad"]["message"]
    assert [c.name for c in smoke.parse_junit(out)] == list(checks)
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite")
    with pytest.raises(RuntimeError, match=r"the suite's results \(cut.xml\) could not be read"):
        junit.pytest_checks(tmp_path / "cut.xml")


def test_selfcheck_writes_the_checks_pytest_ran_and_says_when_it_cannot(tmp_path: Path) -> None:
    """What selfcheck does after its suite (run on a host with torch: tests/integration/verify/test_selfcheck.py)."""
    pytest_file = tmp_path / "pytest.xml"
    pytest_file.write_text('<testsuites><testsuite name="pytest" tests="2"><testcase classname="tests.smoke.test_gpu" '
                           f'name="test_matmul[local]"><skipped message="{NO_GPU}"/></testcase><testcase '
                           'classname="tests.smoke.test_compute" name="test_amp_cpu_bf16[local]"/></testsuite></testsuites>')
    host = {"torch": "2.13.0+cpu", "cuda": None, "gpus": 0}
    assert selfcheck.junit_written(pytest_file, tmp_path / "out", host, 3.0) == 0
    SCHEMA.validate(str(tmp_path / "out" / "selfcheck.xml"))
    suite = next(iter(junitparser.JUnitXml.fromfile(str(tmp_path / "out" / "selfcheck.xml"))))
    assert (suite.name, suite.tests, suite.skipped) == ("selfcheck", 2, 1)
    assert {p.name: p.value for p in suite.properties()} == {"torch": "2.13.0+cpu", "cuda": "none", "gpus": "0"}
    (tmp_path / "a-file").write_text("")
    assert selfcheck.junit_written(pytest_file, tmp_path / "a-file", host, 3.0) == 2
