"""The session's disk meter charges a module from its first test's start (its fixtures' builds included) and names
the modules running at the session's peak, one per lane (tests/session/disk.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.session import disk


def test_the_peak_names_the_module_of_each_lane_running_then(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    free = [100 * disk.GB]
    monkeypatch.setattr(disk, "free_bytes", lambda folders: free[0])
    meter = disk.DiskMeter([tmp_path])
    meter.start_free = free[0]
    plugin = disk.MeterPlugin(meter, tmp_path / "disk.txt")
    plugin.pytest_runtest_logstart("tests/integration/build/test_arm64_cuda_image.py::test_a@side")
    free[0] -= 12 * disk.GB  # the arm64 build, in its first test's setup
    meter.sample()
    plugin.pytest_runtest_logstart("tests/integration/publish/test_promote.py::test_b[user@host]@main")
    free[0] -= 9 * disk.GB
    meter.sample()
    plugin.pytest_runtest_logstart("tests/integration/test_workflows.py::test_c@main")  # the main lane moves on
    free[0] += 15 * disk.GB
    meter.sample()
    assert meter.modules["tests/integration/build/test_arm64_cuda_image.py"].peak == 21 * disk.GB
    assert meter.modules["tests/integration/test_workflows.py"].peak == 6 * disk.GB
    assert meter.peak_line().startswith("session peak: 21.0 GB above its start, while "
                                        "tests/integration/build/test_arm64_cuda_image.py and "
                                        "tests/integration/publish/test_promote.py ran")
