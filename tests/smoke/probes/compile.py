"""torch.compile of a small model runs and matches eager mode. Usage: compile.py cpu|cuda"""

import json
import os
import shutil
import sys
import sysconfig

import torch
from gpucheck import compile_preflight
from torch import nn

device = sys.argv[1]
problems = compile_preflight(device, sysconfig.get_paths()["include"], shutil.which, os.environ)
if problems:  # name what is missing instead of failing deep inside Triton or Inductor
    print(json.dumps({"preflight": problems}))
    sys.exit(0)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to(device)
batch = torch.randn(16, 32, device=device)
compiled = torch.compile(model)
with torch.no_grad():
    eager, graph = model(batch), compiled(batch)
print(json.dumps({"max_abs_diff": float((eager - graph).abs().max()), "preflight": []}))
