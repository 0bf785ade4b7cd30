"""Build, smoke and push share one event stream, shown by the same plain and live views and logs."""

from __future__ import annotations

import io
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from torchimages.errors import UserError
from torchimages.events import StageEvent
from torchimages.input.specs import Release
from torchimages.progress import LiveProgress, LogFiles, PlainProgress, fan_out
from torchimages.publish import push as publish
from torchimages.report import ImageRecord, Report, SmokeStage
from torchimages.verify import smokestage
from torchimages.verify.smoke import Check, SmokeResult, Target

from .fake_engine import FakeEngine

PLAIN_LINE = re.compile(r"^\d\d:\d\d:\d\d \+\s*[\d.]+s (\S+) (.*)$")


class RecordedRunner:
    """The smoke runner's two calls the stage makes, answered from a list of results (the suite itself is
    tested against real images in tests/integration/verify/test_smoke.py)."""

    def __init__(self, results: dict[str, SmokeResult]) -> None:
        self.results = results
        self.engine = FakeEngine(images={f"r/{image}:v1": {"Id": f"sha256:r/{image}:v1"} for image in results}).engine

    def run(self, target: Target) -> SmokeResult:
        return self.results[target.image]


def target(image: str) -> Target:
    return Target(image=image, tag=f"r/{image}:v1", variant="base", flavor="cpu", expected={"torch": "2.3.1"},
                  entry=image)


def smoke_events(emit: object) -> Report:
    passing = SmokeResult("good", "r/good:v1", seconds=3.0, checks=[
        Check("test_versions", "passed"), Check("test_nccl", "passed", "one GPU: NCCL ran on one rank")])
    failing = SmokeResult("bad", "r/bad:v1", seconds=2.0, checks=[
        Check("test_versions", "passed"), Check("test_cudnn", "failed", "assert 8902 == 90100\nmore\nlines\nfour")])
    report = Report(release="v1", matrix="matrix.yaml")
    runner = RecordedRunner({"good": passing, "bad": failing})
    smokestage.test_images(runner, [target("good"), target("bad")], report, emit)  # type: ignore[arg-type]
    return report


def plain_lines(stream: io.StringIO) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in map(PLAIN_LINE.match, stream.getvalue().splitlines()) if m]


def test_plain_lines_of_every_stage_have_one_shape() -> None:
    stream = io.StringIO()
    view = PlainProgress(stream)
    view(StageEvent("good", "built", "sha256:1"))
    report = smoke_events(view)
    record = next(r for r in report.images if r.image == "good")
    record.push = None
    publisher = publish.Publisher(None, "registry.example.com/ml/pytorch", Release("v1"), credentials=None, emit=view)
    publisher.publish(Report(release="v1", matrix="m", images=[
        ImageRecord(image="bad", entry="bad", variant="base", tag="r/bad:v1", result="built", versions={},
                    smoke=report.images[1].smoke)]))
    lines = plain_lines(stream)
    assert len(lines) == len(stream.getvalue().splitlines()), stream.getvalue()  # every line has the one shape
    assert ("good", "built sha256:1") in lines
    assert ("good", "smoke started r/good:v1") in lines
    assert ("good", "smoke note test_nccl: one GPU: NCCL ran on one rank") in lines
    assert any(image == "good" and text.startswith("smoke passed 2 passed, 0 failed") for image, text in lines), lines
    assert any(image == "bad" and text.startswith("smoke failed 1 passed, 1 failed") for image, text in lines), lines
    assert ("bad", "push skipped not pushed: its smoke suite did not pass in this run") in lines
    assert not any(text.startswith("smoke log") for _, text in lines), "log lines go to the log files, not the view"


def test_the_live_table_follows_an_image_from_stage_to_stage() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    live = LiveProgress(console)
    live(StageEvent("good", "started", "r/good:v1"))
    live(StageEvent("good", "step", "RUN pip install", 3, 9))
    live(StageEvent("good", "built", "sha256:1"))
    assert (live.images["good"].stage, live.images["good"].state, live.images["good"].step) == ("build", "built", "3/9")
    smoke_events(live)
    good, bad = live.images["good"], live.images["bad"]
    assert (good.stage, good.state, good.step) == ("smoke", "passed", ""), "a new stage starts a fresh row"
    assert good.last_line.startswith("2 passed, 0 failed")
    assert (bad.stage, bad.state) == ("smoke", "failed")
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(live._table())
    assert re.search(r"good\s*│\s*smoke\s*│\s*passed", rendered.getvalue()), rendered.getvalue()


def test_each_stage_keeps_its_own_log_file(tmp_path: Path) -> None:
    logs = LogFiles(tmp_path)
    emit = fan_out(logs)
    emit(StageEvent("good", "log", "Step 1/9 : FROM debian"))
    smoke_events(emit)
    logs.close()
    assert (tmp_path / "good.log").read_text() == "Step 1/9 : FROM debian\n"
    smoke_log = (tmp_path / "bad.smoke.log").read_text()
    assert "failed test_cudnn: assert 8902 == 90100 | more | lines\n" in smoke_log
    assert "four" not in smoke_log and "== failed 1 passed, 1 failed" in smoke_log


def test_a_failed_smoke_suite_is_explained_after_the_stage() -> None:
    result = SmokeResult("bad", "t", checks=[Check("test_cudnn", "failed", "assert 8902 == 90100")],
                         error="bad: could not run the suite: gone")
    assert smokestage.failures(result) == ["failed test_cudnn: assert 8902 == 90100",
                                           "error bad: could not run the suite: gone"]


def test_push_ends_name_what_happened() -> None:
    assert publish.end_of(publish.PushOutcome("i", "r:t", digest="sha256:1", pushed=True)) == "pushed"
    assert publish.end_of(publish.PushOutcome("i", "r:t", digest="sha256:1")) == "unchanged"
    assert publish.end_of(publish.PushOutcome("i", "r:t", error="refused: r:t already points at")) == "failed"
    assert publish.end_of(publish.PushOutcome("i", "r:t", error="not pushed: its base x was not pushed",
                                              tried=False)) == "skipped"
    # what decides is whether the push was tried, not the error's words
    assert publish.end_of(publish.PushOutcome("i", "r:t", error="not pushed: the registry said 500")) == "failed"


def test_the_rules_that_keep_an_image_from_the_registry() -> None:
    passed = ImageRecord("img", "entry", "base", "t", "built", {}, smoke=SmokeStage(1, 0, 0, 0, 1.0, 0, {}, None))
    assert publish.not_pushed_because(passed, set()) is None
    assert publish.not_pushed_because(passed, {("entry", "linux/amd64")}) == "its base entry (linux/amd64) was not pushed"
    arm64 = replace(passed, platform="linux/arm64")  # a base not pushed for one platform keeps only that platform's
    assert publish.not_pushed_because(arm64, {("entry", "linux/amd64")}) is None
    failed = replace(passed, smoke=SmokeStage(0, 1, 0, 0, 1.0, 0, {}, None))
    assert publish.not_pushed_because(failed, set()) == "its smoke suite did not pass in this run"
    over = replace(passed, over_budget="grew 9% over v1")
    assert publish.not_pushed_because(over, set()) == "over its size budget: grew 9% over v1"


class SlowRunner(RecordedRunner):
    """Each twin answers after a pause and counts how many suites run at once."""

    def __init__(self, results: dict[str, SmokeResult], shared: dict[str, int] | None = None) -> None:
        super().__init__(results)
        self.shared = shared if shared is not None else {"now": 0, "most": 0, "twins": 0}
        self.lock = threading.Lock()

    def twin(self) -> SlowRunner:
        self.shared["twins"] += 1
        twin = SlowRunner(self.results, self.shared)
        twin.lock = self.lock
        return twin

    def run(self, target: Target) -> SmokeResult:
        with self.lock:
            self.shared["now"] += 1
            self.shared["most"] = max(self.shared["most"], self.shared["now"])
        time.sleep(0.3)
        with self.lock:
            self.shared["now"] -= 1
        return self.results[target.image]


def test_jobs_run_suites_side_by_side_each_with_its_own_runner_and_record_them_in_order() -> None:
    names = ["c", "a", "b"]
    results = {name: SmokeResult(name, f"r/{name}:v1", checks=[Check("test_versions", "passed")]) for name in names}
    events: list[StageEvent] = []
    for jobs, most, twins in ((1, 1, 0), (2, 2, 3)):
        report = Report(release="v1", matrix="matrix.yaml")
        runner = SlowRunner(results)
        returned = smokestage.test_images(runner, [target(n) for n in names], report, events.append,  # type: ignore[arg-type]
                                          jobs=jobs)
        assert [r.image for r in returned] == names and [r.image for r in report.images] == names
        assert (runner.shared["most"], runner.shared["twins"]) == (most, twins), (jobs, runner.shared)
    assert {e.image for e in events if e.kind == "passed"} == set(names)


def test_what_a_build_or_registry_said_is_shown_not_obeyed() -> None:
    """An event's message comes from outside (build output, a registry's error, a file): on a terminal its escape
    sequences would retitle the window or hide text, and its newlines would forge lines."""
    stream = io.StringIO()
    view = PlainProgress(stream)
    view(StageEvent("img", "failed", "denied\x1b]0;owned\x07\nFAKE line\x1b[2K", stage="push"))
    line = stream.getvalue()
    assert line.count("\n") == 1 and "\x1b" not in line and "\x07" not in line
    assert "denied\\x1b]0;owned\\x07\\nFAKE line\\x1b[2K" in line


def test_test_and_bench_refuse_the_report_of_another_release(tmp_path: Path) -> None:
    """`test` and `bench` add to the --report they are given: one of another release would get this release's tested
    image IDs, which its push would then publish under the other release's tags."""
    path = tmp_path / "build-report.json"
    Report(release="v2.7", matrix="matrix.yaml").write(path)
    with pytest.raises(UserError, match=r"is the report of release v2\.7, not v2\.8"):
        smokestage.load_report(path, "v2.8", "matrix.yaml")
    assert smokestage.load_report(path, "v2.7", "matrix.yaml").release == "v2.7"
    assert smokestage.load_report(tmp_path / "new.json", "v2.8", "matrix.yaml").images == []
