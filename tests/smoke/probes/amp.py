"""Mixed precision: a few training steps of a small model; loss finite and lower at the end.

Usage: amp.py cuda-fp16 | cuda-bf16 | cpu-bf16
"""

import json
import math
import sys

import torch
from torch import nn

mode = sys.argv[1]
device, dtype = {"cuda-fp16": ("cuda", torch.float16), "cuda-bf16": ("cuda", torch.bfloat16),
                 "cpu-bf16": ("cpu", torch.bfloat16)}[mode]
torch.manual_seed(0)
inputs = torch.randn(256, 64, device=device)
targets = (inputs[:, :1] * 3 - inputs[:, 1:2]).detach()
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.amp.GradScaler(device, enabled=mode == "cuda-fp16")
losses = []
for _ in range(30):
    optimizer.zero_grad()
    with torch.autocast(device_type=device, dtype=dtype):
        loss = nn.functional.mse_loss(model(inputs).float(), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    losses.append(float(loss))
print(json.dumps({"first": losses[0], "last": losses[-1], "finite": all(math.isfinite(v) for v in losses)}))
