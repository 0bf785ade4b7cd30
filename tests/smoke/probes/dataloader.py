"""A DataLoader with 4 worker processes moving more than 64 MB through shared memory."""

import json

import torch
from torch.utils.data import DataLoader, Dataset


class Chunks(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, index):
        return torch.full((1024, 1024), float(index))  # 4 MB each


def main():
    total, checksum = 0, 0.0
    try:
        for batch in DataLoader(Chunks(), batch_size=4, num_workers=4):
            total += batch.numel() * batch.element_size()
            checksum += float(batch[:, 0, 0].sum())
    except RuntimeError as exc:  # a worker killed by a full /dev/shm ("Bus error") ends up here
        return {"bytes": total, "checksum": checksum, "expected_checksum": float(sum(range(32))),
                "error": str(exc).strip().splitlines()[0]}
    return {"bytes": total, "checksum": checksum, "expected_checksum": float(sum(range(32))), "error": None}


if __name__ == "__main__":  # workers started by spawn or forkserver (the default from Python 3.14) import this file
    print(json.dumps(main()))
