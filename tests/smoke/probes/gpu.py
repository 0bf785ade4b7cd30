"""GPU visibility: device count, architectures, and a real kernel."""

import json

import torch
from gpucheck import covers

count = torch.cuda.device_count()
result = {"available": torch.cuda.is_available(), "count": count, "arch_list": torch.cuda.get_arch_list()}
if result["available"]:
    major, minor = torch.cuda.get_device_capability(0)
    result["capability"] = f"{major}.{minor}"
    result["name"] = torch.cuda.get_device_name(0)
    result["covered"] = covers(result["arch_list"], (major, minor))
    try:  # without kernels for this GPU, the first kernel fails ("no kernel image is available"): report it
        a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        result["kernel_sum"] = float((a * 2).sum().item())
    except RuntimeError as exc:
        result["kernel_error"] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    result["expected_sum"] = float((1 << 20) * ((1 << 20) - 1))
print(json.dumps(result))
