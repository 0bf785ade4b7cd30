"""Build the test extension with torch.utils.cpp_extension in this environment and print, as JSON, how long it took,
the GPU code its .so carries (fatbin.py) and TORCH_CUDA_ARCH_LIST. Usage: build_ext.py split|single"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from torch.utils import cpp_extension

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from fatbin import archs, section  # noqa: E402  (beside this file)

# split: the kernel's .cu includes only the CUDA runtime and torch's headers are compiled once, by g++, in the binding;
# single: one .cu with torch/extension.h, which nvcc compiles for the host and again for each architecture.
SOURCES = {"split": ("binding.cpp", "kernel.cu"), "single": ("add_one.cu",)}

layout = sys.argv[1]
build = tempfile.mkdtemp(prefix=f"ext-{layout}-")
started = time.monotonic()
module = cpp_extension.load(f"add_one_{layout}", [str(HERE / name) for name in SOURCES[layout]], build_directory=build)
shared = next(Path(build).glob("*.so"))
print(json.dumps({"layout": layout, "seconds": round(time.monotonic() - started, 1), "module": module.__name__,
                  "archs": archs(section(str(shared))), "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST")}))
