"""The GPU-readiness probe's parts that need no image: finding CUDA libraries and decoding their versions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "smoke" / "probes" / "gpu_ready.py"
spec = importlib.util.spec_from_file_location("gpu_ready", PROBE)
gpu_ready = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_ready)


@pytest.mark.parametrize(("code", "version"), [(8902, "8.9.2"), (8700, "8.7.0"), (8600, "8.6.0"), (90100, "9.1.0"), (91002, "9.10.2"),
                                               (92000, "9.20.0"), (90701, "9.7.1")])
def test_cudnn_versions_decode_for_8_and_9(code: int, version: str) -> None:
    assert gpu_ready.decode_cudnn(code) == version


@pytest.mark.parametrize(("code", "version"), [(22005, "2.20.5"), (21903, "2.19.3"), (2804, "2.8.4")])
def test_nccl_versions_decode_before_and_after_2_9(code: int, version: str) -> None:
    assert gpu_ready.decode_nccl(code) == version


def test_libraries_are_found_once_per_real_file_and_driver_compat_is_skipped(tmp_path: Path) -> None:
    wheel = tmp_path / "opt/venv/site-packages/nvidia/cudnn/lib"
    base = tmp_path / "usr/local/cuda-12.1/targets/lib"
    compat = tmp_path / "usr/local/cuda-12.1/compat"
    for folder in (wheel, base, compat):
        folder.mkdir(parents=True)
    (wheel / "libcudnn.so.8").write_bytes(b"x")
    (wheel / "libcudnn.so").symlink_to("libcudnn.so.8")  # a link is the same copy
    (wheel / "libcudnn_ops_infer.so.8").write_bytes(b"x")
    (base / "libcudnn.so.8.9.7").write_bytes(b"x")  # a second cuDNN: must show as a second copy
    (base / "libcublasLt.so.12").write_bytes(b"x")
    (base / "libcublas_static.a").write_bytes(b"x")  # not a shared library
    (compat / "libcuda.so.1").write_bytes(b"x")  # the driver, not a CUDA library of the image
    (compat / "libnvrtc.so.12").write_bytes(b"x")  # under compat/: skipped
    found = gpu_ready.find_libraries((str(tmp_path / "opt"), str(tmp_path / "usr")))
    assert set(found) == {"libcudnn", "libcudnn_ops_infer", "libcublasLt"}
    assert len(found["libcudnn"]) == 2 and len(found["libcublasLt"]) == 1
