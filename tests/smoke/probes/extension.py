"""A CUDA extension built as users build theirs, with torch.utils.cpp_extension and the image's settings (CUDA_HOME,
TORCH_CUDA_ARCH_LIST, nvcc and ninja on PATH): a __global__ kernel in a .cu of its own (nvcc compiles it once per
architecture) and its binding in a .cpp (torch's headers compiled once, by the C++ compiler). Prints, as JSON, the GPU
code the built .so carries (read from its fat binary) and whether it imported; `run` also runs the kernel on the GPU.
The build folder is fixed, so a second call reuses the first one's build. Usage: extension.py [run]"""

import json
import os
import sys
import time
from pathlib import Path

from gpucheck import elf_section, fatbin_archs
from torch.utils import cpp_extension

KERNEL = r"""
#include <cstdint>
#include <cuda_runtime.h>

__global__ void add_one_kernel(const float* in, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1.0f;
}

void add_one_launch(const float* in, float* out, int64_t n, cudaStream_t stream) {
    add_one_kernel<<<(n + 255) / 256, 256, 0, stream>>>(in, out, n);
}
"""

BINDING = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

void add_one_launch(const float* in, float* out, int64_t n, cudaStream_t stream);

torch::Tensor add_one(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "a float32 CUDA tensor");
    auto y = torch::empty_like(x);
    add_one_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }
"""

folder = Path("/tmp/torchimages-extension")
folder.mkdir(exist_ok=True)
(folder / "kernel.cu").write_text(KERNEL)
(folder / "binding.cpp").write_text(BINDING)
started = time.monotonic()
module = cpp_extension.load("torchimages_add_one", [str(folder / "binding.cpp"), str(folder / "kernel.cu")],
                            build_directory=str(folder))
built = next(folder.glob("torchimages_add_one*.so"))
result = {"seconds": round(time.monotonic() - started, 1), "imported": module.__name__,
          "archs": fatbin_archs(elf_section(built.read_bytes())),
          "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"), "cuda_home": os.environ.get("CUDA_HOME")}
if sys.argv[1:] == ["run"]:
    import torch

    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    y = module.add_one(x)
    torch.cuda.synchronize()
    result["max_error"] = float((y - (x + 1)).abs().max())
print(json.dumps(result))
