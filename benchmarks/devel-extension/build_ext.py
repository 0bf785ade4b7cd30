"""The test extension as one .cu that includes torch/extension.h (add_one.cu), built with torch.utils.cpp_extension in
this environment: prints, as JSON, how long it took and the GPU code its .so carries. nvcc compiles torch's headers for
the host and again for each architecture of TORCH_CUDA_ARCH_LIST; compare with the split layout the smoke suite builds
(tests/smoke/probes/extension.py). Run by benchmarks/devel_layer.sh, which mounts the probes at /probes."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from torch.utils import cpp_extension

sys.path.insert(0, "/probes")  # tests/smoke/probes
from gpucheck import elf_section, fatbin_archs  # the smoke suite's reader of the fat binary

build = tempfile.mkdtemp(prefix="ext-single-")
started = time.monotonic()
module = cpp_extension.load("add_one_single", [str(Path(__file__).parent / "add_one.cu")], build_directory=build)
shared = next(Path(build).glob("*.so"))
print(json.dumps({"layout": "single", "seconds": round(time.monotonic() - started, 1), "module": module.__name__,
                  "archs": fatbin_archs(elf_section(shared.read_bytes())),
                  "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST")}))
