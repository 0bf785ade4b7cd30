"""Print the versions torch sees at run time, as JSON."""

import json
import platform

import torch
from gpu_ready import decode_cudnn  # one decoder for both probes (they are copied side by side)


def nccl_version():
    if torch.version.cuda is None:
        return None
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL
        return None
    return ".".join(str(part) for part in version[:3]) if isinstance(version, tuple) else str(version)


print(json.dumps({
    "python": platform.python_version(),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "cudnn": decode_cudnn(torch.backends.cudnn.version()) if torch.version.cuda and torch.backends.cudnn.version() else None,
    "nccl": nccl_version(),
}))
