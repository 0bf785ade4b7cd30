"""Integration tests: a real Docker engine and real builds.

They skip only when no engine answers and CI is unset; under CI a missing engine fails them.
The CPU entry of matrix.yaml is built once per session from a Debian base made with
debootstrap, torch and the rest from a local wheelhouse (offline), the way CI runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from torchimages import matrix, specs

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "torchimages/debian:bookworm-minbase"
RELEASE = "it"
CPU_GLOB = "torch*-cpu-py*"
# Given to the build as a pip index and a proxy: neither may reach any image.
SECRET_TOKEN = "s3cr3t-index-token-4242"
SECRET_PROXY_PASSWORD = "proxy-pa55word-4242"


def engine_client() -> docker.APIClient | None:
    try:
        client = docker.APIClient(base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), version="auto",
                                  timeout=30)
        client.ping()
    except Exception:
        return None
    return client


@pytest.fixture(scope="session")
def api() -> docker.APIClient:
    client = engine_client()
    if client is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but no Docker engine answers: .ci/run must start one (scripts/start-engine.sh)")
        pytest.skip("no Docker engine answers and CI is unset")
    return client


def run(command: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def build_py(*args: str, timeout: float = 1500, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, str(ROOT / "build.py"), *args], timeout=timeout, env=env)


@pytest.fixture(scope="session")
def base_image(api: docker.APIClient) -> str:
    result = run(["bash", str(ROOT / "scripts" / "make-base-image.sh"), BASE_IMAGE], timeout=600)
    assert result.returncode == 0, f"making the base image failed:\n{result.stdout}{result.stderr}"
    return BASE_IMAGE


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    folder = ROOT / ".cache" / "wheelhouse"
    cpu = cpu_spec()
    result = run(["bash", str(ROOT / "scripts" / "make-ci-wheelhouse.sh"), str(folder), cpu.torch], timeout=900)
    assert result.returncode == 0, f"making the wheelhouse failed:\n{result.stdout}{result.stderr}"
    return folder


def cpu_spec() -> specs.ImageSpec:
    """The CPU entry of the default matrix: the tests' expectations come from the matrix."""
    plan = specs.resolve(matrix.load(ROOT / "matrix.yaml"))
    return next(spec for spec in plan.specs if spec.flavor == "cpu")


@dataclass(frozen=True)
class CpuBuild:
    spec: specs.ImageSpec
    result: subprocess.CompletedProcess[str]
    report: dict
    report_path: Path
    tags: dict[str, str]  # variant -> tag


@pytest.fixture(scope="session")
def cpu_build(api: docker.APIClient, base_image: str, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> CpuBuild:
    """Build the CPU entry with both variants, as CI does, with secrets in the pip index URL and proxy."""
    spec = cpu_spec()
    out = tmp_path_factory.mktemp("cpu-build")
    images = out / "images"
    rendered = build_py("render", "--tag", RELEASE, "--out", str(images))
    assert rendered.returncode == 0, rendered.stderr
    env = dict(os.environ, HTTPS_PROXY=f"http://builder:{SECRET_PROXY_PASSWORD}@127.0.0.1:9")
    result = build_py("build", "--tag", RELEASE, "--images", str(images), "--only", CPU_GLOB, "--plain",
                      "--base-image", base_image, "--wheelhouse", str(wheelhouse), "--offline",
                      "--pip-index-url", f"https://ci:{SECRET_TOKEN}@pypi.invalid/simple",
                      "--report", str(out / "report.json"), "--logs", str(out / "logs"), env=env)
    assert result.returncode == 0, f"building the CPU entry failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    report = json.loads((out / "report.json").read_text())
    plan_tags = {r["variant"]: r["tag"] for r in report["images"]}
    return CpuBuild(spec=spec, result=result, report=report, report_path=out / "report.json", tags=plan_tags)


@pytest.fixture(scope="session")
def smoke_run(cpu_build: CpuBuild, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    folder = tmp_path_factory.mktemp("smoke")
    report = folder / "report.json"
    shutil.copyfile(cpu_build.report_path, report)
    result = build_py("test", "--tag", RELEASE, "--only", CPU_GLOB, "--report", str(report), timeout=900)
    return result, {**json.loads(report.read_text()), "_path": str(report)}
