"""Training-speed benchmark, run inside an image (or with a host's own Python for --local).

Measures side by side, in one process: a conv net training step with cudnn.benchmark off and on, a
transformer block training step in fp32 and under AMP fp16 and bf16, and a large matmul with TF32 off
and on. On a machine without a GPU it runs what applies: a transformer block step in fp32 and under
CPU bf16 autocast. Prints one JSON object: {"device": ..., "rows": [{"case", "a", "b", "a_per_s",
"b_per_s", "speedup", "unit"}]}.
"""

import json
import os
import sys
import time

import torch
from torch import nn

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0


def timed(step, device):
    """Steps per second of `step` over about SECONDS, after warm-up."""
    for _ in range(3):
        step()
    sync(device)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < SECONDS:
        step()
        count += 1
        if count % 5 == 0:
            sync(device)
    sync(device)
    return count / (time.perf_counter() - started)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def training_step(model, batch, device, dtype=None):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = model(batch).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def transformer(device, width):
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(d_model=width, nhead=8, dim_feedforward=4 * width, batch_first=True)
    return block.to(device)


def conv_net(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(device)


def row(case, names, speeds, unit):
    (a, b), (a_per_s, b_per_s) = names, speeds
    return {"case": case, "a": a, "b": b, "a_per_s": round(a_per_s, 3), "b_per_s": round(b_per_s, 3),
            "speedup": round(b_per_s / a_per_s, 3), "unit": unit}


def gpu_rows():
    rows = []
    batch = torch.randn(64, 3, 128, 128, device="cuda")
    speeds = []
    for benchmark in (False, True):
        torch.backends.cudnn.benchmark = benchmark
        speeds.append(timed(training_step(conv_net("cuda"), batch, "cuda"), "cuda") * 64)
    rows.append(row("conv net training step", ("cudnn.benchmark off", "cudnn.benchmark on"), speeds, "images/s"))
    torch.backends.cudnn.benchmark = False  # the rows below compare precisions, not autotuning
    exact_fp32()  # the fp32 baseline is fp32, whatever TF32 default this torch has
    tokens = torch.randn(32, 256, 1024, device="cuda")
    fp32 = timed(training_step(transformer("cuda", 1024), tokens, "cuda"), "cuda") * 32
    fp16 = timed(training_step(transformer("cuda", 1024), tokens, "cuda", torch.float16), "cuda") * 32
    rows.append(row("transformer block training step", ("fp32", "AMP fp16"), (fp32, fp16), "sequences/s"))
    if torch.cuda.get_device_capability() >= (8, 0):
        bf16 = timed(training_step(transformer("cuda", 1024), tokens, "cuda", torch.bfloat16), "cuda") * 32
        rows.append(row("transformer block training step", ("fp32", "AMP bf16"), (fp32, bf16), "sequences/s"))
    a, b = torch.randn(8192, 8192, device="cuda"), torch.randn(8192, 8192, device="cuda")
    flops = []
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        flops.append(timed(lambda: a @ b, "cuda") * 2 * 8192**3 / 1e12)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows.append(row("matmul 8192x8192", ("TF32 off", "TF32 on"), flops, "TFLOP/s"))
    return rows


def exact_fp32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def tf32_note():
    """TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes cuBLAS use TF32 whatever the flags say: then 'fp32' is TF32."""
    if os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1":
        return "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: the fp32 and TF32-off rows ran with TF32"
    return ""


def cpu_rows():
    tokens = torch.randn(8, 64, 256)
    fp32 = timed(training_step(transformer("cpu", 256), tokens, "cpu"), "cpu") * 8
    bf16 = timed(training_step(transformer("cpu", 256), tokens, "cpu", torch.bfloat16), "cpu") * 8
    return [row("transformer block training step (CPU)", ("fp32", "CPU autocast bf16"), (fp32, bf16), "sequences/s")]


if __name__ == "__main__":
    gpu = torch.cuda.is_available()
    result = {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "torch": torch.__version__,
              "rows": gpu_rows() if gpu else cpu_rows(), "note": tf32_note() if gpu else ""}
    print(json.dumps(result))
