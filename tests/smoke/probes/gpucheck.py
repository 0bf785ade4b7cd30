"""What the GPU probes decide, kept apart from torch so it is tested without a GPU (tests/unit/verify/test_gpu_probes.py).

Runs in the image's Python (any 3.8+), beside the probes that import it.
"""

import re

ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)[a-z]?$")


def parse_arch(arch):
    """'sm_90a' -> ('sm', 9, 0); 'compute_120' -> ('compute', 12, 0); 'sm_121' -> ('sm', 12, 1); else None.

    The suffixes 'a' (architecture-specific) and 'f' (family) do not change the capability named.
    """
    match = ARCH.match(arch)
    if not match:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3))


def covers(arch_list, capability):
    """Whether a torch build with `arch_list` runs on a GPU of `capability` (major, minor).

    A cubin (sm_XY) runs on GPUs of the same major and an equal or higher minor: sm_86 runs on an sm_89 (L4,
    L40S, RTX 4090), sm_120 on an sm_121. PTX (compute_XY) is compiled by the driver for any GPU at least XY.
    """
    major, minor = capability
    for arch in arch_list:
        parsed = parse_arch(arch)
        if parsed is None:
            continue
        kind, arch_major, arch_minor = parsed
        if kind == "sm" and arch_major == major and arch_minor <= minor:
            return True
        if kind == "compute" and (arch_major, arch_minor) <= (major, minor):
            return True
    return False


def uncovered(arch_list, claimed):
    """The claimed compute capabilities ('8.6', '12.0') that no cubin or PTX of `arch_list` runs on (covers)."""
    found = []
    for arch in claimed:
        major, _, minor = str(arch).partition(".")
        if not (major.isdigit() and minor.isdigit()) or not covers(arch_list, (int(major), int(minor))):
            found.append(arch)
    return found


def declared_archs(value):
    """The compute capabilities a TORCH_CUDA_ARCH_LIST value names ('8.0 9.0+PTX' or '8.0;9.0'), '+PTX' and the
    'a'/'f' suffixes dropped ('9.0a' is 9.0); a word that names none ('Auto') is kept as it is, to be reported."""
    found = []
    for word in str(value or "").replace(";", " ").split():
        capability = word[:-4] if word.upper().endswith("+PTX") else word
        found.append(capability[:-1] if capability[-1:] in ("a", "f") else capability)
    return found


def exact_fp32(torch):
    """Turn TF32 off for convolutions and matmuls, so fp32 on the GPU can be compared with the CPU.

    cuDNN's allow_tf32 defaults to True: on Ampere and later a conv then rounds its inputs to 10 mantissa bits.
    torch 2.9 replaced the flags with `fp32_precision`; older builds only have the flags.
    """
    done = []
    for backend in (getattr(torch.backends.cudnn, "conv", None), getattr(torch.backends.cuda, "matmul", None)):
        if backend is not None and hasattr(backend, "fp32_precision"):
            backend.fp32_precision = "ieee"
            done.append("fp32_precision")
    if not done:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        done.append("allow_tf32")
    return done[0]


def compile_preflight(device, include_dir, which, environ):
    """What torch.compile needs from the host before it starts, each missing piece with the package to install.

    Inductor compiles CPU kernels with a C++ compiler; Triton compiles its GPU launcher with a C compiler; both
    include Python.h. Without them the error surfaces deep inside Triton or Inductor.
    """
    from pathlib import Path

    problems = []
    if not (Path(include_dir) / "Python.h").is_file():
        problems.append(f"Python.h is not in {include_dir}: install the Python headers (python3-dev, or python3.X-dev "
                        "for the Python that runs torch)")
    if device == "cpu":
        if not (environ.get("CXX") or which("g++") or which("c++") or which("clang++")):
            problems.append("no C++ compiler (g++, c++ or clang++; CXX unset): install g++")
    elif not (environ.get("CC") or which("gcc") or which("cc") or which("clang")):
        problems.append("no C compiler (gcc, cc or clang; CC unset): install gcc")
    return problems


def visible_gpus(listing, cuda_visible_devices):
    """How many of the GPUs in `nvidia-smi -L` output CUDA_VISIBLE_DEVICES leaves to CUDA (all when it is unset).

    Entries are indexes or UUIDs (GPU-..., MIG-...); CUDA stops at the first entry that names no GPU.
    """
    gpus = [line for line in listing.splitlines() if line.startswith("GPU ")]
    if cuda_visible_devices is None:
        return len(gpus)
    seen = []
    for entry in (part.strip() for part in cuda_visible_devices.split(",")):
        index = next((i for i, line in enumerate(gpus) if (entry.isdigit() and i == int(entry))
                      or (entry and f"UUID: {entry}" in line)), None)
        if index is None:
            break
        if index not in seen:
            seen.append(index)
    return len(seen)


# Copies that are not a second CUDA stack. The nvidia/cuda base images carry cudart (0.7 MB) under /usr/local/cuda
# by their documented contract, beside the wheel's own. triton's wheel carries the libcupti its profiler (proton)
# loads, as files (a wheel holds no links): triton 3.8, in torch 2.14.0's cu130 set, has libcupti.so, .so.12 and
# .so.2025.1.1 in triton/backends/nvidia/lib/cupti and a Blackwell build in lib/cupti-blackwell, beside
# nvidia/cu13/lib/libcupti.so.13 (seen in the image this project builds).
EXPECTED_COPIES = (("libcudart", "/usr/local/cuda"), ("libcupti", "/triton/backends/nvidia/lib/"))


def extra_copies(libraries):
    """{library: its paths} for each CUDA library present more than once, its expected copies (EXPECTED_COPIES) not
    counted beside a copy elsewhere."""
    twice = {}
    for name, paths in libraries.items():
        elsewhere = [path for path in paths if not any(library == name and folder in path
                                                       for library, folder in EXPECTED_COPIES)]
        if len(elsewhere if elsewhere else paths) > 1:
            twice[name] = sorted(paths)
    return twice

