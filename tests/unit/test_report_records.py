"""Typed stage results on each image record, one definition of "passed", the JSON shape kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchimages.input.specs import image_tag
from torchimages.report import ImageRecord, PushStage, Report, SmokeStage

from .conftest import digest


def smoke(passed: int = 10, failed: int = 0, error: str | None = None) -> SmokeStage:
    return SmokeStage(passed=passed, failed=failed, skipped=2, skipped_no_gpu=2, seconds=1.0, gpus=0,
                      tiers={"gpu-ready": {"passed": 1, "failed": 0, "skipped": 0}}, error=error, image_id=digest(1))


def record(result: str = "built", **stages: object) -> ImageRecord:
    return ImageRecord(image="x", entry="x", variant="base", tag="r/x:v1-x", result=result, versions={"torch": "2.3.1"},
                       **stages)


@pytest.mark.parametrize(("item", "passed", "ok"), [
    (record(smoke=smoke()), True, True),
    (record(smoke=smoke(failed=1)), False, False),
    (record(smoke=smoke(error="could not run the suite")), False, False),
    (record(smoke=smoke(passed=0)), False, False),   # nothing proven is not a pass, for publish and the exit code alike
    (record(), False, True),                          # built, not tested (yet): the build's exit policy is met
    (record(result="failed"), False, False),
    (record(result="not built here", smoke=smoke()), True, True),
])
def test_one_definition_of_passed(item: ImageRecord, passed: bool, ok: bool) -> None:
    assert item.smoke_passed is passed and item.ok is ok


def test_the_report_keeps_its_json_shape_and_reads_back_typed(tmp_path: Path) -> None:
    report = Report("v1", "matrix.yaml", images=[record(smoke=smoke(), push=PushStage("r/x:v1-x", digest=digest(2)),
                                                        bench={"rows": []})])
    json_path, markdown = report.write(tmp_path / "report.json")
    data = json.loads(json_path.read_text())["images"][0]
    assert set(data["stages"]) == {"smoke", "push", "bench"} and "smoke" not in data
    assert data["stages"]["smoke"]["passed"] == 10 and data["stages"]["push"]["digest"] == digest(2)
    back = Report.load(json_path)
    assert back == report and isinstance(back.images[0].smoke, SmokeStage) and back.images[0].push.ok
    assert "10 passed, 0 failed, 2 skipped (2 no GPU)" in markdown.read_text()


def test_a_tag_is_made_from_release_and_image() -> None:
    assert image_tag("v2.7", "torch2.3.1-cu121-cudnn8.9-py3.11-jupyter") == "v2.7-torch2.3.1-cu121-cudnn8.9-py3.11-jupyter"


def test_a_suite_run_on_an_image_not_built_here_records_only_its_versions(tmp_path: Path) -> None:
    """`build.py test` on an image of another run: its record is made from what the suite checked it against, which
    also holds the platform and the GPU generations; the report still reads back (a version key is a version)."""
    from torchimages.input import matrix, specs
    from torchimages.verify.smoke import SmokeResult, Target
    from torchimages.verify.smokestage import record_result

    from .conftest import ROOT

    spec = specs.resolve(matrix.load(ROOT / "tests" / "integration" / "data" / "cu130-py311-platforms.matrix.yaml")).specs[0]
    target = Target.of(spec, "base", "r/x:v1-x", "linux/arm64")
    assert target.expected["gpu_archs"] == "8.0 8.6 9.0 10.0 11.0 12.0"
    report = Report("v1", "matrix.yaml")
    record_result(report, target, SmokeResult(image=target.image, tag=target.tag))
    assert report.images[0].versions == spec.versions()
    path = tmp_path / "build-report.json"
    report.write(path)
    assert Report.load(path).images[0].versions == spec.versions()
