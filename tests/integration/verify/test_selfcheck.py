"""The steps docs/smoke-suite.md gives for a GPU host without Docker and without network, typed as written.

The "GPU host" here is a fresh interpreter that has torch (the CPU build, installed offline from the CI
wheelhouse) and nothing else: no click, no Docker SDK, no rich, no pytest. Its GPU checks skip (or fail
under --require-gpu) because this machine has no GPU; its compute checks run for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import junitparser
import pytest

from torchimages.verify import junit

from ..conftest import ROOT, run

pytestmark = [pytest.mark.lane("side")]


@pytest.fixture(scope="module")
def gpu_host(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gpu-host")
    checkout = folder / "checkout"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            (checkout / name).write_bytes((ROOT / name).read_bytes())
    python = folder / "torch-env" / "bin" / "python"
    made = run([sys.executable, "-m", "venv", str(python.parents[1])], timeout=300)
    assert made.returncode == 0, made.stderr
    torch = next(wheelhouse.glob("torch-*.whl")).name.split("-")[1]
    installed = run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheelhouse),
                     f"torch=={torch}", "numpy"], timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # On a machine with network, in the checkout (the page's first step; the Python version is the GPU host's):
    wheels = subprocess.run(["bash", "scripts/make-selfcheck-wheels.sh", ".cache/selfcheck-wheels",
                             f"{sys.version_info.major}.{sys.version_info.minor}"], cwd=checkout, capture_output=True,
                            text=True, timeout=600, check=False, env={**os.environ, "PYTHON": sys.executable})
    assert wheels.returncode == 0, wheels.stderr[-3000:]
    return {"checkout": checkout, "python": python}


def on_gpu_host(host: dict[str, Path], command: str) -> subprocess.CompletedProcess[str]:
    """A line of docs/smoke-suite.md with `python3` being the GPU host's interpreter, typed in its checkout, with no network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{host['python'].parent}:{env['PATH']}"
    line = command.replace("python3 ", f"{host['python']} ")
    return subprocess.run(["bash", "-c", line], cwd=host["checkout"], env=env, capture_output=True, text=True,
                          timeout=1500, check=False)


INSTALL = "python3 -m pip install --no-index --find-links .cache/selfcheck-wheels --target .selfcheck -r requirements-selfcheck.txt"
RUN = "PYTHONPATH=.selfcheck python3 build.py selfcheck"


def test_the_smoke_suite_page_gives_these_steps() -> None:
    readme = (ROOT / "docs" / "smoke-suite.md").read_text()
    for line in (INSTALL, f"{RUN} --require-gpu", "bash scripts/make-selfcheck-wheels.sh .cache/selfcheck-wheels"):
        assert line in readme, f"docs/smoke-suite.md no longer gives: {line}"


def test_selfcheck_on_a_host_with_only_torch(gpu_host: dict[str, Path], tmp_path: Path) -> None:
    before = on_gpu_host(gpu_host, "python3 build.py selfcheck")
    assert before.returncode == 2 and "lacks pytest, pytest-testinfra" in before.stderr, before.stderr
    assert "Traceback" not in before.stderr
    installed = on_gpu_host(gpu_host, INSTALL)
    assert installed.returncode == 0, installed.stderr[-3000:]
    checked = on_gpu_host(gpu_host, f"{RUN} --junit {tmp_path / 'junit'}")
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]
    # --junit: the same checks as JUnit XML, the GPU ones skipped for want of a GPU marked so
    suite = next(iter(junitparser.JUnitXml.fromfile(str(tmp_path / "junit" / "selfcheck.xml"))))
    cases = {case.name: case for case in suite}
    assert suite.tests == checked.stdout.count(" PASSED") + checked.stdout.count(" SKIPPED") > 10, checked.stdout
    assert suite.failures == suite.errors == 0 and suite.skipped == checked.stdout.count(" SKIPPED")
    assert not cases["test_torch_compile_cpu[local]"].result
    assert any(result.message.startswith(junit.GPU_SKIP) for case in suite for result in case.result)
    assert "selfcheck: torch " in checked.stdout and ", 0 GPU(s), probes run by " in checked.stdout
    for name in ("test_dataloader_with_workers_through_shm", "test_torch_compile_cpu", "test_amp_cpu_bf16"):
        assert f"{name}[local] PASSED" in checked.stdout, checked.stdout[-4000:]
    assert "SKIPPED" in checked.stdout and "no GPU given to the container" in checked.stdout
    required = on_gpu_host(gpu_host, f"{RUN} --require-gpu")
    assert required.returncode == 1 and "--require-gpu was given" in required.stdout, required.stdout[-3000:]


def test_selfcheck_names_an_interpreter_without_torch(gpu_host: dict[str, Path]) -> None:
    on_gpu_host(gpu_host, INSTALL)
    result = on_gpu_host(gpu_host, f"{RUN} --python {sys.executable}")  # this project's venv: no torch
    assert result.returncode == 2 and f"{sys.executable} has no torch" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
