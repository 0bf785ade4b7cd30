"""Print the versions torch sees at run time, as JSON."""

import json
import platform

import torch


def decode_cudnn(value):
    """torch.backends.cudnn.version(): 8.x is major*1000+minor*100+patch, 9.x is major*10000+minor*100+patch."""
    if value is None:
        return None
    if value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}"


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
    "cudnn": decode_cudnn(torch.backends.cudnn.version()) if torch.version.cuda else None,
    "nccl": nccl_version(),
}))
