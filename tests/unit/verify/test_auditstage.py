"""The audit as a stage of the release (torchimages/verify/auditstage.py): each image's result recorded on its report
record, read back through the grammar, carried into the release manifest, and the gate that stops a push. The package
listing is read from real images in tests/integration/verify/test_audit.py; here it is given."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from torchimages import manifest
from torchimages.errors import UserError
from torchimages.input.specs import Release
from torchimages.publish import push as publish
from torchimages.publish.pushstage import PushOptions, push_report
from torchimages.report import ImageRecord, PushStage, Report, SmokeStage
from torchimages.verify import audit, auditstage

from .test_audit import ADVISORIES, IMAGE, PACKAGES, TODAY

JUPYTER = f"{IMAGE}-jupyter"
DIGEST = "sha256:" + "2" * 64


def two_tested_images() -> Report:
    passed = SmokeStage(passed=20, failed=0, skipped=0, skipped_no_gpu=0, seconds=3.0, gpus=0, tiers={}, error=None)
    return Report("v2.7", "matrix.yaml", [ImageRecord(image=name, entry=IMAGE, variant=variant, tag=f"t/{name}",
                                                      result="built", versions={"torch": "2.13.0"}, smoke=passed)
                                          for name, variant in ((IMAGE, "base"), (JUPYTER, "jupyter"))])


def inputs(tmp_path: Path, entries: list[dict] | None = None, **options: object) -> auditstage.AuditInputs:
    allowed = ()
    if entries is not None:
        path = tmp_path / "vulnerabilities.yaml"
        path.write_text(json.dumps(entries))
        allowed = tuple(audit.read_allowlist(path))
    return auditstage.AuditInputs(tuple(ADVISORIES), "advisories/", allowed, **options)  # type: ignore[arg-type]


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both images hold the packages of test_audit.PACKAGES."""
    monkeypatch.setattr(audit, "image_packages",
                        lambda tags, _engine=None: {image: PACKAGES[IMAGE] for image in tags})


def run(report: Report, given: auditstage.AuditInputs, tmp_path: Path, said: list[str] | None = None) -> bool:
    tags = {record.image: record.tag for record in report.images}
    return auditstage.run(tags, given, report=report, out=tmp_path / "audit.json", today=TODAY,
                          say=(said if said is not None else []).append)


def test_each_image_s_result_is_recorded_and_read_back_through_the_grammar(tmp_path: Path, listed: None) -> None:
    report = two_tested_images()
    said: list[str] = []
    assert run(report, inputs(tmp_path), tmp_path, said) is False
    stage = report.images[0].audit
    assert stage is not None and stage.status == "failed" and stage.source == "advisories/"
    assert stage.problems == [f"{IMAGE}: A-fixed-high (CVE-A-fixed-high): Jinja2 3.1.6 is affected, fixed in 3.1.7, "
                              "severity HIGH", f"{IMAGE}: D-fixed-unknown (CVE-D-fixed-unknown): openssl "
                              "3.0.17-1~deb12u1 is affected, fixed in 3.0.18-1, severity unknown"]
    assert [finding["id"] for finding in stage.findings] == ["A-fixed-high", "B-fixed-low", "C-nofix-critical",
                                                             "D-fixed-unknown"]
    assert not report.images[0].ok and not report.images[0].releasable
    assert f"error: {stage.problems[0]}" in said
    report.write(tmp_path / "report.json")
    again = Report.load(tmp_path / "report.json")
    assert again.images[0].audit == stage and not again.images[0].ok
    assert "| A-fixed-high, CVE-A-fixed-high | Jinja2 (PyPI) | 3.1.6 | 3.1.7 | HIGH | - |" in \
        (tmp_path / "report.md").read_text()


def test_an_allowlist_entry_passes_its_image_and_an_expired_one_fails_only_the_images_it_names(
        tmp_path: Path, listed: None) -> None:
    entries = [{"id": "A-fixed-high", "reason": "not reachable: no templates from users", "expires": "2027-01-31"},
               {"id": "CVE-D-fixed-unknown", "reason": "no TLS server in the image", "expires": "2027-01-31"}]
    report = two_tested_images()
    assert run(report, inputs(tmp_path, entries), tmp_path) is True
    assert [record.audit.status for record in report.images] == ["passed", "passed"]  # type: ignore[union-attr]
    assert report.images[0].audit.findings[0]["allowed_by"] == "A-fixed-high"  # type: ignore[union-attr]
    expired = [*entries, {"id": "B-fixed-low", "images": "*-jupyter", "reason": "low", "expires": "2026-12-01"}]
    report = two_tested_images()
    assert run(report, inputs(tmp_path, expired), tmp_path) is False
    assert [record.audit.status for record in report.images] == ["passed", "failed"]  # type: ignore[union-attr]
    assert "B-fixed-low expired on 2026-12-01" in report.images[1].audit.problems[0]  # type: ignore[union-attr]


def test_without_a_source_each_image_is_not_checked_never_clean_and_required_it_fails(tmp_path: Path) -> None:
    report, said = two_tested_images(), []
    none = auditstage.AuditInputs(None, None, ())
    assert auditstage.run({IMAGE: "t"}, none, report=report, out=tmp_path / "a.json", today=TODAY, say=said.append)
    assert said == ["audit: not checked: no advisory source given (--advisories DIR|ZIP|URL); 1 images unaudited"]
    assert report.images[0].audit.status == "not checked" and report.images[0].ok  # type: ignore[union-attr]
    assert report.images[1].audit is None  # not audited in this run
    required = auditstage.AuditInputs(None, None, (), require=True)
    assert not auditstage.run({IMAGE: "t"}, required, report=report, out=tmp_path / "a.json", today=TODAY,
                              say=said.append)
    assert report.images[0].audit.status == "failed" and not report.images[0].ok  # type: ignore[union-attr]
    assert not (tmp_path / "a.json").exists()


@pytest.mark.parametrize(("change", "words"), [
    (lambda a: a.update(status="clean"), "status must be one of passed, failed, not checked"),
    (lambda a: a.update(problems=[]), "a failed audit names what failed it"),
    (lambda a: a.update(fail_on="SEVERE"), "fail_on must be one of"),
    (lambda a: a["findings"][0].update(id="x" * 100_000), "at most 100 characters"),
    (lambda a: a["findings"][0].update(severity="BAD"), "severity must be one of"),
    (lambda a: a["findings"][0].update(package="jinja2\x1b[2J"), "control or invisible character"),
    (lambda a: a["findings"][0].pop("fixed"), "each finding must be an object of exactly"),
])
def test_a_recorded_audit_is_input_each_value_checked_in_the_report_and_the_manifest(
        tmp_path: Path, listed: None, change: object, words: str) -> None:
    report = two_tested_images()
    run(report, inputs(tmp_path), tmp_path)
    report.images[0].push = PushStage(reference=f"127.0.0.1:5443/ml/pytorch:v2.7-{IMAGE}", digest=DIGEST)
    made = publish.manifest([report], "127.0.0.1:5443/ml/pytorch")
    manifest.write(made, tmp_path / "release.json")
    assert manifest.read(tmp_path / "release.json").images[0].audit == asdict(report.images[0].audit)  # type: ignore[arg-type]
    assert "| failed at HIGH: 4 advisories, 0 allowed |" in (tmp_path / "release.md").read_text()
    report.write(tmp_path / "report.json")
    for path, at in ((tmp_path / "report.json", ["images", 0, "stages", "audit"]),
                     (tmp_path / "release.json", ["images", 0, "audit"])):
        data = json.loads(path.read_text())
        target = data
        for key in at:
            target = target[key]
        change(target)  # type: ignore[operator]
        path.write_text(json.dumps(data))
        with pytest.raises(UserError) as refused:
            (Report.load if path.name == "report.json" else manifest.read)(path)
        message = str(refused.value)
        assert words in message and "audit" in message and len(message) < 600, message


def test_push_pushes_nothing_while_an_audit_failed(tmp_path: Path, listed: None) -> None:
    report = two_tested_images()
    run(report, inputs(tmp_path), tmp_path)
    options = PushOptions("127.0.0.1:1/ml/pytorch", release=Release("v2.7", None))  # nothing listens there
    with pytest.raises(UserError) as refused:
        push_report(None, report, options, lambda _event: None, None,  # type: ignore[arg-type]
                    report_path=tmp_path / "report.json")
    message = str(refused.value)
    assert f"the audit failed for {IMAGE}, {JUPYTER}; nothing pushed\n" in message, message
    assert f"\n{IMAGE}: A-fixed-high (CVE-A-fixed-high): Jinja2 3.1.6 is affected, fixed in 3.1.7" in message, message
