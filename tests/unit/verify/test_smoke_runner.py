"""How the smoke runner asks for GPUs and reads them, and a suite that hangs.

The engine's answers are tests/unit/fake_engine.py's (a refused GPU request is what this machine's engine says; an
nvidia-smi error is what a host with a broken driver says); the real engine's refusal is checked in
tests/integration/verify/test_smoke.py.
"""

from __future__ import annotations

import http.server
import json
import signal
import textwrap
import threading
from pathlib import Path

import pytest

from torchimages.containers import Containers
from torchimages.verify import bench
from torchimages.verify.smoke import SmokeRunner, run_pytest

from ..conftest import AnsweringHandler
from ..fake_engine import REFUSED, FakeEngine


def test_an_engine_without_the_toolkit_is_asked_once_then_gets_containers_without_gpus() -> None:
    engine = FakeEngine(refuse_gpus=True)
    runner = Containers(engine.engine)
    assert runner.start("img") == "c2" and runner.start("img") == "c3"
    assert [bool(c["device_requests"]) for c in engine.created] == [True, False, False]
    assert engine.removed == ["c1"] and runner.gpu_request is False and runner.started == ["c2", "c3"]
    assert REFUSED in runner.gpu_note and "no NVIDIA container toolkit" in runner.gpu_note
    assert runner.gpus("c2") == (0, None)
    runner.remove_all()
    assert engine.removed == ["c1", "c2", "c3"] and runner.started == []


def test_gpus_are_requested_without_an_nvidia_runtime_and_counted_from_nvidia_smi() -> None:
    engine = FakeEngine(refuse_gpus=False, smi=(0, b"GPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: GPU-2)\n"))
    runner = Containers(engine.engine)
    container = runner.start("img")
    assert engine.created[0]["device_requests"] and runner.gpu_request is True
    assert runner.gpus(container) == (2, None)


def test_an_nvidia_smi_error_is_an_error_not_zero_gpus() -> None:
    failure = b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    runner = Containers(FakeEngine(refuse_gpus=False, smi=(9, failure)).engine)
    container = runner.start("img")
    count, error = runner.gpus(container)
    assert count == 0 and error and "nvidia-smi failed in the container" in error and "couldn't communicate" in error


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["terminal", "background-job"])
def test_a_hanging_suite_keeps_the_results_of_the_checks_before_it(tmp_path: Path, sigint: signal.Handlers) -> None:
    """Also when the runner was started with SIGINT ignored, as a script's background job is (`build.py ... &`)."""
    suite = tmp_path / "test_hang.py"
    suite.write_text(textwrap.dedent("""
        import time

        def test_first():
            pass

        def test_hangs():
            time.sleep(600)

        def test_never_reached():
            pass
    """))
    junit = tmp_path / "junit.xml"
    # -v, as the runner passes it: pytest names each check as it starts, so the one that hung is named
    arguments = [str(suite), f"--junitxml={junit}", "-p", "no:cacheprovider", "-v"]
    previous = signal.signal(signal.SIGINT, sigint)  # what the runner's pytest inherits
    try:
        checks = run_pytest(arguments, junit, budget=5, cwd=tmp_path, grace=30)
    finally:
        signal.signal(signal.SIGINT, previous)
    outcomes = {c.name.split("::")[-1]: c.outcome for c in checks}
    assert outcomes.get("test_first") == "passed", checks
    assert outcomes.get("budget") == "failed"
    budget = next(c for c in checks if c.name == "suite::budget")
    assert "ran past its 5 s budget" in budget.message and "test_hangs" in budget.message, budget.message
    assert "test_never_reached" not in outcomes


RESULT = b'{"device": "cpu", "torch": "2.13.0", "rows": [], "note": ""}\n'


def test_the_bench_reads_its_result_from_stdout_only() -> None:
    engine = FakeEngine(refuse_gpus=True, smi=(0, RESULT))
    engine.stderr = b'{"warning": "a library printed JSON-looking text on stderr"}\n'
    result = bench.in_image(SmokeRunner(engine=engine.engine), "img", 0.1)
    assert result == {"device": "cpu", "torch": "2.13.0", "rows": [], "note": ""}
    assert engine.removed[-1] == "c2", "the container outlived the benchmark"


def test_a_failing_image_is_an_error_result_not_a_traceback() -> None:
    engine = FakeEngine(refuse_gpus=True, smi=(1, b""))
    engine.stderr = b"Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n"
    result = bench.in_image(SmokeRunner(engine=engine.engine), "img", 0.1)
    assert result == {"error": "the benchmark exited 1: Traceback (most recent call last): | RuntimeError: CUDA error: "
                               "out of memory"}
    assert bench.parse_result(124, "", "")["error"].startswith("the benchmark timed out")
    assert "printed no result" in bench.parse_result(0, "not json\n", "")["error"]


ROW = {"case": "matmul", "a": "TF32 off", "b": "TF32 on", "a_per_s": 1.0, "b_per_s": 2.0, "speedup": 2.0, "unit": "x"}


@pytest.mark.parametrize("printed", [
    "[1, 2]", "{}", '{"device": "cpu", "torch": "2.13.0", "rows": {}}', "[" * 100_000 + "]" * 100_000,
    json.dumps({"device": "cpu", "torch": "2.13.0", "rows": [{**ROW, "speedup": "fast"}]}),
    json.dumps({"device": "cpu", "torch": "2.13.0", "rows": [{**ROW, "a": None}]}),
    json.dumps({"device": "cpu", "torch": "2.13.0", "rows": [{**ROW, "b_per_s": float("nan")}]}),
    json.dumps({"device": 7, "torch": "2.13.0", "rows": []}),
], ids=["list", "empty", "rows-object", "nested", "speedup-text", "name-null", "nan", "device-number"])
def test_a_bench_answer_outside_its_shape_is_an_error_result(printed: str) -> None:
    """The benchmark's last line is the image's answer: only its shape (device, torch, rows of names and numbers) is
    printed, gated and recorded; anything else is the image's error, never a traceback in the table or the gate."""
    result = bench.parse_result(0, f"a library's line\n{printed}\n", "")
    assert set(result) == {"error"} and "the benchmark printed no result" in result["error"], result
    good = {"device": "cpu", "torch": "2.13.0", "rows": [ROW], "note": ""}
    assert bench.parse_result(0, json.dumps(good), "") == good


def test_a_passing_check_carries_its_note_into_the_results(tmp_path: Path) -> None:
    suite = tmp_path / "test_note.py"
    suite.write_text(textwrap.dedent("""
        def test_one_gpu(request):
            request.node.user_properties.append(("note", "one GPU: no NCCL transport was used"))
    """))
    junit = tmp_path / "junit.xml"
    arguments = [str(suite), f"--junitxml={junit}", "-p", "no:cacheprovider", "-q", "-o", "junit_family=xunit2"]
    [check] = run_pytest(arguments, junit, budget=120, cwd=tmp_path)
    assert (check.outcome, check.message) == ("passed", "one GPU: no NCCL transport was used")


def test_an_image_of_another_platform_than_the_engines_is_tested_as_emulated() -> None:
    """The facts say whether the container runs under the engine's emulator: the suite leaves torch.compile's C++
    build to a runner of the platform then (tests/smoke/test_compute.py)."""
    from torchimages.verify.smoke import Target

    facts = {}
    for engine_arch, platform in (("amd64", "linux/arm64"), ("amd64", "linux/amd64"), ("arm64", "linux/arm64")):
        engine = FakeEngine(arch=engine_arch, images={"img": {"Id": "sha256:" + "a" * 64, "Config": {}}})
        runner = SmokeRunner(engine=engine.engine)
        target = Target("img", "img", "base", "cuda", {"platform": platform})
        facts[(engine_arch, platform)] = runner._start(target, Path("/nonexistent"))["emulated"]
    assert facts == {("amd64", "linux/arm64"): True, ("amd64", "linux/amd64"): False, ("arm64", "linux/arm64"): False}


def test_a_service_of_an_emulated_image_is_given_longer_to_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An arm64 sshd under the emulator missed 30 s on two busy cores (the test session's): the runner waits longer
    for the services of an image of another platform than the engine's, and as long as before for its own."""
    from torchimages.verify import smoke

    waited, patience = {}, {}
    monkeypatch.setattr(smoke, "wait_ssh", lambda port, timeout, containers, container: waited.setdefault(
        platform, timeout))
    for platform in ("linux/arm64", "linux/amd64"):
        engine = FakeEngine(arch="amd64", images={"img": {"Id": "sha256:" + "a" * 64, "Config": {}}})
        target = smoke.Target("img", "img", "ssh", "cuda", {"platform": platform})
        (tmp_path / platform.replace("/", "-")).mkdir()
        facts = smoke.SmokeRunner(engine=engine.engine)._start(target, tmp_path / platform.replace("/", "-"))
        patience[platform] = facts["patience"]
    assert waited == {"linux/arm64": 180.0, "linux/amd64": 30.0}
    assert patience == {"linux/arm64": 6, "linux/amd64": 1}  # the suite's own time limits (tests/smoke/conftest.py)


BOMB = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">' + "".join(
    f'<!ENTITY {chr(98 + n)} "{("&" + chr(97 + n) + ";") * 10}">' for n in range(9)) + ']><testsuite><testcase name="&j;"/>'
    "</testsuite>")


@pytest.mark.parametrize("written", ['<testsuite><testcase name="x"', "not xml", BOMB, ""],
                         ids=["truncated", "text", "entity-bomb", "empty"])
def test_a_results_file_that_is_no_junit_xml_is_an_error_of_the_suite(tmp_path: Path, written: str) -> None:
    """pytest's junit file is read back as input (a suite killed while writing it leaves half a file): what cannot be
    read is the suite's error, which the runner records as the image's result, never a traceback."""
    from torchimages.verify.smoke import parse_junit

    junit = tmp_path / "junit.xml"
    junit.write_text(written)
    with pytest.raises(RuntimeError, match=r"the suite's results \(junit.xml\) could not be read"):
        parse_junit(junit)


class Jupyter(AnsweringHandler):
    """A server on Jupyter's port whose /api answers `status` (Jupyter's own answers 200 once it serves)."""

    status = 500

    def do_GET(self) -> None:
        self.answer(Jupyter.status, b"<html>\x1b[2J</html>", {"Content-Type": "text/html"})


class Stopped:
    """The container stand-in: running, its log a line the error carries."""

    def check_running(self, _container: str) -> None:
        return None

    def logs(self, _container: str) -> str:
        return "jupyter: starting"


@pytest.mark.parametrize("status", [500, 403, 404])
def test_a_jupyter_port_that_answers_an_error_is_not_serving(monkeypatch: pytest.MonkeyPatch, status: int) -> None:
    """/api's answer is the server's word that it serves: an error answer (a proxy's 500, a 403 before the token is
    set up) is waited past and ends in the wait's error with the container's log, never taken for Jupyter."""
    from torchimages.verify import smoke

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jupyter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/api"
    try:
        monkeypatch.setattr(Jupyter, "status", status)
        with pytest.raises(RuntimeError, match="did not answer within 1 s; container log:\njupyter: starting"):
            smoke.wait_http(url, 1.0, Stopped(), "c1")  # type: ignore[arg-type]
        monkeypatch.setattr(Jupyter, "status", 200)
        smoke.wait_http(url, 5.0, Stopped(), "c1")  # type: ignore[arg-type]
    finally:
        server.shutdown()
