"""`build.py fit` over a table of real hosts and images, and image-doctor agreeing with it on every case: both apply
templates/files/gpurules.py to what the compat data says of each image (its CUDA's driver, its GPU generations)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from torchimages.input import matrix, specs
from torchimages.verify import fit

from ...buildpy import build_py as run_build_py
from ..conftest import ROOT
from ..release_files import CPU, CU130, REPOSITORY, candidates, two_platform_release
from .test_image_doctor import doctor, fake_nvidia_smi

ENTRIES = [
    {"flavor": "cuda", "torch": "2.3.1", "cuda": "12.1", "python": "3.11"},
    {"flavor": "cuda", "torch": "2.7.1", "cuda": "12.8", "python": "3.11"},
    {"flavor": "cuda", "torch": "2.14.0", "cuda": "13.0", "python": "3.11", "platforms": ["linux/amd64", "linux/arm64"]},
    {"flavor": "cpu", "torch": "2.13.0", "python": "3.11"},
]
CU121, CU128 = "torch2.3.1-cu121-cudnn8.9-py3.11", "torch2.7.1-cu128-cudnn9.7-py3.11"  # CU130: release_files's


@pytest.fixture(scope="module")
def table_matrix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fit") / "matrix.yaml"
    path.write_text(yaml.safe_dump({"registry": "registry.example.com/ml/pytorch", "images": ENTRIES}))
    return path


@pytest.fixture(scope="module")
def plan(table_matrix: Path) -> specs.Plan:
    return specs.resolve(matrix.load(table_matrix))


# (GPU, driver, platform, entry, verdict, words of the reason that decides)
CASES = [
    ("L4", "535.104.05", "linux/amd64", CU121, "runs", "sm_86 kernels run on compute capability 8.9"),
    ("8.9", "535.104.05", "linux/amd64", CU128, "runs", "runs through CUDA minor-version compatibility"),
    ("P100", "575.57.08", "linux/amd64", CU128, "fails", "no kernel for compute capability 6.0"),
    ("P100", "580.95.05", "linux/amd64", CU130, "fails", "no kernel for compute capability 6.0"),
    ("P100", "575.57.08", "linux/amd64", CU121, "runs", "sm_60 kernels run on compute capability 6.0"),
    ("GB10", "580.95.05", "linux/arm64", CU130, "runs", "sm_120 kernels run on compute capability 12.1"),
    ("GB10", "580.95.05", "linux/arm64", CU121, "fails",
     "no linux/arm64 image in this tag (its images are for linux/amd64)"),
    ("8.9", "470.82.01", "linux/amd64", CU121, "fails", "driver 470 is older than the 530 this image needs"),
    ("H100", "570.124.06", "linux/amd64", CU130, "fails", "driver 570 is older than the 580 this image needs"),
    # a GPU newer than every kernel is reached through PTX, which a driver of minor-version compatibility cannot JIT
    # torch 2.14.0's cu130 wheels carry no PTX (measured): nothing reaches a GPU newer than their kernels
    ("13.0", "580.95.05", "linux/amd64", CU130, "fails", "no kernel for compute capability 13.0"),
    ("13.0", "575.57.08", "linux/amd64", CU128, "runs", "the driver compiles compute_120 PTX"),
    ("13.0", "535.104.05", "linux/amd64", CU128, "fails", "minor-version compatibility does not cover PTX"),
    ("13.0", "580.95.05", "linux/arm64", CU130, "fails", "no kernel for compute capability 13.0"),
    ("8.9", "535.104.05", "linux/amd64", "torch2.13.0-cpu-py3.11", "runs", "a CPU image"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in CASES])
def test_fit_and_the_doctor_agree_on_each_case(plan: specs.Plan, case: tuple[str, ...]) -> None:
    gpu, driver, platform, entry, verdict, reason = case
    capability, name = fit.gpu_capability(gpu)
    host = fit.Host(platform, driver, capability, name)
    [found] = [f for f in fit.fits(plan, host) if f.entry == entry]
    assert found.verdict == verdict, found
    assert any(reason in text for _, text in found.reasons), found.reasons
    # The doctor inside that image, on that host (nvidia-smi's name and compute_cap): a problem for every finding that
    # is not plain "runs", and none where fit sees none
    spec = next(s for s in plan.specs if s.name == entry)
    problems = doctor().host_problems(driver, spec.host_facts(), [{"name": name or "", "capability": capability}],
                                      compat_package=False, platform=platform)
    assert problems == [text for kind, text in found.reasons if kind != "runs"], (problems, found.reasons)


def test_gpu_names_are_found_in_nvidia_smi_names_longest_first() -> None:
    assert fit.gpu_capability("NVIDIA H100 80GB HBM3") == ("9.0", "H100")
    assert fit.gpu_capability("NVIDIA L40S") == ("8.9", "L40S")
    assert fit.gpu_capability("NVIDIA GeForce RTX 4090") == ("8.9", "RTX 4090")
    assert fit.gpu_capability("12.1") == ("12.1", None)


def test_the_default_matrix_answers_as_the_issue_types_it() -> None:
    result = run_build_py("fit", "--driver", "535.104.05", "--gpu", "8.9", "--platform", "linux/amd64")
    assert result.returncode == 0, result.stderr
    runs, _, fails = result.stdout.partition("does not run here:")
    assert "torch2.3.1-cu121-cudnn8.9-py3.11 [linux/amd64] (base, jupyter, ssh)" in runs
    assert "sm_86 kernels run on compute capability 8.9" in runs
    assert "torch2.14.0-cu130-cudnn9.24-py3.12" in fails and "driver 535 is older than the 580" in fails


def test_nothing_fits_exits_1_and_bad_input_exits_2_without_a_traceback() -> None:
    assert run_build_py("fit", "--driver", "470.82.01", "--gpu", "P100", "--platform", "linux/amd64").returncode == 1
    for args, words in ((["--driver", "abc", "--gpu", "8.9"], "not a driver version"),
                        (["--driver", "535.104.05", "--gpu", "Voodoo 5"], "nor a GPU the compat data names"),
                        (["--driver", "535.104.05", "--gpu", "8.9", "--platform", "linux/s390x"], "not a platform")):
        result = run_build_py("fit", *args)
        assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_the_rule_file_fit_loads_is_the_one_the_images_carry() -> None:
    rendered = ROOT / "images" / CU121 / "image" / "gpurules.py"
    source = ROOT / "templates" / "files" / "gpurules.py"
    assert Path(fit.rules().__file__) == source
    assert rendered.read_text() == source.read_text()


def write_manifest(folder: Path, data: dict) -> Path:
    path = folder / "v2.7.json"
    path.write_text(json.dumps(data))
    return path


def test_a_release_manifest_answers_per_tag_from_what_each_platform_records(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, two_platform_release())
    result = run_build_py("fit", "--manifest", str(path), "--driver", "580.95.05", "--gpu", "GB10",
                          "--platform", "linux/arm64", "--format", "json")
    assert result.returncode == 0, result.stderr
    found = {item["entry"]: item for item in json.loads(result.stdout)["images"]}
    assert set(found) == {CU130, f"{CU130}-ssh"}
    assert found[CU130]["verdict"] == "runs" and found[CU130]["images"] == [f"{CU130}-arm64"]
    assert found[CU130]["pull"] == f"{REPOSITORY}:v2.7-{CU130}"  # the image index's tag
    assert "sm_120 kernels run on compute capability 12.1" in str(found[CU130]["reasons"])
    p100 = run_build_py("fit", "--manifest", str(path), "--driver", "580.95.05", "--gpu", "P100", "--platform",
                        "linux/amd64")
    assert p100.returncode == 1 and "no kernel for compute capability 6.0" in p100.stdout, p100.stdout


def test_an_older_manifest_without_runs_on_cannot_tell_and_a_hostile_one_is_refused(tmp_path: Path) -> None:
    data = two_platform_release()
    for image in data["images"]:
        del image["runs_on"]
    older = run_build_py("fit", "--manifest", str(write_manifest(tmp_path, data)), "--driver", "580.95.05",
                         "--gpu", "9.0", "--platform", "linux/amd64")
    assert older.returncode == 1 and "cannot tell: 2" in older.stdout, older.stdout
    data = two_platform_release()
    data["images"][0]["runs_on"]["gpu_archs"] = "8.0 $(reboot)"
    hostile = run_build_py("fit", "--manifest", str(write_manifest(tmp_path, data)), "--driver", "580.95.05",
                           "--gpu", "9.0")
    assert hostile.returncode == 2 and "runs_on" in hostile.stderr and "Traceback" not in hostile.stderr, hostile.stderr


ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x0660 + n) for n in range(10)))  # what \d and int() also take


def test_digits_of_other_scripts_are_refused_naming_the_option() -> None:
    for args, words in ((["--driver", "580.95.05".translate(ARABIC_INDIC), "--gpu", "8.9"],
                         "not a driver version: digits 0-9"),
                        (["--driver", "580.95.05", "--gpu", "8.9".translate(ARABIC_INDIC)],
                         "not a compute capability (MAJOR.MINOR in digits 0-9")):
        result = run_build_py("fit", *args, "--platform", "linux/amd64")
        assert result.returncode == 2, result.stdout
        [line] = result.stderr.splitlines()
        assert line.startswith(f"error: {args[0] if 'driver' in words else args[2]} ") and words in line, line


def test_the_rule_reads_only_ascii_digits() -> None:
    gpurules = fit.rules()
    assert gpurules.capability_of("8.9".translate(ARABIC_INDIC)) is None
    assert gpurules.version_tuple("580.95.05".translate(ARABIC_INDIC)) == ()
    assert gpurules.parse_arch("sm_90".translate(ARABIC_INDIC)) is None
    assert gpurules.arch_list_of("8.0 9.0".translate(ARABIC_INDIC)) == []
    assert gpurules.parse_gpu("NVIDIA L4, 550.54.14, " + "23034".translate(ARABIC_INDIC) + ", 8.9")["memory_mb"] is None


def fit_with_nvidia_smi(tmp_path: Path, line: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`build.py fit` on the default matrix for linux/amd64, with a stand-in nvidia-smi first on PATH that prints
    `line` (what the host does not give on the command line is read from it)."""
    folder = fake_nvidia_smi(tmp_path / "bin", f"echo '{line}'\n")
    env = {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    return run_build_py("fit", "--platform", "linux/amd64", *args, env=env)


@pytest.mark.parametrize("answer", ["[Insufficient Permissions]", "[Unknown Error]", "[N/A]", "[Not Supported]",
                                    "[GPU requires reset]"])
def test_a_driver_nvidia_smi_cannot_tell_is_not_known_and_fit_cannot_tell(tmp_path: Path, answer: str) -> None:
    result = fit_with_nvidia_smi(tmp_path, f"NVIDIA GeForce RTX 4090, {answer}, 24564, 8.9")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    runs, _, rest = result.stdout.partition("cannot tell: 3\n")
    assert "torch2.13.0-cpu-py3.11" in runs, result.stdout  # a CPU image needs no driver
    assert f"nvidia-smi answered '{answer}' for the driver version: whether this driver runs the image's CUDA 13.0 " \
           "(it needs driver 580.95.05 or newer) is not known" in rest, result.stdout
    assert "upgrade" not in result.stdout and "older than" not in result.stdout, result.stdout
    assert "driver unknown" in result.stdout.splitlines()[0]
    assert result.stdout.endswith("nvidia-smi could not tell the driver version: give --driver VERSION\n")


def test_a_compute_capability_nvidia_smi_cannot_tell_is_read_from_the_name_or_not_known(tmp_path: Path) -> None:
    by_name = fit_with_nvidia_smi(tmp_path, "NVIDIA L4, 580.95.05, [Unknown Error], [Unknown Error]")
    assert by_name.returncode == 0, by_name.stdout + by_name.stderr  # the compat data knows an L4: 8.9
    assert by_name.stdout.startswith("fit: compute capability 8.9 (NVIDIA L4), driver 580.95.05"), by_name.stdout
    unnamed = fit_with_nvidia_smi(tmp_path, "NVIDIA Quux, 580.95.05, 1024, [Unknown Error]", "--format", "json")
    assert unnamed.returncode == 1 and "Traceback" not in unnamed.stderr, unnamed.stderr
    answer = json.loads(unnamed.stdout)
    assert answer["host"]["capability"] is None and answer["host"]["unreadable"] == {"capability": "[Unknown Error]"}
    cuda = [item for item in answer["images"] if item["gpu"]]
    assert cuda and all(item["verdict"] == "unknown" for item in cuda), cuda
    assert all("nvidia-smi answered '[Unknown Error]' for the GPU's compute capability" in str(item["reasons"])
               for item in cuda), cuda


def test_an_nvidia_smi_that_lists_no_gpu_is_refused_in_one_line(tmp_path: Path) -> None:
    for line in ("No devices were found", "garbage", "", "0" * 100_000):
        result = fit_with_nvidia_smi(tmp_path, line)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: no GPU found here (nvidia-smi listed none): give the host as "
                                         "--driver VERSION --gpu CAPABILITY|NAME"), result.stderr


def fit_json(path: Path, driver: str, gpu: str, platform: str) -> tuple[int, dict[str, dict]]:
    result = run_build_py("fit", "--manifest", str(path), "--driver", driver, "--gpu", gpu, "--platform", platform,
                          "--format", "json")
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, {item["entry"]: item for item in json.loads(result.stdout)["images"]}


@pytest.mark.parametrize("order", ["amd64-first", "arm64-first"])
def test_a_tag_is_judged_by_the_image_of_the_host_platform(tmp_path: Path, order: str) -> None:
    """Each platform's image records what it needs: an arm64 host with driver 550 is not told a tag runs because its
    amd64 image needs only 550, whichever platform the manifest lists first."""
    data = two_platform_release()
    for image in data["images"]:
        if image["platform"] == "linux/amd64":
            image["runs_on"].update(min_driver="550.54.14", min_driver_minor_compat="550")
    data["images"].sort(key=lambda image: image["platform"], reverse=order == "arm64-first")
    path = write_manifest(tmp_path, data)
    code, arm64 = fit_json(path, "550.54.14", "GB10", "linux/arm64")
    assert code == 1 and arm64[CU130]["verdict"] == "fails", arm64[CU130]
    assert arm64[CU130]["images"] == [f"{CU130}-arm64"]
    assert "driver 550 is older than the 580 this image needs" in str(arm64[CU130]["reasons"]), arm64[CU130]
    code, amd64 = fit_json(path, "550.54.14", "9.0", "linux/amd64")
    assert code == 0 and amd64[CU130]["verdict"] == "runs" and amd64[CU130]["images"] == [f"{CU130}-amd64"], amd64


def test_an_index_without_an_image_of_the_host_platform_does_not_run_there(tmp_path: Path) -> None:
    """The pull tag of an image index gives the host its platform's image or none: an index that lists only amd64 is
    not recommended to an arm64 host, though the manifest holds an arm64 image of that name."""
    data = two_platform_release()
    [index] = [index for index in data["indexes"] if index["name"] == CU130]
    index["platforms"] = {"linux/amd64": f"{CU130}-amd64"}
    code, found = fit_json(write_manifest(tmp_path, data), "580.95.05", "GB10", "linux/arm64")
    assert code == 0 and found[f"{CU130}-ssh"]["verdict"] == "runs", found  # its index holds both
    assert found[CU130]["verdict"] == "fails" and found[CU130]["images"] == [], found[CU130]
    assert found[CU130]["reasons"] == [{"kind": "fails", "reason": "no linux/arm64 image in this tag (its images are "
                                                                   "for linux/amd64)"}]


def test_a_candidates_manifest_answers_with_the_tags_it_holds(tmp_path: Path) -> None:
    """A candidates' manifest has no release tag yet: fit names each image's candidate tag."""
    path = write_manifest(tmp_path, candidates(tmp_path))
    code, found = fit_json(path, "580.95.05", "9.0", "linux/amd64")
    assert code == 1 and found[CPU]["verdict"] == "runs", found  # a CPU image alone
    assert found[CPU]["pull"] == f"{REPOSITORY}:v2.7-rc.1-{CPU}"
    code, found = fit_json(path, "580.95.05", "GB10", "linux/arm64")
    assert found[CPU]["verdict"] == "fails" and "no linux/arm64 image in this tag" in str(found[CPU]["reasons"])


def test_each_tag_says_whether_the_release_signed_it(tmp_path: Path) -> None:
    """The release manifest records each tag's signature and the key: fit names the key for a signed tag (an index's
    own signature for an index tag) and says 'not signed' for one without, so a cluster knows before the pull."""
    from cryptography.hazmat.primitives.asymmetric import ec

    from torchimages.publish import signing

    public = signing.SigningKey(ec.generate_private_key(ec.SECP256R1())).public
    data = two_platform_release()
    data["signed_by"] = {"fingerprint": public.fingerprint, "public_key": public.pem}
    data["indexes"][0]["signature"] = "sha256:" + "5" * 64  # the base image's index signed, the ssh one not
    path = write_manifest(tmp_path, data)
    result = run_build_py("fit", "--manifest", str(path), "--driver", "580.95.05", "--gpu", "GB10",
                          "--platform", "linux/arm64", "--format", "json")
    found = {item["entry"]: item["signed_by"] for item in json.loads(result.stdout)["images"]}
    assert found == {CU130: public.fingerprint, f"{CU130}-ssh": None}, result.stdout
    text = run_build_py("fit", "--manifest", str(path), "--driver", "580.95.05", "--gpu", "GB10", "--platform",
                        "linux/arm64").stdout
    assert f"v2.7-{CU130} (signed, key {public.fingerprint[:19]}...)" in text and "ssh (not signed)" in text, text
    data["signed_by"]["fingerprint"] = "sha256:" + "6" * 64  # a fingerprint that is not the key's
    refused = run_build_py("fit", "--manifest", str(write_manifest(tmp_path, data)), "--driver", "580.95.05",
                           "--gpu", "GB10")
    assert refused.returncode == 2 and "is not the fingerprint of the public key given with it" in refused.stderr


def test_each_entry_is_judged_by_its_image_of_the_hosts_platform(plan: specs.Plan) -> None:
    """On an arm64 host an entry of two platforms is answered for its arm64 images (whose kernels differ from amd64's),
    and an amd64-only entry is refused for its platform, naming its own images."""
    found = {f.entry: f for f in fit.fits(plan, fit.Host("linux/arm64", "580.95.05", "12.1", "GB10"))}
    assert (found[CU130].platform, found[CU130].images, found[CU130].verdict) == (
        "linux/arm64", (f"{CU130}-arm64",), "runs")
    assert (found[CU121].platform, found[CU121].images, found[CU121].verdict) == ("linux/amd64", (CU121,), "fails")
    on_amd64 = {f.entry: f for f in fit.fits(plan, fit.Host("linux/amd64", "580.95.05", "12.0"))}
    assert on_amd64[CU130].images == (f"{CU130}-amd64",)


def path_answering(folder: Path, line: str) -> str:
    """A PATH whose nvidia-smi answers one GPU's CSV line, as `--query-gpu=... --format=csv,noheader,nounits` does."""
    folder.mkdir()
    (folder / "nvidia-smi").write_text(f"#!/bin/sh\necho '{line}'\n")
    (folder / "nvidia-smi").chmod(0o755)
    return str(folder)


def test_what_the_options_give_wins_over_what_nvidia_smi_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", path_answering(tmp_path / "bin", "NVIDIA L4, 580.95.05, 23034, 8.9"))
    read = fit.host_from(None, None, "linux/amd64")
    assert (read.driver, read.capability, read.gpu_name, read.source) == ("580.95.05", "8.9", "NVIDIA L4", "nvidia-smi")
    driver_given = fit.host_from("550.54.15", None, "linux/amd64")
    assert (driver_given.driver, driver_given.capability) == ("550.54.15", "8.9"), "--driver is the host asked about"
    gpu_given = fit.host_from(None, "H100", "linux/amd64")
    assert (gpu_given.driver, gpu_given.capability, gpu_given.gpu_name) == ("580.95.05", "9.0", "H100")


@pytest.mark.parametrize(("gpu", "capability", "name"), [
    ("NVIDIA A100-SXM4-80GB", "8.0", "A100"), ("Tesla V100-SXM2-16GB", "7.0", "V100"), ("NVIDIA L40S", "8.9", "L40S"),
    ("NVIDIA H100 80GB HBM3", "9.0", "H100")])
def test_a_gpu_named_as_nvidia_smi_prints_it_is_known(gpu: str, capability: str, name: str) -> None:
    """nvidia-smi's names carry the form factor after a hyphen (A100-SXM4-80GB): the model still names the GPU."""
    assert fit.gpu_capability(gpu) == (capability, name)


def test_an_image_of_zstd_layers_runs_only_where_the_hosts_docker_pulls_them(tmp_path: Path) -> None:
    """A tag whose pushed layers are zstd records min_docker 23.0 (push.runs_on): fit --docker says which hosts pull it,
    without --docker it cannot tell, and a min_docker that is no engine release is refused (exit 2)."""
    data = two_platform_release()
    for image in data["images"]:
        if image["platform"] == "linux/amd64":
            image["runs_on"]["min_docker"] = "23.0"
    path = write_manifest(tmp_path, data)

    def ask(*docker: str) -> tuple[int, dict]:
        result = run_build_py("fit", "--manifest", str(path), "--driver", "580.95.05", "--gpu", "9.0",
                              "--platform", "linux/amd64", "--format", "json", *docker)
        assert "Traceback" not in result.stderr, result.stderr
        return result.returncode, {item["entry"]: item for item in json.loads(result.stdout)["images"]}

    code, old = ask("--docker", "20.10.24+dfsg1")
    assert code == 1 and old[CU130]["verdict"] == "fails", old[CU130]
    assert "its layers need Docker 23.0 or later to pull (zstd); this host's is 20.10.24+dfsg1" in str(old[CU130]["reasons"])
    code, current = ask("--docker", "26.1.5")
    assert code == 0 and current[CU130]["verdict"] == "runs", current[CU130]
    code, untold = ask()
    assert code == 1 and untold[CU130]["verdict"] == "unknown" and "give the host's as --docker" in str(untold[CU130])
    # the arm64 image's layers are gzip: no engine this tool supports is too old for it
    code, arm64 = fit_json(path, "580.95.05", "GB10", "linux/arm64")
    assert code == 0 and arm64[CU130]["verdict"] == "runs" and "Docker" not in str(arm64[CU130]["reasons"]), arm64
    data["images"][0]["runs_on"]["min_docker"] = "23.0 8.0"
    hostile = run_build_py("fit", "--manifest", str(write_manifest(tmp_path, data)), "--driver", "580.95.05",
                           "--gpu", "9.0", "--docker", "27.0")
    assert hostile.returncode == 2 and "min_docker" in hostile.stderr and "Traceback" not in hostile.stderr, hostile.stderr
    bad = run_build_py("fit", "--manifest", str(path), "--driver", "580.95.05", "--gpu", "9.0", "--docker", "latest")
    assert bad.returncode == 2 and "--docker 'latest': not a Docker engine version" in bad.stderr, bad.stderr
