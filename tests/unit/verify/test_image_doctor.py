"""image-doctor's rules (the script shipped in every image), checked as plain functions."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from torchimages.build import render
from torchimages.input import matrix, specs

from ..conftest import ROOT


def doctor() -> ModuleType:
    path = ROOT / "templates" / "files" / "image-doctor"
    loader = importlib.machinery.SourceFileLoader("image_doctor", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("image_doctor", loader))
    loader.exec_module(module)
    return module


IMAGE = {"flavor": "cuda", "cuda": "12.8", "min_driver": "570.124.06", "min_driver_minor_compat": "525"}


def test_new_enough_driver_is_fine() -> None:
    assert doctor().host_problems("575.57.08", IMAGE, [{"name": "NVIDIA GeForce RTX 4090"}], False, platform="linux/amd64") == []


def test_old_driver_within_minor_version_compatibility() -> None:
    [problem] = doctor().host_problems("535.104.05", IMAGE, [{"name": "NVIDIA GeForce RTX 4090"}], False, platform="linux/amd64")
    assert "runs through CUDA minor-version compatibility" in problem and "upgrade the host driver to 570.124.06" in problem


def test_driver_too_old_on_a_consumer_gpu() -> None:
    image = dict(IMAGE, cuda="13.0", min_driver="580.95.05", min_driver_minor_compat="580")
    [problem] = doctor().host_problems("535.104.05", image, [{"name": "NVIDIA GeForce RTX 4090"}], True, platform="linux/amd64")
    assert problem.startswith("driver 535 is older than the 580 this image needs: upgrade the host's NVIDIA driver")


def test_forward_compatibility_only_on_data_center_gpus() -> None:
    image = dict(IMAGE, cuda="13.0", min_driver="580.95.05", min_driver_minor_compat="580")
    [problem] = doctor().host_problems("535.104.05", image, [{"name": "NVIDIA H100 80GB HBM3"}], True, platform="linux/amd64")
    assert "on this data-center GPU the image's CUDA forward-compatibility package may still run it" in problem
    [without_package] = doctor().host_problems("535.104.05", image, [{"name": "NVIDIA H100 80GB HBM3"}], False, platform="linux/amd64")
    assert without_package.startswith("driver 535 is older than the 580 this image needs")


def rendered_image_json(name: str) -> dict:
    """The image.json that render writes into an entry of matrix.yaml (what image-doctor reads in the image)."""
    plan = specs.resolve(matrix.load(ROOT / "matrix.yaml"))
    spec = next(s for s in plan.specs if s.name.startswith(name))
    return render.image_facts(spec)


def test_cpu_image_has_no_gpu_or_driver_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    module = doctor()
    monkeypatch.setattr(module, "shm_megabytes", lambda: 16384)
    monkeypatch.setattr(module, "nvidia_smi", lambda: [])
    cpu, cuda = rendered_image_json("torch2.13.0-cpu"), rendered_image_json("torch2.3.1-cu121")
    monkeypatch.setattr(module, "proc_driver", lambda: None)  # no GPU given to the container
    assert module.startup_problems(cpu)[0] == []
    assert module.startup_problems(cuda)[0] == ["no GPU is visible: start the container with --gpus all"]
    monkeypatch.setattr(module, "proc_driver", lambda: "390.48")  # a host with an ancient driver, its GPU given
    monkeypatch.setattr(module, "gpu_devices", lambda: ["nvidia0"])
    assert module.startup_problems(cpu)[0] == []
    [too_old] = module.startup_problems(cuda)[0]
    assert too_old.startswith("driver 390 is older than the 530 this image needs"), too_old


def fake_nvidia_smi(folder: Path, script: str) -> Path:
    folder.mkdir(exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + script)
    smi.chmod(0o755)
    return folder


def test_a_readable_proc_driver_without_gpu_devices_is_no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without --gpus the container still reads /proc/driver/nvidia/version: that is not a GPU."""
    module = doctor()
    monkeypatch.setattr(module, "shm_megabytes", lambda: 16384)
    monkeypatch.setattr(module, "proc_driver", lambda: "580.95.05")
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", "echo 'No devices were found'; exit 6\n")))
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").write_text("")  # the control device alone is no GPU
    monkeypatch.setenv("TORCHIMAGES_DEV", str(tmp_path / "dev"))
    cuda = rendered_image_json("torch2.3.1-cu121")
    assert "no GPU is visible: start the container with --gpus all" in module.startup_problems(cuda)[0]


def test_gpu_device_files_are_found(tmp_path: Path) -> None:
    for name in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1", "nvidia-caps", "nvidia\u0661"):  # an Arabic-Indic 1
        (tmp_path / name).write_text("")
    assert doctor().gpu_devices(str(tmp_path)) == ["nvidia0", "nvidia1"]


def test_unknown_memory_and_an_old_driver_without_compute_cap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    module = doctor()
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "gb10", "echo 'NVIDIA GB10, 580.95.05, [N/A], 12.1'\n")))
    assert module.nvidia_smi() == [{"name": "NVIDIA GB10", "driver": "580.95.05", "memory_mb": None, "capability": "12.1"}]
    old = ('case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field to query.\'; exit 2;; esac\n'
           "echo 'Tesla V100-SXM2-16GB, 470.82.01, 16160'\n")
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "r470", old)))
    assert module.nvidia_smi() == [{"name": "Tesla V100-SXM2-16GB", "driver": "470.82.01", "memory_mb": 16160,
                                    "capability": None}]


CU130 = {"flavor": "cuda", "torch": "2.14.0", "cuda": "13.0", "cudnn": "9.24.0.43", "nccl": "2.30.7"}
LOADED = {"torch": "2.14.0+cu130", "cuda": "13.0", "cudnn": "9.24.0", "nccl": "2.30.7"}


def test_the_image_own_torch_and_libraries_are_no_problem() -> None:
    assert doctor().runtime_problems(CU130, LOADED) == []
    ngc = {"flavor": "ngc", "torch": "2.11.0a0+a6c236b9fd1", "cuda": "13.2", "cudnn": "9.20.0.48", "nccl": "2.29.7"}
    assert doctor().runtime_problems(ngc, {"torch": "2.11.0a0+a6c236b9fd1", "cuda": "13.2", "cudnn": "9.20.0",
                                           "nccl": "2.29.7"}) == []
    cpu = {"flavor": "cpu", "torch": "2.13.0", "cuda": None, "cudnn": None, "nccl": None}
    assert doctor().runtime_problems(cpu, {"torch": "2.13.0+cpu", "cuda": None, "cudnn": None, "nccl": None}) == []


def test_another_torch_installed_over_the_image_is_named_with_the_fix() -> None:
    """Seen on an H200 host: its own torch 2.11.0+cu130 (cuDNN 9.19.0, NCCL 2.28.9) against the cu130 entry's facts."""
    problems = doctor().runtime_problems(CU130, {"torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": "9.19.0",
                                                 "nccl": "2.28.9"})
    [problem] = problems  # its cuDNN and NCCL come with it: not said again
    assert problem.startswith("torch 2.11.0+cu130 is loaded, not this image's 2.14.0: something installed another")
    assert problem.endswith("reinstall the image's version or start a fresh container")


def test_another_library_first_under_the_images_torch_is_named() -> None:
    problems = doctor().runtime_problems(CU130, {**LOADED, "cudnn": "9.19.0", "nccl": "2.30.7"})
    assert problems == ["cudnn 9.19.0 is loaded, not this image's 9.24.0.43: a library of another version comes first "
                        "(LD_LIBRARY_PATH, a pip install of nvidia-* wheels); reinstall the image's version or start a "
                        "fresh container"]


def test_a_cpu_torch_in_a_cuda_image_is_a_problem() -> None:
    [problem] = doctor().runtime_problems(CU130, {"torch": "2.14.0+cpu", "cuda": None, "cudnn": None, "nccl": None})
    assert problem.startswith("the torch loaded is a CPU build, not this image's CUDA 13.0 build")


def test_the_full_report_counts_what_torch_loaded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    module = doctor()
    image_json = tmp_path / "image.json"
    image_json.write_text(json.dumps(CU130))
    monkeypatch.setattr(module, "IMAGE_JSON", str(image_json))
    monkeypatch.setattr(module, "startup_problems", lambda image: ([], {"gpus": [], "driver": None, "shm_mb": 16384}))
    monkeypatch.setattr(module, "runtime", lambda: {**LOADED, "torch": "2.15.0+cu130", "gpus": [], "settings": {},
                                                    "cuda_available": False})
    assert module.main(["--json"]) == 1
    [problem] = json.loads(capsys.readouterr().out)["problems"]
    assert problem.startswith("torch 2.15.0+cu130 is loaded, not this image's 2.14.0")


# The image as image.json says it, on either platform this test runs on: CUDA 13.0 needs driver 580.
CU130_IMAGE = {"flavor": "cuda", "cuda": "13.0", "min_driver": "580.95.05", "min_driver_minor_compat": "580",
               "platforms": ["linux/amd64", "linux/arm64"],
               "gpu_archs": {"linux/amd64": "7.5 8.0 8.6 9.0 10.0 12.0", "linux/arm64": "8.0 9.0 10.0 12.0"}}


def doctor_at_startup(tmp_path: Path, nvidia_smi_script: str, image_json: str = json.dumps(CU130_IMAGE),
                      *args: str) -> subprocess.CompletedProcess[str]:
    """The real image-doctor --startup (the entrypoint's check, at every container start) as a process, with a
    stand-in nvidia-smi first on PATH, a GPU device given and CU130_IMAGE (or `image_json`) as its image.json."""
    bin_folder = fake_nvidia_smi(tmp_path / "bin", nvidia_smi_script)
    (tmp_path / "dev").mkdir(exist_ok=True)
    (tmp_path / "dev" / "nvidia0").write_text("")
    (tmp_path / "image.json").write_text(image_json)
    env = {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}",
           "TORCHIMAGES_IMAGE_JSON": str(tmp_path / "image.json"), "TORCHIMAGES_DEV": str(tmp_path / "dev")}
    return subprocess.run([sys.executable, str(ROOT / "templates" / "files" / "image-doctor"), *(args or ("--startup",))],
                          env=env, capture_output=True, text=True, errors="replace", timeout=60, check=False)


# (what the stand-in nvidia-smi does, words the warnings hold, words they must not hold)
STAND_INS = {
    "unknown-error": ("echo 'NVIDIA GeForce RTX 4090, [Unknown Error], 24564, [Unknown Error]'",
                      ["nvidia-smi answered '[Unknown Error]' for the driver version: whether this driver runs the "
                       "image's CUDA 13.0 (it needs driver 580.95.05 or newer) is not known",
                       "nvidia-smi answered '[Unknown Error]' for the GPU's compute capability"], ["upgrade"]),
    "insufficient-permissions": ("echo 'NVIDIA GeForce RTX 4090, [Insufficient Permissions], 24564, 8.9'",
                                 ["nvidia-smi answered '[Insufficient Permissions]' for the driver version"],
                                 ["upgrade", "older than"]),
    "not-supported": ("echo 'NVIDIA L4, [Not Supported], [Not Supported], [Not Supported]'",
                      ["answered '[Not Supported]' for the driver version",
                       "answered '[Not Supported]' for the GPU's compute capability"], ["upgrade"]),
    "memory-unknown": ("echo 'NVIDIA L4, 580.95.05, [Unknown Error], [N/A]'",
                       ["nvidia-smi answered '[N/A]' for the GPU's compute capability"], ["driver version"]),
    "garbage": ("echo 'what is a GPU'", [], ["nvidia-smi answered"]),
    "nothing": ("exit 0", [], ["nvidia-smi answered"]),
    "fails": ("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9", [],
              ["nvidia-smi answered"]),
    "huge-line": ("printf '%01000000d\\n' 0", [], ["nvidia-smi answered"]),
    "huge-driver": ("printf 'NVIDIA L4, %01000000d, 23034, 8.9\\n' 0",
                    [f"nvidia-smi answered '{'0' * 60}...' for the driver version"], []),
    "not-utf8-with-escapes": ("printf 'NVIDIA L4, \\377\\033[31m, 23034, 8.9\\n'",
                              ["for the driver version"], ["\x1b"]),
}


@pytest.mark.parametrize("case", STAND_INS, ids=list(STAND_INS))
def test_the_startup_check_names_what_nvidia_smi_answered_and_never_ends_in_a_traceback(tmp_path: Path,
                                                                                        case: str) -> None:
    script, said, unsaid = STAND_INS[case]
    result = doctor_at_startup(tmp_path, script + "\n")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("warning: ") and len(line) < 400 for line in lines), lines
    for words in said:
        assert words in result.stderr, result.stderr
    for words in unsaid:
        assert words not in result.stderr, result.stderr


@pytest.mark.parametrize("image_json", ["[]", '"cuda"', "{", '{"flavor": "cuda", "min_driver": [580], "gpu_archs": 7, '
                                        '"platforms": "linux/amd64", "cuda": {"x": 1}}', '{"flavor": ["cuda"]}'])
def test_a_damaged_image_json_never_stops_a_container_or_prints_a_traceback(tmp_path: Path, image_json: str) -> None:
    """image.json is a file of the image, but one a user can replace (a volume, a later layer): the startup check warns
    in at most one line and exits 0; the full check never ends in a traceback either."""
    smi = "echo 'NVIDIA L4, 580.95.05, 23034, 8.9'\n"
    started = doctor_at_startup(tmp_path, smi, image_json)
    assert started.returncode == 0 and "Traceback" not in started.stderr, started.stderr
    assert len(started.stderr.splitlines()) <= 1, started.stderr
    full = doctor_at_startup(tmp_path, smi, image_json, "--json")
    assert full.returncode in (0, 1, 2) and "Traceback" not in full.stderr, full.stderr


@pytest.mark.parametrize(("text", "driver"), [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build  (dvs-builder@U16)\n", "580.95.05"),
    ("Kernel Module  \u0665\u0668\u0660.95.05\n", None),  # Arabic-Indic digits: no driver any tool prints
    ("Kernel Module  580\n", None),
    ("Kernel Module  580.95.05\x1b[2J; rm -rf /\n", "580.95.05"),
    ("", None),
    (None, None),  # not there, or not readable
])
def test_the_proc_driver_file_gives_a_version_or_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         text: str | None, driver: str | None) -> None:
    """/proc/driver/nvidia/version is the host kernel's word on the driver (readable without --gpus): only the version
    after 'Kernel Module', in ASCII digits, is taken; anything else is no driver."""
    module = doctor()
    version = tmp_path / "version"
    if text is not None:
        version.write_text(text, encoding="utf-8")
    real_open = open
    monkeypatch.setattr(module, "open", lambda path, *a, **k: real_open(version if path.startswith("/proc/") else path,
                                                                          *a, **k), raising=False)
    assert module.proc_driver() == driver


COMPAT_FOLDER = "/usr/local/cuda/compat"


def doctor_on(monkeypatch: pytest.MonkeyPatch, gpus: list[dict], *, compat_folder: bool = False) -> ModuleType:
    """image-doctor in a container that sees `gpus` through nvidia-smi, /dev/shm of 16 GB, and CUDA's
    forward-compatibility package installed or not (/usr/local/cuda/compat, where NGC images carry it)."""
    module = doctor()
    monkeypatch.setattr(module, "shm_megabytes", lambda: 16384)
    monkeypatch.setattr(module, "nvidia_smi", lambda: gpus)
    monkeypatch.setattr(module, "proc_driver", lambda: None)
    monkeypatch.setattr(module, "gpu_devices", lambda: [f"nvidia{n}" for n in range(len(gpus))])
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda path: compat_folder if path == COMPAT_FOLDER else real_isdir(path))
    return module


def test_an_ngc_image_without_a_gpu_says_how_to_give_it_one(monkeypatch: pytest.MonkeyPatch) -> None:
    ngc = rendered_image_json("ngc26.03")
    assert ngc["flavor"] == "ngc"
    assert doctor_on(monkeypatch, []).startup_problems(ngc)[0] == ["no GPU is visible: start the container with --gpus all"]


def test_the_forward_compatibility_package_an_ngc_image_carries_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """An H100 with driver 535 against NGC 26.03's CUDA 13.2 (595 needed): with the package in the image the doctor
    warns that it may still run; without it the driver is too old."""
    ngc = rendered_image_json("ngc26.03")
    h100 = [{"name": "NVIDIA H100 80GB HBM3", "driver": "535.104.05", "memory_mb": 81559, "capability": "9.0"}]
    with_package = doctor_on(monkeypatch, h100, compat_folder=True).startup_problems(ngc)[0]
    assert any("forward-compatibility package may still run it" in problem for problem in with_package), with_package
    without = doctor_on(monkeypatch, h100, compat_folder=False).startup_problems(ngc)[0]
    assert any(problem.startswith("driver 535 is older than the 595 this image needs") for problem in without), without


def test_a_cudnn_or_nccl_of_another_patch_release_is_named() -> None:
    for key, loaded in (("cudnn", "9.24.1"), ("nccl", "2.30.8")):
        [problem] = doctor().runtime_problems(CU130, {**LOADED, key: loaded})
        assert problem.startswith(f"{key} {loaded} is loaded, not this image's {CU130[key]}"), problem
    assert doctor().runtime_problems(CU130, {**LOADED, "cuda": "13.0.2"}) == [], "CUDA is compared by major.minor"
