"""The smoke suite: testinfra checks against one running container (or, for selfcheck, this host).

The runner (`python build.py test`) starts the container the way users run it, writes what the
image must hold into a facts file and calls pytest with `--hosts=docker://ID --facts FILE`.
Every command in the container runs under `timeout`, so a hung check fails instead of hanging.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

NO_GPU = "no GPU given to the container"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--facts", required=True, help="JSON file: the image's expected versions and how it runs")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`server_name` runs a check once per way the runner started the module's SERVICE (facts[SERVICE])."""
    if "server_name" in metafunc.fixturenames:
        facts = json.loads(Path(metafunc.config.getoption("--facts")).read_text())
        metafunc.parametrize("server_name", list(facts[metafunc.module.SERVICE]))


@dataclass(frozen=True)
class Facts:
    raw: dict[str, Any]

    @property
    def emulated(self) -> bool:
        """The container runs under emulation (an image of another platform than the engine's): checks that cost
        minutes there, or that only the engine's own platform can answer, leave it to a runner of the platform."""
        return bool(self.raw.get("emulated"))

    def seconds(self, native: float) -> int:
        """A time limit set for the engine's own platform, stretched by the runner's patience under emulation (every
        process there is about ten times slower, and shares the cores with what runs beside it)."""
        return round(native * self.raw.get("patience", 1))

    def __getattr__(self, name: str) -> Any:
        try:
            return self.raw[name]
        except KeyError:
            raise AttributeError(name) from None


@pytest.fixture(scope="session")
def facts(request: pytest.FixtureRequest) -> Facts:
    return Facts(json.loads(Path(request.config.getoption("--facts")).read_text()))


def run(host: Any, command: str, timeout: int = 120) -> Any:
    """Run `command` in the container under `timeout`; return testinfra's CommandResult."""
    return host.run(f"timeout {timeout} {command}")


def probe(host: Any, facts: Facts, name: str, *args: str, timeout: int = 120) -> dict[str, Any]:
    """Run a probe script in the container's Python and parse its JSON; fail with its output if it broke."""
    python = facts.raw.get("python", "python")  # selfcheck passes the host's interpreter
    command = " ".join([shlex.quote(python), shlex.quote(f"{facts.probes}/{name}.py"), *map(shlex.quote, args)])
    timeout = facts.seconds(timeout)
    result = run(host, command, timeout)
    if result.rc != 0:
        pytest.fail(f"probe {name} failed (exit {result.rc}; 124 means it hit its {timeout} s timeout):\n"
                    f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


NEEDS_GPU, GPU_READY = "needs-gpu", "gpu-ready"  # the report's tiers: proven only on a GPU, or without one


def tier(request: pytest.FixtureRequest, name: str) -> None:
    """Record the check's tier in the JUnit XML the runner reads."""
    request.node.user_properties.append(("tier", name))


def note(request: pytest.FixtureRequest, text: str) -> None:
    """A remark on a check that passed (what it could not prove here), carried into the report."""
    request.node.user_properties.append(("note", text))


@pytest.fixture
def gpu(request: pytest.FixtureRequest, facts: Facts) -> int:
    """The GPU count given to the container; skips (or, with --require-gpu, fails) when there is none."""
    tier(request, NEEDS_GPU)
    if facts.raw.get("gpu_error"):  # GPUs were requested and the driver answered with an error: never a skip
        pytest.fail(f"{facts.raw['gpu_error']}; check the host with nvidia-smi, and the NVIDIA container toolkit")
    if facts.gpus:
        if facts.flavor == "cpu":
            pytest.skip("a cpu image holds a CPU build of torch: the GPU is not for it")
        return facts.gpus
    if facts.require_gpu:
        pytest.fail(f"{NO_GPU}, and --require-gpu was given: {facts.raw.get('gpu_note') or 'the host has no GPU'}; run "
                    "on a GPU machine with the NVIDIA driver and container toolkit")
    pytest.skip(NO_GPU)
