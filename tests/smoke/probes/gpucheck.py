"""What the GPU probes decide, kept apart from torch so it is tested without a GPU (tests/unit/verify/test_gpu_probes.py).

Runs in the image's Python (any 3.8+), beside the probes that import it.
"""

# The kernel rule is gpurules.py's (templates/files, linked here), the one `build.py fit` and image-doctor use
if __package__:
    from .gpurules import covers
else:
    from gpurules import covers  # a probe run as a script, in a container or by selfcheck


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



# The GPU code of a built extension, without cuobjdump (not on PyPI): the .nv_fatbin section of its ELF shared object
# holds fat binaries, each a 16-byte header (magic 0xBA55ED50, u16 version, u16 header size, u64 size) followed by
# entries of kind (u16: 1 PTX, 2 ELF/SASS), header size (u32 at +4), payload size (u64 at +8) and sm (u32 at +28).
# Layout stable since CUDA 10; checked against TORCH_CUDA_ARCH_LIST and against cu121's libcurand (SASS 50-90, PTX 90).
FATBIN_MAGIC = 0xBA55ED50
FATBIN_KINDS = {1: "ptx", 2: "sass"}


def elf_section(data, wanted=b".nv_fatbin"):
    """The bytes of the named section of a 64-bit little-endian ELF file (b"" when it has none)."""
    import struct

    if data[:4] != b"\x7fELF" or data[4:5] != b"\x02" or data[5:6] != b"\x01":
        raise ValueError("not a 64-bit little-endian ELF file")
    (table,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)

    def header(index):
        return struct.unpack_from("<IIQQQQIIQQ", data, table + index * entry_size)

    names = header(names_index)[4]
    for index in range(count):
        name, _kind, _flags, _address, offset, size = header(index)[:6]
        if data[names + name:].split(b"\0", 1)[0] == wanted:
            return data[offset:offset + size]
    return b""


def fatbin_archs(blob):
    """[(kind, sm)] of every entry of the fat binaries in a .nv_fatbin section: ('sass', 80) is sm_80 code, ('ptx', 120)
    compute_120 PTX."""
    import struct

    found = set()
    at = 0
    while at + 16 <= len(blob):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", blob, at)
        if magic != FATBIN_MAGIC:
            at += 8  # fat binaries are 8-byte aligned in the section
            continue
        entry, end = at + header_size, at + header_size + size
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            (sm,) = struct.unpack_from("<I", blob, entry + 28)
            found.add((FATBIN_KINDS.get(kind, str(kind)), sm))
            if entry_header + payload <= 0:
                break
            entry += entry_header + payload
        at = end
    return sorted(found)


def arch_list_code(value):
    """The GPU code a TORCH_CUDA_ARCH_LIST asks nvcc for: SASS of each capability, and PTX of those with '+PTX'
    ('8.0;12.0+PTX' -> [('ptx', 120), ('sass', 80), ('sass', 120)]); None when a word names no capability."""
    found = set()
    for word in str(value or "").replace(";", " ").split():
        ptx = word.upper().endswith("+PTX")
        capability = word[:-4] if ptx else word
        major, _, minor = capability.rstrip("af").partition(".")
        if not (major.isdigit() and minor.isdigit()):
            return None
        sm = int(major) * 10 + int(minor)
        found.add(("sass", sm))
        if ptx:
            found.add(("ptx", sm))
    return sorted(found)
