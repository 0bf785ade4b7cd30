"""NCCL all_reduce across every visible GPU, one process per GPU (started by torchrun)."""

import datetime
import json
import os

import torch
import torch.distributed as dist

# The device first: NCCL then binds each rank to its GPU from the start (no guessing, no hang on a wrong device).
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.full((1024,), float(rank + 1), device="cuda")
dist.all_reduce(value)
expected = world * (world + 1) / 2
if rank == 0:
    print(json.dumps({"world": world, "value": float(value[0]), "expected": expected,
                      "all_equal": bool((value == expected).all())}))
dist.destroy_process_group()
