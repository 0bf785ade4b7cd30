"""The smoke suite as the product runs it (`build.py test`, `build.py selfcheck`) loads none of the project's test
harness: two suites run at a time, and the harness's session cleanup, run by one suite's pytest, removed the other's
containers (an ssh image's suite lost its sshd containers half way); on a GPU host, its imports are not there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from torchimages.verify import selfcheck, smoke
from torchimages.verify.suite import SMOKE_DIR, pytest_options

from ..conftest import ROOT

# Prints the conftest files the session loaded and the options it parsed, then stops before any test runs.
PROBE = """
import sys, pytest
class Probe:
    def pytest_collection_finish(self, session):
        files = sorted(getattr(p, '__file__', '') for p in session.config.pluginmanager.get_plugins())
        print('conftests:', [f for f in files if f.endswith('conftest.py')])
        print('dist:', getattr(session.config.option, 'dist', None))
        raise SystemExit(0)
sys.exit(pytest.main(sys.argv[1:], plugins=[Probe()]))
"""


def loaded(arguments: list[str]) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE, *arguments], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, check=False)
    return result.stdout + result.stderr


def selfcheck_arguments(tmp_path: Path) -> list[str]:
    """The pytest arguments `build.py selfcheck` runs the suite with (after `python -m pytest`)."""
    command = selfcheck.command(sys.executable, {"cuda": None, "gpus": 0}, require_gpu=False,
                                facts_file=tmp_path / "facts.json")
    return command[command.index("pytest") + 1:]


def test_the_suite_loads_only_its_own_conftest_and_none_of_the_sessions_options(tmp_path: Path) -> None:
    output = loaded(selfcheck_arguments(tmp_path))
    assert f"conftests: [{str(SMOKE_DIR / 'conftest.py')!r}]" in output, output
    assert "dist: no" in output, output


def test_without_the_options_the_harness_would_be_loaded(tmp_path: Path) -> None:
    """The probe sees the difference: the project's own tests/conftest.py and its xdist options."""
    arguments = [a for a in selfcheck_arguments(tmp_path) if a not in pytest_options()]
    output = loaded(arguments)
    assert str(ROOT / "tests" / "conftest.py") in output and "dist: loadgroup" in output, output


def test_both_runners_pass_the_options(tmp_path: Path) -> None:
    arguments = selfcheck_arguments(tmp_path)
    assert arguments[arguments.index("-p"):][:len(pytest_options())] == pytest_options()
    source = (ROOT / "torchimages" / "verify" / "smoke.py").read_text()
    assert "*pytest_options()" in source and smoke.SMOKE_DIR == SMOKE_DIR
