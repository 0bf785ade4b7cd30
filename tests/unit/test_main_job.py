"""The main job's order (torchimages.release.run): what a run leaves behind when its last stage fails. The stages
themselves run for real in tests/integration; here they are replaced so that the decision is what is tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchimages import release
from torchimages.build.jobs import Selection
from torchimages.build.stage import BuildOptions
from torchimages.errors import UserError
from torchimages.input import matrix, specs
from torchimages.publish.pushstage import PushOptions
from torchimages.report import ImageRecord, Report, SmokeStage
from torchimages.settings import SETTINGS
from torchimages.verify import audit
from torchimages.verify.auditstage import AuditInputs

SBOM_FAILURE = "syft could not read sha256:bb47b974fe17: write /tmp/stereoscope-1/image.tar: no space left on device"


def built_and_tested(plan: specs.Plan, options: BuildOptions) -> Report:
    """A report in which every image of the plan was built and passed its suite."""
    passed = SmokeStage(passed=20, failed=0, skipped=0, skipped_no_gpu=0, seconds=30.0, gpus=0, tiers={}, error=None,
                        image_id="sha256:" + "1" * 64)
    records = [ImageRecord(image=job.image, entry=job.spec.name, variant=job.variant, tag=job.tag, result="built",
                           versions={"torch": job.spec.torch}, image_id="sha256:" + "1" * 64, smoke=passed,
                           platform=job.platform)
               for job in release.buildstage.select(plan, options)]
    return Report(release=options.release, matrix=str(plan.file), images=records)


@pytest.fixture
def main_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[specs.Plan, BuildOptions, Report]:
    """The CPU entry's images built and tested by stand-ins of the build and smoke stages."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))  # no login: the push asks anonymously
    plan = specs.resolve(matrix.load(SETTINGS.root / "matrix.yaml"))
    options = BuildOptions(release="v2.7", images_dir=tmp_path / "images", report=tmp_path / "report.json",
                           logs=tmp_path / "logs", selection=Selection(only=("torch*-cpu-*",)))
    report = built_and_tested(plan, options)
    assert len(report.images) == 3, report.images
    monkeypatch.setattr(release.render_stage, "write", lambda *_args: [])
    monkeypatch.setattr(release, "Engine", lambda **_options: None)
    monkeypatch.setattr(release, "build", lambda *_args: report)
    monkeypatch.setattr(release, "smoke", lambda *_args, **_options: None)
    return plan, options, report


def test_a_push_cut_short_leaves_the_report_from_which_push_resumes(main_job: tuple,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    plan, options, report = main_job

    def push_until_the_sboms(*_args: object, **_options: object) -> tuple[bool, str]:
        raise UserError(SBOM_FAILURE)  # the images are pushed; the SBOM of the first one fails (a full /tmp)

    monkeypatch.setattr(release, "push_report", push_until_the_sboms)
    with pytest.raises(UserError) as raised:
        release.run(plan, options, push=PushOptions("127.0.0.1:5443/ml/pytorch"), require_gpu=False)
    message = str(raised.value)
    assert message.startswith(SBOM_FAILURE), message
    assert str(options.report_path) in message and "build.py push --tag v2.7" in message, message
    left = Report.load(options.report_path)  # what `build.py push` reads
    assert [(r.image, r.result, r.smoke.passed if r.smoke else None) for r in left.images] == \
           [(r.image, "built", 20) for r in report.images]


def test_a_run_without_a_push_writes_its_report_once_at_the_end(main_job: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    plan, options, _report = main_job
    written: list[Path] = []
    monkeypatch.setattr(Report, "write", lambda self, path: (written.append(path), (path, path.with_suffix(".md")))[1])
    assert release.run(plan, options, push=None, require_gpu=False) == 0
    assert written == [options.report_path]


def test_a_failed_audit_stops_the_release_before_any_push_and_an_allowlist_entry_lets_it_through(
        main_job: tuple, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan, options, report = main_job
    jinja = next(record.image for record in report.images if record.variant == "jupyter")
    monkeypatch.setattr(audit, "image_packages", lambda tags, _engine=None: {
        image: [("PyPI", "Jinja2", "3.1.6")] if image == jinja else [] for image in tags})
    advisories = tmp_path / "advisories"
    advisories.mkdir()
    (advisories / "GHSA-test.json").write_text(json.dumps({
        "id": "GHSA-test", "aliases": ["CVE-2099-1"], "modified": "2026-12-01T00:00:00Z",
        "database_specific": {"severity": "HIGH"},
        "affected": [{"package": {"ecosystem": "PyPI", "name": "jinja2"},
                      "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.1.7"}]}]}]}))
    pushes: list[Report] = []
    monkeypatch.setattr(release, "push_report", lambda _e, pushed, *_a, **_o: (pushes.append(pushed), (True, "m"))[1])
    push = PushOptions("127.0.0.1:5443/ml/pytorch")
    code = release.run(plan, options, push=push, require_gpu=False, audited=AuditInputs.read(advisories, None))
    said = capsys.readouterr().err
    assert code == 1 and pushes == [], said
    assert f"error: {jinja}: GHSA-test (CVE-2099-1): Jinja2 3.1.6 is affected, fixed in 3.1.7, severity HIGH" in said
    assert "nothing pushed" in said
    statuses = {r.image: r.audit.status for r in Report.load(options.report_path).images}  # type: ignore[union-attr]
    # the audit's own results are not among the reports, which release.yml merges as reports/*.json
    assert sorted(options.report_path.parent.glob("*.json")) == [options.report_path]
    assert (options.report_path.parent / "audit" / options.report_path.name).is_file()
    assert statuses[jinja] == "failed" and list(statuses.values()).count("passed") == 2
    allowlist = tmp_path / "vulnerabilities.yaml"
    allowlist.write_text("- id: CVE-2099-1\n  reason: templates come from the image only\n  expires: 2099-01-31\n")
    code = release.run(plan, options, push=push, require_gpu=False, audited=AuditInputs.read(advisories, allowlist))
    printed = capsys.readouterr()
    assert code == 0 and len(pushes) == 1, printed.err
    assert f"audit: {jinja}: GHSA-test in Jinja2 allowed by" in printed.out, printed.out
