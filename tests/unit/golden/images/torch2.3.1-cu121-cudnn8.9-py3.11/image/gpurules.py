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
DRIVER = re.compile(r"[0-9]{3}(\.[0-9]{1,3}){0,2}")  # 535.104.05, 580.95.05, 390.48
MEMORY_MB = re.compile(r"[0-9]{1,9}(\.[0-9]+)?")
ANSWER_LIMIT = 60  # nvidia-smi's answers are short: a longer one is kept this long, to be named, not believed
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


def driver_version(answer: str | None) -> str | None:
    """The driver version in `answer` (535.104.05); None for anything else ('[Insufficient Permissions]')."""
    return answer.strip() if answer and DRIVER.fullmatch(answer.strip()) else None


def shown(answer: str) -> str:
    """An answer of nvidia-smi as quoted in a reason ("'[Unknown Error]'", 'nothing')."""
    return repr(answer) if answer else "nothing"


def capability_of(text: object) -> tuple[int, int] | None:
    """'8.9' -> (8, 9); None for anything else."""
    match = CAPABILITY.fullmatch(str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def driver_state(driver: str | None, image: dict, data_center: bool, compat_package: bool) -> str | None:
    """How `driver` meets the image's CUDA: 'new enough', 'minor-version compatibility', 'forward compatibility' or
    'too old'; None where the image needs no driver (a CPU image) or the driver is unknown."""
    need, family = image.get("min_driver"), image.get("min_driver_minor_compat")
    if not driver_version(driver) or not need or need == "none":
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


def unknown_driver_finding(answer: str, image: dict) -> tuple[str, str]:
    """(UNKNOWN, the reason) for a driver version nvidia-smi could not tell ('[Insufficient Permissions]')."""
    need = image.get("min_driver")
    needs = f" (it needs driver {need} or newer)" if need and need != "none" else ""
    return UNKNOWN, (f"nvidia-smi answered {shown(answer)} for the driver version: whether this driver runs the image's "
                     f"CUDA {image.get('cuda')}{needs} is not known")


def unknown_capability_finding(answer: str) -> tuple[str, str]:
    """(UNKNOWN, the reason) for a compute capability nvidia-smi could not tell ('[Unknown Error]')."""
    return UNKNOWN, (f"nvidia-smi answered {shown(answer)} for the GPU's compute capability: whether this torch has a "
                     "kernel for it is not known")


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


def platform_finding(platform: str, platforms: list[str]) -> tuple[str, str]:
    """(FAILS, the reason) for a host of `platform` and a tag with images for `platforms` only."""
    return FAILS, f"no {platform} image in this tag (its images are for {', '.join(platforms) or 'no platform'})"


def findings(image: dict, platform: str, gpu: dict, driver: str | None,
             compat_package: bool | None = None) -> list[tuple[str, str]]:
    """Every finding, (RUNS | WARNS | UNKNOWN | FAILS, reason), for one image on a host: its platform, one GPU
    (`capability` as 'X.Y' and `name`, either None where not known) and its driver. The driver and the capability are
    taken as nvidia-smi answers them: an answer that is not a version or a capability ('[Unknown Error]', any
    bracketed answer, garbage) is not known, and said so. `compat_package`: whether the image carries CUDA's
    forward-compatibility package (None: an ngc image does, a wheel-based one does not)."""
    found = []
    platforms = list(image.get("platforms") or [platform])
    if platform not in platforms:
        return [platform_finding(platform, platforms)]
    if image.get("flavor") == "cpu" or not image.get("cuda") or image.get("cuda") == "none":
        return [(RUNS, "a CPU image: runs without using the GPU")]
    if compat_package is None:
        compat_package = image.get("flavor") == "ngc"
    data_center = bool(gpu.get("name") and DATA_CENTER.search(gpu["name"]))
    if driver is not None and not driver_version(driver):
        found.append(unknown_driver_finding(driver, image))
    state = driver_state(driver, image, data_center, compat_package)
    by_driver = driver_finding(driver, image, data_center, compat_package)
    if by_driver:
        found.append(by_driver)
    answer = gpu.get("capability")
    capability = capability_of(answer)
    archs = (image.get("gpu_archs") or {}).get(platform)
    if answer and not capability:
        found.append(unknown_capability_finding(answer))
    elif capability and archs:
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
    """Each GPU as nvidia-smi reports it; [] when there is none (or no driver utilities, or an answer that lists no
    GPU: 'No devices were found', garbage).

    Drivers before R510 do not know compute_cap: the query is repeated without it.
    """
    for fields in ("name,driver_version,memory.total,compute_cap", "name,driver_version,memory.total"):
        try:
            output = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                                    capture_output=True, text=True, errors="replace", timeout=20, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        return [gpu for gpu in map(parse_gpu, output.splitlines()) if gpu is not None]
    return []


def answer_of(field: str) -> str:
    """One field of nvidia-smi's CSV as it is kept: printable, and a longer one than ANSWER_LIMIT cut with '...' (so
    it reads as no version: '8.9000...' is not compute capability 8.9000)."""
    field = field.strip()
    kept = field[:ANSWER_LIMIT] + ("..." if len(field) > ANSWER_LIMIT else "")
    return "".join(char if char.isprintable() else "?" for char in kept)


def known_answer(answer: str) -> str | None:
    """None where nvidia-smi says it does not know: nothing, N/A, or any bracketed answer ('[N/A]', '[Not Supported]',
    '[Unknown Error]', '[Insufficient Permissions]')."""
    return None if not answer or answer == "N/A" or (answer.startswith("[") and answer.endswith("]")) else answer


def parse_gpu(line: str) -> dict | None:
    """One CSV line of nvidia-smi (name, driver, memory, compute capability); None for a line that is not one.

    The name and the memory are None where nvidia-smi does not know them ('[N/A]': memory.total on GB10's unified
    memory); the driver and the capability are kept as answered, for the rules to judge and name ('[Unknown Error]');
    a capability not asked for (drivers before R510) is None.
    """
    parts = [answer_of(part) for part in line.split(",")]
    if len(parts) < 3:
        return None
    name, driver, memory, capability = [*parts, ""][:4]
    memory = known_answer(memory) or ""
    return {"name": known_answer(name), "driver": driver,
            "memory_mb": int(float(memory)) if MEMORY_MB.fullmatch(memory) else None, "capability": capability or None}
