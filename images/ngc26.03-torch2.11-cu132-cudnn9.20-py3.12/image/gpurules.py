"""Whether an image runs on a GPU and driver: the one rule that `build.py fit`, image-doctor (in every image) and the
smoke suite's GPU probes use, so they never disagree. Python 3.8+, standard library only.

An image is described as image-doctor reads it from /etc/torchimages/image.json: `cuda`, `min_driver` (the driver its
CUDA toolkit was released with), `min_driver_minor_compat` (the oldest driver of that CUDA major: minor-version
compatibility), `flavor`, `platforms` (those its tag has images for) and `gpu_archs` (platform -> the GPU generations
its torch runs on, in TORCH_CUDA_ARCH_LIST's words: '7.5 8.0 8.6 9.0 10.0 12.0+PTX').
"""

from __future__ import annotations

import re
import subprocess

# Digits are [0-9], never \d: \d, int() and float() take any script's digits (Arabic-Indic '\u0665\u0668\u0660' is 580
# to them), and nothing that reports a driver or a GPU writes those.
ARCH = re.compile(r"(sm|compute)_([0-9]+)([0-9])[a-z]?")
CAPABILITY = re.compile(r"\s*([0-9]+)\.([0-9]+)\s*", re.ASCII)
MEMORY_MB = re.compile(r"[0-9]{1,9}(\.[0-9]+)?")
# Forward compatibility (the cuda-compat package) works only on data-center GPUs (NVIDIA CUDA compatibility guide).
DATA_CENTER = re.compile(r"\b(A2|A10G?|A16|A30|A40|A100|A800|H100|H200|H800|H20|GH200|B100|B200|B300|GB200|GB300|L4|"
                         r"L20|L40S?|T4|V100|P100|P40|P4|Tesla|RTX PRO 6000 Blackwell Server)\b", re.IGNORECASE)
RUNS, WARNS, UNKNOWN, FAILS = "runs", "warns", "unknown", "fails"


def parse_arch(arch: str) -> tuple[str, int, int] | None:
    """'sm_90a' -> ('sm', 9, 0); 'compute_120' -> ('compute', 12, 0); 'sm_121' -> ('sm', 12, 1); else None.

    The suffixes 'a' (architecture-specific) and 'f' (family) do not change the capability named.
    """
    match = ARCH.fullmatch(arch)
    if not match:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3))


def kernels_for(arch_list: list[str], capability: tuple[int, int]) -> tuple[list[str], list[str]]:
    """Which of `arch_list` run on a GPU of `capability` (major, minor): cubins first, then PTX.

    A cubin (sm_XY) runs on GPUs of the same major and an equal or higher minor: sm_86 runs on an sm_89 (L4,
    L40S, RTX 4090), sm_120 on an sm_121. PTX (compute_XY) is compiled by the driver for any GPU at least XY.
    """
    major, minor = capability
    cubins, ptx = [], []
    for arch in arch_list:
        parsed = parse_arch(arch)
        if parsed is None:
            continue
        kind, arch_major, arch_minor = parsed
        if kind == "sm" and arch_major == major and arch_minor <= minor:
            cubins.append(arch)
        if kind == "compute" and (arch_major, arch_minor) <= (major, minor):
            ptx.append(arch)
    return cubins, ptx


def arch_list_of(gpu_archs: str | None) -> list[str]:
    """'8.0 9.0 12.0+PTX' -> ['sm_80', 'sm_90', 'sm_120', 'compute_120']: a generation torch runs on natively reaches
    that GPU and those of its major with a higher minor, as its cubin does."""
    found = []
    for word in str(gpu_archs or "").replace(";", " ").split():
        ptx = word.upper().endswith("+PTX")
        capability = capability_of(word[:-4] if ptx else word)
        if capability:
            code = f"{capability[0]}{capability[1]}"
            found += ["sm_" + code] + (["compute_" + code] if ptx else [])
    return found


def covers(arch_list: list[str], capability: tuple[int, int]) -> bool:
    """Whether a torch build with `arch_list` runs on a GPU of `capability` (major, minor)."""
    cubins, ptx = kernels_for(arch_list, capability)
    return bool(cubins or ptx)


def version_tuple(version: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", version or ""))


def capability_of(text: object) -> tuple[int, int] | None:
    """'8.9' -> (8, 9); None for anything else."""
    match = CAPABILITY.fullmatch(str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def driver_state(driver: str | None, image: dict, data_center: bool, compat_package: bool) -> str | None:
    """How `driver` meets the image's CUDA: 'new enough', 'minor-version compatibility', 'forward compatibility' or
    'too old'; None where the image needs no driver (a CPU image) or the driver is unknown."""
    need, family = image.get("min_driver"), image.get("min_driver_minor_compat")
    if not driver or not need or need == "none":
        return None
    have = version_tuple(driver)
    if have >= version_tuple(need):
        return "new enough"
    if family and family != "none" and have >= version_tuple(family):
        return "minor-version compatibility"
    if data_center and compat_package:
        return "forward compatibility"
    return "too old"


def driver_finding(driver: str | None, image: dict, data_center: bool,
                   compat_package: bool) -> tuple[str, str] | None:
    """(RUNS | WARNS | FAILS, the reason in words) for `driver` against the image; None where no rule applies."""
    state = driver_state(driver, image, data_center, compat_package)
    need, family, cuda = image.get("min_driver"), image.get("min_driver_minor_compat"), image.get("cuda")
    if state is None:
        return None
    if state == "new enough":
        return RUNS, f"driver {driver} is at least the {need} CUDA {cuda} needs"
    if state == "minor-version compatibility":
        return WARNS, (f"driver {driver} is older than the {need} this image's CUDA {cuda} was released with; it runs "
                       f"through CUDA minor-version compatibility (driver {family} or newer), but kernels that need a "
                       f"newer driver (PTX JIT) fail: upgrade the host driver to {need} or newer")
    if state == "forward compatibility":
        return WARNS, (f"driver {driver} is older than the {need} this image needs; on this data-center GPU the image's "
                       f"CUDA forward-compatibility package may still run it (only on supported driver branches): "
                       f"upgrade the host driver to {need} or newer to be sure")
    return FAILS, (f"driver {driver.split('.')[0]} is older than the {need.split('.')[0]} this image needs: upgrade the "
                   f"host's NVIDIA driver to {need} or newer")


def kernel_finding(gpu_archs: str, capability: tuple[int, int], driver_state_found: str | None = None,
                   cuda: str | None = None) -> tuple[str, str]:
    """(RUNS | FAILS, the reason in words) for a GPU of `capability` against the generations torch runs on
    (`gpu_archs`: '7.5 8.0 12.0+PTX').

    A GPU reached only through PTX needs the driver's JIT for the image's CUDA: minor-version compatibility does not
    cover it, so PTX alone on such a driver fails.
    """
    wanted = f"{capability[0]}.{capability[1]}"
    cubins, ptx = kernels_for(arch_list_of(gpu_archs), capability)
    if cubins:
        return RUNS, f"{cubins[-1]} kernels run on compute capability {wanted}"
    if ptx and driver_state_found == "minor-version compatibility":
        return FAILS, (f"only {ptx[-1]} PTX reaches compute capability {wanted}, and this driver cannot JIT-compile "
                       f"CUDA {cuda}'s PTX (minor-version compatibility does not cover PTX)")
    if ptx:
        return RUNS, f"the driver compiles {ptx[-1]} PTX for compute capability {wanted}"
    return FAILS, (f"no kernel for compute capability {wanted}: this torch runs on {gpu_archs} (a kernel runs on its "
                   f"own generation and those of its major with a higher minor; PTX on any newer GPU)")


def findings(image: dict, platform: str, gpu: dict, driver: str | None,
             compat_package: bool | None = None) -> list[tuple[str, str]]:
    """Every finding, (RUNS | WARNS | FAILS, reason), for one image on a host: its platform, one GPU (`capability` as
    'X.Y' and `name`, either may be unknown) and its driver. `compat_package`: whether the image carries CUDA's
    forward-compatibility package (None: an ngc image does, a wheel-based one does not)."""
    found = []
    platforms = list(image.get("platforms") or [platform])
    if platform not in platforms:
        return [(FAILS, f"built for {', '.join(platforms)}, not this {platform}")]
    if image.get("flavor") == "cpu" or not image.get("cuda") or image.get("cuda") == "none":
        return [(RUNS, "a CPU image: runs without using the GPU")]
    if compat_package is None:
        compat_package = image.get("flavor") == "ngc"
    data_center = bool(gpu.get("name") and DATA_CENTER.search(gpu["name"]))
    state = driver_state(driver, image, data_center, compat_package)
    by_driver = driver_finding(driver, image, data_center, compat_package)
    if by_driver:
        found.append(by_driver)
    capability = capability_of(gpu.get("capability"))
    archs = (image.get("gpu_archs") or {}).get(platform)
    if capability and archs:
        found.append(kernel_finding(archs, capability, state, image.get("cuda")))
    elif capability:
        found.append((UNKNOWN, f"the compat data records no GPU generations for this image's torch on {platform}: "
                               f"whether it has a kernel for compute capability {capability[0]}.{capability[1]} is not "
                               "known"))
    return found


def verdict(found: list[tuple[str, str]]) -> str:
    """FAILS when a finding fails, else UNKNOWN when one is not known, else RUNS (a warning still runs)."""
    kinds = {kind for kind, _ in found}
    return FAILS if FAILS in kinds else UNKNOWN if UNKNOWN in kinds else RUNS


MACHINES = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}


def platform_of(machine: str) -> str:
    """platform.machine() -> the platform an image names: 'x86_64' -> 'linux/amd64'; 'aarch64' -> 'linux/arm64'."""
    return MACHINES.get(machine, "linux/" + machine)


def nvidia_smi() -> list[dict]:
    """Each GPU as nvidia-smi reports it; [] when there is none (or no driver utilities).

    Drivers before R510 do not know compute_cap: the query is repeated without it.
    """
    for fields in ("name,driver_version,memory.total,compute_cap", "name,driver_version,memory.total"):
        try:
            output = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                                    capture_output=True, text=True, timeout=20, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return [parse_gpu(line) for line in output.strip().splitlines() if line.strip()]
    return []


def parse_gpu(line: str) -> dict:
    """One CSV line of nvidia-smi; '[N/A]' (memory.total on GB10's unified memory) is unknown, not an error."""
    parts = [part.strip() for part in line.split(",")] + [""] * 4
    name, driver, memory, capability = parts[:4]
    known = [None if value in ("", "[N/A]", "N/A", "[Not Supported]") else value for value in (memory, capability)]
    memory_mb = int(float(known[0])) if known[0] and MEMORY_MB.fullmatch(known[0]) else None
    return {"name": name, "driver": driver, "memory_mb": memory_mb,
            "capability": known[1]}
