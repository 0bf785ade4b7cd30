"""GPU readiness without a GPU, as JSON: every CUDA library in the image, whether it loads, the versions
read from the libraries torch loads, and the GPU architectures torch was compiled for."""

import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path

# The CUDA user-space libraries a torch image may carry (not the driver's: libcuda, libnvidia-*).
LIBRARY = re.compile(r"^(lib(?:cudnn[a-z_]*|nccl|cublas|cublasLt|cusparse|cusparseLt|cufft|cufftw|curand|cusolver|"
                     r"cusolverMg|nvrtc|nvrtc-builtins|nvJitLink|cupti|cudart|nvToolsExt|cufile|cufile_rdma|nvblas|"
                     r"nvjpeg|npp[a-z]*|nvshmem[a-z_]*))\.so(\.[0-9.]+)?$")
ROOTS = ("/opt", "/usr")


def find_libraries(roots=ROOTS):
    """{library: sorted real files}; symlinks count as the file they point at; driver compat folders are skipped."""
    found = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "compat"]  # cuda-compat: the forward-compatible driver
            for name in files:
                match = LIBRARY.match(name)
                path = Path(folder) / name
                if match and path.exists():
                    found.setdefault(match.group(1), set()).add(str(path.resolve()))
    return {name: sorted(paths) for name, paths in sorted(found.items())}


def load_all(paths):
    """Load every library (RTLD_GLOBAL, so later ones find earlier ones); {path: error} for those that fail."""
    pending, errors = list(paths), {}
    while pending:
        errors = {}
        for path in pending:
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as error:
                errors[path] = str(error)
        if len(errors) == len(pending):
            break
        pending = list(errors)
    return errors


def loaded_by_torch():
    """{library: file} for the CUDA libraries this process has mapped (after `import torch`)."""
    mapped = {}
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = Path(line.split()[-1]) if "/" in line else None
        match = path and LIBRARY.match(path.name)
        if match:
            mapped[match.group(1)] = str(path.resolve())
    return mapped


def call_version(path, function, out_type=None):
    library = ctypes.CDLL(path)
    if out_type is None:
        getattr(library, function).restype = ctypes.c_size_t
        return int(getattr(library, function)())
    value = out_type()
    status = getattr(library, function)(ctypes.byref(value))
    return int(value.value) if status == 0 else None


def decode_nccl(code):
    """ncclGetVersion: major*10000+minor*100+patch since NCCL 2.9, major*1000+minor*100+patch before."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def decode_cudnn(code):
    """cudnnGetVersion: major*10000+minor*100+patch for 9.x, major*1000+minor*100+patch for 8.x."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def torch_facts():
    """In a fresh process: which CUDA libraries `import torch` loads, the versions read from those, the arch flags."""
    import torch

    mapped = loaded_by_torch()
    versions = {}
    if "libcudart" in mapped:
        code = call_version(mapped["libcudart"], "cudaRuntimeGetVersion", ctypes.c_int)
        versions["cuda"] = None if code is None else f"{code // 1000}.{code % 1000 // 10}"
    if "libcudnn" in mapped:
        versions["cudnn"] = decode_cudnn(call_version(mapped["libcudnn"], "cudnnGetVersion"))
    if "libnccl" in mapped:
        code = call_version(mapped["libnccl"], "ncclGetVersion", ctypes.c_int)
        versions["nccl"] = None if code is None else decode_nccl(code)
    arch_flags = torch._C._cuda_getArchFlags().split() if torch.version.cuda else []
    # What the image tells extension builds to compile for (NGC's bases set it; so does a devel image)
    declared = os.environ.get("TORCH_CUDA_ARCH_LIST")
    return {"torch_loads": mapped, "versions": versions, "arch_flags": arch_flags, "declared_archs": declared}


def run_child(*args):
    """This script in a fresh process: (its JSON result, or None when it crashed, and a description)."""
    child = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if child.returncode != 0:
        how = f"signal {-child.returncode}" if child.returncode < 0 else f"exit {child.returncode}"
        return None, f"the process died ({how}): {child.stderr.strip()[-300:]}"
    return json.loads(child.stdout.strip().splitlines()[-1]), ""


def load_errors(paths):
    """{path: error}: all libraries loaded in one process; one process per library if a broken one kills it."""
    errors, crash = run_child("load", *paths)
    if errors is not None:
        return errors
    errors = {}
    for path in paths:
        alone, crash = run_child("load", path)
        if alone is None:
            errors[path] = f"loading it killed the process: {crash}"
        else:
            errors.update(alone)
    return errors


def main():
    if sys.argv[1:2] == ["torch"]:
        print(json.dumps(torch_facts()))
        return
    if sys.argv[1:2] == ["load"]:
        print(json.dumps(load_all(sys.argv[2:])))
        return
    libraries = find_libraries()
    result = {"libraries": libraries, "load_errors": load_errors([p for paths in libraries.values() for p in paths])}
    facts, crash = run_child("torch")
    if facts is None:
        raise SystemExit(f"import torch and reading the CUDA libraries it loads failed: {crash}")
    result.update(facts)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
