"""A failure's message holds what a build or a suite said (the RUN line that failed, its last log lines, a check's name
and message): the build and smoke stages print it to the terminal as it was said, its '[bold]', '[/]' and
'[float16]' never read as rich markup (which would restyle the line, drop the words, or raise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchimages import release
from torchimages.build import render
from torchimages.build.stage import BuildOptions
from torchimages.engine import BuildOutcome
from torchimages.report import Report
from torchimages.verify.smoke import Check, SmokeResult

from .conftest import plan_of
from .fake_engine import FakeEngine
from .test_stage_events import RecordedRunner, target

STEP = "RUN echo '[bold]building[/]' && exit 3"
LOG = ["[bold red]not red[/]", "closing [/] without opening"]
ERROR = "The command '/bin/sh -c echo [bold]x[/bold]' returned a non-zero code: [/]"


class FailingBuilder:
    """A builder whose every build fails at STEP, with markup in its step, log and error."""

    cross_installs = False
    dockerfile = "Dockerfile"

    def build(self, image: str, context: Path, tag: str, **_options: object) -> BuildOutcome:
        return BuildOutcome(image, tag, error=ERROR, step=STEP, log_tail=list(LOG))

    def stop_builds(self) -> None: ...

    def describe(self) -> str:
        return "a builder that fails"


def test_a_failed_builds_message_is_printed_as_the_build_said_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_of('registry: r.example/ml/pt\nimages:\n  - {flavor: cpu, name: cpu-tiny, torch: "2.13.0", '
                   'python: "3.11", variants: [ssh]}\n')
    render.write(plan, "v1", tmp_path / "images")
    monkeypatch.setattr(release.buildstage, "builder_of", lambda _name, _engine, **_named: FailingBuilder())
    options = BuildOptions("v1", tmp_path / "images", plain=True, report=tmp_path / "report.json", logs=tmp_path / "logs")
    report = release.build(plan, options, FakeEngine().engine)
    assert [record.result for record in report.images] == ["failed", "skipped"]
    printed = capsys.readouterr().err
    failed = printed[printed.index("FAILED "):]
    assert failed.startswith(f"FAILED cpu-tiny failed at {STEP}\n"), failed
    assert all(f"    | {line}\n" in failed for line in LOG), failed
    assert "SKIPPED cpu-tiny-ssh: its base cpu-tiny was not built" in printed


def test_a_failed_checks_name_and_message_are_printed_as_the_suite_said_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    said = SmokeResult("bad", "r/bad:v1", seconds=1.0, checks=[
        Check("test_matmul[bfloat16]", "failed", "assert [bold]0.5[/] == 1 (tolerance [/x])")])
    monkeypatch.setattr(release, "SmokeRunner", lambda **_options: RecordedRunner({"bad": said}))
    release.smoke(FakeEngine().engine, [target("bad")], Report("v1", "matrix.yaml"), require_gpu=False, plain=True,
                  logs=tmp_path / "logs")
    printed = capsys.readouterr().err
    assert "FAILED bad: failed test_matmul[bfloat16]: assert [bold]0.5[/] == 1 (tolerance [/x])\n" in printed, printed
