"""GPU visibility: device count, architectures, and a real kernel."""

import json

import torch

count = torch.cuda.device_count()
result = {"available": torch.cuda.is_available(), "count": count, "arch_list": torch.cuda.get_arch_list()}
if result["available"]:
    major, minor = torch.cuda.get_device_capability(0)
    result["capability"] = f"{major}.{minor}"
    result["name"] = torch.cuda.get_device_name(0)
    a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    result["kernel_sum"] = float((a * 2).sum().item())
    result["expected_sum"] = float((1 << 20) * ((1 << 20) - 1))
print(json.dumps(result))
