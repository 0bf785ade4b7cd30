"""cuDNN: a small conv net forward and backward on the GPU, benchmark off and on, determinism, GPU vs CPU."""

import json

import torch
from gpucheck import exact_fp32
from torch import nn


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 3, padding=1), nn.Flatten(),
                         nn.Linear(8 * 32 * 32, 10))


def step(model, batch, device):
    model = model.to(device)
    output = model(batch.to(device))
    output.sum().backward()
    return output.detach().cpu(), model[0].weight.grad.detach().cpu()


torch.manual_seed(1)
batch = torch.randn(8, 3, 32, 32)
result = {"enabled": torch.backends.cudnn.enabled, "version": torch.backends.cudnn.version(),
          "fp32_by": exact_fp32(torch)}  # TF32 off: the GPU's fp32 is compared with the CPU's below
for benchmark in (False, True):
    torch.backends.cudnn.benchmark = benchmark
    out, grad = step(net(), batch, "cuda")
    result[f"finite_benchmark_{benchmark}"] = bool(torch.isfinite(out).all() and torch.isfinite(grad).all())
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
first, first_grad = step(net(), batch, "cuda")
second, second_grad = step(net(), batch, "cuda")
result["deterministic_bitwise"] = bool(torch.equal(first, second) and torch.equal(first_grad, second_grad))
cpu_out, _ = step(net(), batch, "cpu")
result["max_abs_diff_vs_cpu"] = float((cpu_out - first).abs().max())
result["max_rel_diff_vs_cpu"] = result["max_abs_diff_vs_cpu"] / max(float(cpu_out.abs().max()), 1e-30)
print(json.dumps(result))
