"""The GPU probes' decisions, run here without a GPU.

The arch rule and the fp32 switch are plain functions (tests/smoke/probes/gpucheck.py); the probe scripts
themselves run against a stub `torch` package that answers as a GPU build on a given GPU would.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from ...smoke.probes import gpucheck

PROBES = Path(__file__).resolve().parents[2] / "smoke" / "probes"  # tests/smoke/probes

CU121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]


@pytest.mark.parametrize(("arch_list", "capability", "covered"), [
    (CU121, (8, 9), True),     # L4, L40S, RTX 4090: sm_86 cubins run on sm_89
    (CU121, (9, 0), True),     # H100, H200: exact
    (CU121, (10, 0), False),   # B200 needs sm_100 or PTX <= 10.0
    (CU128, (10, 3), True),    # B300: sm_100 runs on sm_103
    (CU128, (12, 1), True),    # GB10 (DGX Spark): sm_120 runs on sm_121
    (CU128, (7, 0), False),    # V100 with a build that dropped sm_70
    (["sm_80", "compute_80"], (9, 0), True),   # PTX is compiled by the driver for newer GPUs
    (["sm_90a", "sm_100f"], (9, 0), True),     # suffixes parse ('compute_90a' used to crash int())
    (["compute_90a"], (9, 0), True),
    (["sm_86"], (8, 0), False),                # a higher minor never runs on a lower one
    (["sm_90"], (8, 9), False),
    (["garbage", ""], (8, 0), False),
])
def test_arch_coverage(arch_list: list[str], capability: tuple[int, int], covered: bool) -> None:
    assert gpucheck.covers(arch_list, capability) is covered


def test_fp32_is_made_exact_through_the_new_api_where_it_exists() -> None:
    new = SimpleNamespace(backends=SimpleNamespace(cudnn=SimpleNamespace(conv=SimpleNamespace(fp32_precision="tf32"),
                                                                         allow_tf32=True),
                                                   cuda=SimpleNamespace(matmul=SimpleNamespace(fp32_precision="tf32",
                                                                                               allow_tf32=True))))
    assert gpucheck.exact_fp32(new) == "fp32_precision"
    assert new.backends.cudnn.conv.fp32_precision == "ieee" and new.backends.cuda.matmul.fp32_precision == "ieee"
    old = SimpleNamespace(backends=SimpleNamespace(cudnn=SimpleNamespace(allow_tf32=True),
                                                   cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True))))
    assert gpucheck.exact_fp32(old) == "allow_tf32"
    assert old.backends.cudnn.allow_tf32 is False and old.backends.cuda.matmul.allow_tf32 is False


FAKE_TORCH = """
import os
float32 = "float32"
class _Tensor:
    def __init__(self, n): self.n = n
    def __mul__(self, k): return self
    def sum(self): return self
    def item(self): return float(self.n * (self.n - 1))
class cuda:
    @staticmethod
    def device_count(): return 1
    @staticmethod
    def is_available(): return True
    @staticmethod
    def get_arch_list(): return os.environ["FAKE_ARCHS"].split(",")
    @staticmethod
    def get_device_capability(index): return tuple(int(x) for x in os.environ["FAKE_CAPABILITY"].split("."))
    @staticmethod
    def get_device_name(index): return "Fake GPU"
def arange(n, device=None, dtype=None):
    if os.environ.get("FAKE_KERNEL_ERROR"):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device\\nmore")
    return _Tensor(n)
"""


def run_gpu_probe(tmp_path: Path, archs: list[str], capability: str, kernel_error: bool) -> dict:
    (tmp_path / "torch").mkdir(exist_ok=True)
    (tmp_path / "torch" / "__init__.py").write_text(textwrap.dedent(FAKE_TORCH))
    env = {"PYTHONPATH": str(tmp_path), "FAKE_ARCHS": ",".join(archs), "FAKE_CAPABILITY": capability}
    if kernel_error:
        env["FAKE_KERNEL_ERROR"] = "1"
    completed = subprocess.run([sys.executable, str(PROBES / "gpu.py")], capture_output=True, text=True, env=env,
                               timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_the_probe_reports_a_missing_kernel_instead_of_crashing(tmp_path: Path) -> None:
    result = run_gpu_probe(tmp_path, CU121, "10.0", kernel_error=True)
    assert result["covered"] is False
    assert result["kernel_error"] == "CUDA error: no kernel image is available for execution on the device"
    assert "kernel_sum" not in result


def test_the_probe_on_a_covered_gpu_sums(tmp_path: Path) -> None:
    result = run_gpu_probe(tmp_path, CU121, "8.9", kernel_error=False)
    assert result["covered"] is True and "kernel_error" not in result
    assert result["kernel_sum"] == result["expected_sum"]


def test_compile_preflight_names_the_packages_to_install(tmp_path: Path) -> None:
    include = tmp_path / "include"
    include.mkdir()
    nothing = {}.get
    both = gpucheck.compile_preflight("cuda", str(include), lambda name: None, {})
    assert any("install the Python headers (python3-dev" in p for p in both) and any("install gcc" in p for p in both)
    assert gpucheck.compile_preflight("cpu", str(include), lambda name: None, {})[1].endswith("install g++")
    (include / "Python.h").write_text("")
    assert gpucheck.compile_preflight("cpu", str(include), {"g++": "/usr/bin/g++"}.get, {}) == []
    assert gpucheck.compile_preflight("cuda", str(include), nothing, {"CC": "/opt/cc"}) == []
    assert gpucheck.compile_preflight("cuda", str(include), {"g++": "/usr/bin/g++"}.get, {}) == ["no C compiler (gcc, cc "
                                                                                                 "or clang; CC unset): install gcc"]


SMI = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb)\nGPU 2: NVIDIA H200 (UUID: GPU-cccc)\n"


@pytest.mark.parametrize(("visible", "count"), [(None, 3), ("0", 1), ("2,0", 2), ("GPU-bbbb", 1), ("0,0", 1),
                                                ("1,7,2", 1), ("", 0), ("-1", 0), ("GPU-bb", 1)])
def test_visible_gpus_follow_cuda_visible_devices(visible: str | None, count: int) -> None:
    assert gpucheck.visible_gpus(SMI, visible) == count


def load_with_fake_torch(path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> object:
    """Import a probe as a spawned worker (or a test) would, with a stand-in torch that records what is set."""
    fake = SimpleNamespace(backends=SimpleNamespace(cudnn=SimpleNamespace(allow_tf32=True, benchmark=True),
                                                    cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True))),
                           nn=SimpleNamespace(Module=object))
    fake.utils = SimpleNamespace(data=SimpleNamespace(DataLoader=None, Dataset=object))
    for module, value in (("torch", fake), ("torch.nn", fake.nn), ("torch.utils", fake.utils),
                          ("torch.utils.data", fake.utils.data)):
        monkeypatch.setitem(sys.modules, module, value)
    monkeypatch.syspath_prepend(str(path.parent))
    loaded = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module, fake


def test_the_bench_baseline_is_fp32_and_says_when_an_override_forces_tf32(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["train_bench.py"])
    bench, fake = load_with_fake_torch(PROBES.parents[2] / "benchmarks" / "probes" / "train_bench.py", monkeypatch,
                                       "train_bench")
    bench.exact_fp32()
    assert fake.backends.cuda.matmul.allow_tf32 is False and fake.backends.cudnn.allow_tf32 is False
    monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", raising=False)
    assert bench.tf32_note() == ""
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    assert "ran with TF32" in bench.tf32_note()


def test_importing_the_dataloader_probe_starts_no_loader(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Workers started by spawn or forkserver (Python 3.14's default) import the probe: it must not run again."""
    probe, _ = load_with_fake_torch(PROBES / "dataloader.py", monkeypatch, "dataloader_worker")
    assert capsys.readouterr().out == "" and callable(probe.main)


def test_nccl_binds_the_device_before_the_process_group() -> None:
    source = (PROBES / "nccl.py").read_text()
    assert source.index("torch.cuda.set_device(") < source.index("dist.init_process_group(")


@pytest.mark.parametrize(("arch_list", "claimed", "missing"), [
    (CU121, ["5.0", "8.0", "8.6", "8.9", "9.0"], []),          # 8.9 runs the sm_86 cubin
    (CU121, ["10.0", "12.0"], ["10.0", "12.0"]),               # no cubin of major 10 or 12, no PTX
    (CU128, ["7.5", "12.0", "12.1"], []),                      # sm_120 runs on 12.1, compute_120 too
    (CU128, ["7.0"], ["7.0"]),                                 # below every cubin and PTX
    (["sm_80", "compute_80"], ["9.0", "10.0"], []),            # PTX compiled by the driver for newer GPUs
    (["sm_80"], ["9.0", "8.x"], ["9.0", "8.x"]),               # a cubin never runs on a newer major; junk is missing
])
def test_every_claimed_generation_needs_a_cubin_or_ptx(arch_list: list[str], claimed: list[str],
                                                        missing: list[str]) -> None:
    assert gpucheck.uncovered(arch_list, claimed) == missing


@pytest.mark.parametrize(("value", "capabilities"), [
    ("5.2 6.0 6.1 7.0 7.2 7.5 8.0 8.6 8.7 9.0+PTX", ["5.2", "6.0", "6.1", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7",
                                                   "9.0"]),  # NGC's form (spaces, +PTX on the newest)
    ("7.5;8.0;12.0+ptx", ["7.5", "8.0", "12.0"]),              # the semicolon form torch's extension builder takes
    ("9.0a 10.0f", ["9.0", "10.0"]),                            # arch- and family-specific suffixes name 9.0, 10.0
    ("Auto", ["Auto"]),                                         # kept, so the check reports it as uncovered
    (None, []),
])
def test_a_declared_arch_list_names_its_capabilities(value: str | None, capabilities: list[str]) -> None:
    assert gpucheck.declared_archs(value) == capabilities


def test_what_an_ngc_base_declares_is_checked_against_torchs_kernels() -> None:
    ngc_2310 = gpucheck.declared_archs("5.2 6.0 6.1 7.0 7.2 7.5 8.0 8.6 8.7 9.0+PTX")
    assert gpucheck.uncovered(CU121, ngc_2310) == []  # the NGC-shaped stand-in (cu121 torch) covers NGC's claim
    assert gpucheck.uncovered(CU121, gpucheck.declared_archs("8.0 9.0 12.0+PTX")) == ["12.0"]


WHEELS = "/opt/venv/lib/python3.11/site-packages"


@pytest.mark.parametrize(("libraries", "twice"), [
    ({"libcudnn": [f"{WHEELS}/nvidia/cudnn/lib/libcudnn.so.8"]}, []),
    # the nvidia/cuda base's cudart beside the wheel's (cu121 on nvidia/cuda:12.1.1-base)
    ({"libcudart": ["/usr/local/cuda-12.1/targets/x86_64-linux/lib/libcudart.so.12.1.105",
                    f"{WHEELS}/nvidia/cuda_runtime/lib/libcudart.so.12"]}, []),
    # triton's own cupti files beside the cu13 wheel set's (torch 2.14.0 cu130, triton 3.8: as the probe found them)
    ({"libcupti": [f"{WHEELS}/nvidia/cu13/lib/libcupti.so.13",
                   f"{WHEELS}/triton/backends/nvidia/lib/cupti-blackwell/libcupti.so.13",
                   f"{WHEELS}/triton/backends/nvidia/lib/cupti/libcupti.so.12",
                   f"{WHEELS}/triton/backends/nvidia/lib/cupti/libcupti.so.2025.1.1"]}, []),
    # a second CUDA stack: the toolkit's cuBLAS beside the wheel's
    ({"libcublas": ["/usr/local/cuda-12.1/lib64/libcublas.so.12.1.3.1", f"{WHEELS}/nvidia/cublas/lib/libcublas.so.12"]},
     ["libcublas"]),
    # an expected place excuses only its own library, and only beside a copy elsewhere
    ({"libcublas": [f"{WHEELS}/triton/backends/nvidia/lib/libcublas.so.13", f"{WHEELS}/nvidia/cu13/lib/libcublas.so.13"]},
     ["libcublas"]),
    ({"libcupti": [f"{WHEELS}/nvidia/cu13/lib/libcupti.so.13", "/opt/other/libcupti.so.13",
                   f"{WHEELS}/triton/backends/nvidia/lib/cupti/libcupti.so.13"]}, ["libcupti"]),
    ({"libcudart": ["/usr/local/cuda-12.1/lib64/libcudart.so.12", "/usr/local/cuda-12.4/lib64/libcudart.so.12"]},
     ["libcudart"]),
])
def test_one_copy_of_each_library_except_the_expected_ones(libraries: dict, twice: list[str]) -> None:
    assert sorted(gpucheck.extra_copies(libraries)) == twice



def fat_binary(entries: list[tuple[int, int]], payload: int = 24) -> bytes:
    """One fat binary as nvcc lays it out: its header, then per entry (kind, sm) a 64-byte header and a payload."""
    import struct

    body = b"".join(struct.pack("<HHIQ", kind, 0, 64, payload) + bytes(12) + struct.pack("<I", sm) + bytes(32)
                    + bytes(payload) for kind, sm in entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf_with(sections: dict[bytes, bytes]) -> bytes:
    """A minimal 64-bit little-endian ELF file holding `sections` and their name table."""
    import struct

    names = b"\0" + b"".join(name + b"\0" for name in sections) + b".shstrtab\0"
    data, offsets = bytearray(64), []
    for content in [*sections.values(), names]:
        offsets.append(len(data))
        data += content
    table = len(data)
    data += bytes(64)  # the null section
    at = 1
    for (name, content), offset in zip([*sections.items(), (b".shstrtab", names)], offsets, strict=True):
        data += struct.pack("<IIQQQQIIQQ", at, 1, 0, 0, offset, len(content), 0, 0, 1, 0)
        at += len(name) + 1
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, table, 0, 64, 0, 0,
                                                             64, len(sections) + 2, len(sections) + 1)
    return header + bytes(data[64:])


def test_the_fat_binary_of_an_extension_names_each_sass_and_ptx_it_carries() -> None:
    blob = fat_binary([(2, 75), (2, 80), (2, 120), (1, 120)]) + bytes(8) + fat_binary([(2, 90)])
    shared_object = elf_with({b".text": bytes(40), b".nv_fatbin": blob})
    assert gpucheck.elf_section(shared_object) == blob
    assert gpucheck.fatbin_archs(gpucheck.elf_section(shared_object)) == [
        ("ptx", 120), ("sass", 75), ("sass", 80), ("sass", 90), ("sass", 120)]
    assert gpucheck.elf_section(elf_with({b".text": bytes(8)})) == b"", "no GPU code: no section"
    with pytest.raises(ValueError):
        gpucheck.elf_section(b"MZ" + bytes(100))


@pytest.mark.parametrize(("value", "code"), [
    ("7.5;8.0;12.0+PTX", [("ptx", 120), ("sass", 75), ("sass", 80), ("sass", 120)]),
    ("8.0 9.0a", [("sass", 80), ("sass", 90)]),
    ("8.0", [("sass", 80)]),
    ("Auto", None),
    ("", []),
])
def test_an_arch_list_asks_sass_of_each_generation_and_ptx_where_marked(value: str, code: list | None) -> None:
    assert gpucheck.arch_list_code(value) == code
