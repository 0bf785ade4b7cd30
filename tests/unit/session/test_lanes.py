"""Where a test runs follows from its module's marks (tests/session/lanes.py): the order of each lane, its xdist group,
its engine; an integration module without a lane is a collection error naming it. The real session is collected too:
every integration module is marked, and the side lane's heavy modules come first, then the side lane's light ones, the
current lane's and the main lane's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.session import lanes

from ..conftest import ROOT


@dataclass
class Item:
    """What lanes.py reads of a collected test: its marks."""

    name: str
    marks: dict[str, tuple] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return getattr(pytest.mark, name)(*self.marks[name]).mark if name in self.marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks[mark.name] = mark.args


def item(name: str, lane: str, heavy: bool = False) -> Item:
    return Item(name, {"lane": (lane,), **({"heavy": ()} if heavy else {})})


def test_the_side_lanes_heavy_modules_come_first_and_the_main_lanes_last() -> None:
    items = [item("main-heavy", "main", True), item("main-a", "main"), item("current-a", "current"), item("side-a", "side"),
             item("side-heavy", "side", True), item("main-b", "main"), item("side-b", "side")]
    lanes.arrange(items, lanes.LANES)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["side-heavy", "side-a", "side-b", "current-a", "main-a", "main-b", "main-heavy"]
    assert [i.marks["xdist_group"] for i in items] == [("side",)] * 3 + [("current",)] + [("main",)] * 3


def test_with_one_lane_every_test_is_the_main_lanes() -> None:
    items = [item("side-a", "side"), item("main-a", "main")]
    lanes.arrange(items, (lanes.MAIN,))  # type: ignore[arg-type]
    assert {i.marks["xdist_group"] for i in items} == {("main",)}


def test_a_lane_that_does_not_run_gives_its_tests_to_the_main_lane() -> None:
    items = [item("current-a", "current"), item("side-a", "side"), item("main-a", "main")]
    lanes.arrange(items, (lanes.MAIN, lanes.SIDE))  # type: ignore[arg-type]
    assert {i.name: i.marks["xdist_group"] for i in items} == {"side-a": ("side",), "current-a": ("main",),
                                                               "main-a": ("main",)}


def test_the_side_lane_builds_on_the_side_engine_and_keeps_the_first_ones_address(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/first.sock")
    monkeypatch.setenv(lanes.SIDE_ENGINE, "unix:///var/run/second.sock")
    monkeypatch.delenv(lanes.FIRST_ENGINE, raising=False)
    lanes.enter(Item("main-a", {"xdist_group": ("main",)}))  # type: ignore[arg-type]
    assert os.environ["DOCKER_HOST"] == "unix:///var/run/first.sock"
    lanes.enter(Item("side-a", {"xdist_group": ("side",)}))  # type: ignore[arg-type]
    assert os.environ["DOCKER_HOST"] == "unix:///var/run/second.sock"
    assert os.environ[lanes.FIRST_ENGINE] == lanes.first_engine() == "unix:///var/run/first.sock"


def test_the_current_lane_builds_on_the_current_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/first.sock")
    monkeypatch.setenv(lanes.CURRENT_ENGINE, "unix:///var/run/current.sock")
    monkeypatch.delenv(lanes.FIRST_ENGINE, raising=False)
    lanes.enter(Item("current-a", {"xdist_group": ("current",)}))  # type: ignore[arg-type]
    assert os.environ["DOCKER_HOST"] == "unix:///var/run/current.sock"
    assert lanes.first_engine() == "unix:///var/run/first.sock"


def collect(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "CI": ""})


def test_an_integration_module_without_a_lane_is_a_collection_error_naming_it(tmp_path: Path) -> None:
    """A copy of the harness with one integration module that declares nothing."""
    (tmp_path / "tests" / "integration").mkdir(parents=True)
    for name in ("__init__.py", "conftest.py", "buildpy.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / "tests" / name)
    shutil.copytree(ROOT / "tests" / "session", tmp_path / "tests" / "session")
    (tmp_path / "tests" / "integration" / "__init__.py").write_text("")
    (tmp_path / "tests" / "integration" / "test_new.py").write_text("def test_x():\n    pass\n")
    result = collect(tmp_path, "tests/integration")
    assert result.returncode != 0 and "tests/integration/test_new.py: no lane" in result.stderr, result.stderr
    (tmp_path / "tests" / "integration" / "test_new.py").write_text(
        "import pytest\npytestmark = [pytest.mark.lane('nowhere')]\ndef test_x():\n    pass\n")
    result = collect(tmp_path, "tests/integration")
    assert result.returncode != 0 and "tests/integration/test_new.py: no lane" in result.stderr, result.stderr
    (tmp_path / "tests" / "integration" / "test_new.py").write_text(
        "import pytest\npytestmark = [pytest.mark.lane('side')]\ndef test_x():\n    pass\n")
    assert collect(tmp_path, "tests/integration").returncode == 0


def test_the_session_collects_in_the_order_the_marks_give() -> None:
    result = collect(ROOT, "tests/integration")
    assert result.returncode == 0, result.stderr
    modules = list(dict.fromkeys(line.split("::")[0] for line in result.stdout.splitlines() if "::" in line))
    assert modules[:3] == ["tests/integration/build/test_arm64_cuda_image.py", "tests/integration/build/test_devel_image.py",
                           "tests/integration/test_cuda_and_ngc_images.py"], modules
    assert modules[-1] == "tests/integration/test_workflows.py", modules  # the main lane's one heavy module, last
    assert "tests/integration/build/test_current_engine.py" not in modules, "the current lane is opt-in"
    opted_in = collect(ROOT, "tests/integration/build/test_current_engine.py", "--current-engine", "-n", "3")
    assert opted_in.returncode == 0 and "test_current_engine.py::" in opted_in.stdout, opted_in.stderr
    for lanes_asked in (("-n", "3"), ("-n", "2", "--current-engine")):
        refused = collect(ROOT, "tests/unit/session", *lanes_asked)
        assert refused.returncode == 4 and "-n 3 --current-engine" in refused.stderr, refused.stderr
