"""How the product runs the smoke suite's pytest (`build.py test` in containers, `build.py selfcheck` on a host): on
its own, apart from the project's test session.

The suite lives in the checkout's tests/smoke, under tests/conftest.py and pyproject's pytest settings, which belong
to the project's own tests: a harness that removes what was made on the engine while it ran, and xdist's options. Two
suites run at a time (`build.py test --jobs 2`), and on a user's machine other containers run beside them: the suite
loads no conftest above its own folder and none of those options. Imports nothing outside the standard library, so
selfcheck runs on a GPU host's bare Python.
"""

from __future__ import annotations

from pathlib import Path

from ..settings import SETTINGS

SMOKE_DIR = SETTINGS.root / "tests" / "smoke"
NO_GPU = "no GPU given to the container"  # how the suite says a GPU check was skipped for lack of a GPU


def pytest_options(smoke_dir: Path = SMOKE_DIR) -> list[str]:
    """The options every run of the suite passes: tests/smoke's conftest only, no addopts, no cache written."""
    return ["-p", "no:cacheprovider", f"--confcutdir={smoke_dir}", "-o", "addopts=", f"--rootdir={SETTINGS.root}"]
