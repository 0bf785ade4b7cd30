"""The bench command: training speed with and without cuDNN autotuning, AMP and TF32, side by side.

The benchmark script (benchmarks/probes/train_bench.py) runs inside each image, or with this host's
Python (--local); a release can be gated on the AMP speedup of GPU runners (--min-amp-speedup).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from rich.table import Table

from ..engine import ENGINE_ERRORS
from ..errors import UserError, visible
from ..input import grammar
from ..settings import SETTINGS
from .smoke import SmokeRunner

SCRIPT = SETTINGS.root / "benchmarks" / "probes" / "train_bench.py"
TIMEOUT = 1800


def runner() -> SmokeRunner:
    """A runner on an engine connection that waits longer (3600 s) than the benchmark may run (TIMEOUT)."""
    return SmokeRunner()


def in_image(runner: SmokeRunner, tag: str, seconds: float) -> dict[str, Any]:
    """Run the benchmark in a container of `tag` started as users run it (GPUs, a large /dev/shm).

    A failure is returned as {"error": ...}, so one image's failure leaves the other images' results.
    """
    containers = runner.containers
    try:
        container = containers.start(tag, command=["sleep", "infinity"])
        containers.upload(container, [SCRIPT], "torchimages-bench")
        code, stdout, stderr = containers.exec_split(container, ["python", "/tmp/torchimages-bench/train_bench.py",
                                                                 str(seconds)], TIMEOUT)
    except ENGINE_ERRORS as exc:
        return {"error": f"the benchmark could not run in {tag}: {exc}"}
    finally:
        containers.remove_all()
    return parse_result(code, stdout, stderr)


def parse_result(code: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The JSON the script prints on stdout (library warnings go to stderr and are never parsed)."""
    lines = stdout.strip().splitlines()
    if code != 0 or not lines:
        exit_text = "timed out" if code == 124 else f"exited {code}"
        return {"error": f"the benchmark {exit_text}: " + " | ".join(stderr.strip().splitlines()[-3:])}
    try:
        result = json.loads(lines[-1])
    except (ValueError, RecursionError):
        result = None
    if not shaped(result):  # the image's answer: printed, gated and recorded only in the shape the script prints
        return {"error": f"the benchmark printed no result; its last line: {visible(lines[-1][:300])}"}
    return result


ROW_TEXTS = ("case", "a", "b", "unit")
ROW_NUMBERS = ("a_per_s", "b_per_s", "speedup")


def shaped(result: object) -> bool:
    """Whether `result` is the script's shape: device and torch as text, rows of names and finite numbers."""
    if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
        return False
    if not all(isinstance(result.get(key), str) for key in ("device", "torch")):
        return False
    return all(isinstance(row, dict) and all(isinstance(row.get(key), str) for key in ROW_TEXTS)
               and not any(grammar.number_problem(row.get(key)) or row.get(key) is None for key in ROW_NUMBERS)
               for row in result["rows"])


def local(seconds: float, python: str = sys.executable) -> dict[str, Any]:
    """Run the benchmark with a host's own Python (a GPU machine without Docker)."""
    completed = subprocess.run([python, str(SCRIPT), str(seconds)], capture_output=True, text=True, timeout=TIMEOUT,
                               check=False)
    if completed.returncode != 0:
        raise UserError("the benchmark failed; its output ends:", detail=completed.stderr[-3000:])
    result = parse_result(completed.returncode, completed.stdout, completed.stderr)
    if "error" in result:
        raise UserError(result["error"])
    return result


def table(title: str, result: dict[str, Any]) -> Table:
    note = f"; {result['note']}" if result.get("note") else ""
    view = Table(title=f"{title} ({result['device']}, torch {result['torch']}{note})")
    for column in ("case", "baseline", "per s", "with", "per s", "speedup", "unit"):
        view.add_column(column)
    for row in result["rows"]:
        view.add_row(row["case"], row["a"], f"{row['a_per_s']:.1f}", row["b"], f"{row['b_per_s']:.1f}",
                     f"{row['speedup']:.2f}x", row["unit"])
    return view


def amp_gate(result: dict[str, Any], minimum: float) -> str | None:
    """None when the AMP fp16 speedup reaches `minimum`, else why the gate fails."""
    rows = [r for r in result["rows"] if r["b"] == "AMP fp16"]
    if not rows:
        return f"--min-amp-speedup {minimum}: no GPU AMP measurement on {result['device']} (a GPU runner is needed)"
    if rows[0]["speedup"] < minimum:
        return f"AMP fp16 speedup {rows[0]['speedup']:.2f}x is below the required {minimum:.2f}x on {result['device']}"
    return None
