"""torch.compile of a small model runs and matches eager mode. Usage: compile.py cpu|cuda"""

import json
import sys

import torch
from torch import nn

device = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to(device)
batch = torch.randn(16, 32, device=device)
compiled = torch.compile(model)
with torch.no_grad():
    eager, graph = model(batch), compiled(batch)
print(json.dumps({"max_abs_diff": float((eager - graph).abs().max())}))
