"""How fast the commands a user runs many times a day answer, against what they cannot go below.

    .venv/bin/python benchmarks/command_speed.py [--runs 7]

Prints medians and ratios, each pair measured interleaved in one run (the machines are noisy):
- `validate` of the default matrix against importing yaml, jinja2, click and rich (issue goal: within 2x);
- `render` of a 510-image matrix (170 entries with both variants) against `cp -r` of its output (goal: 1.5x);
- an unchanged re-render and `render --check` of it, which only read.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run(*command: str, cwd: Path = ROOT) -> None:
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)


def big_matrix(folder: Path) -> Path:
    entries = "".join(f'  - {{flavor: cpu, torch: "2.13.0", python: "3.11", name: e{i}, variants: [jupyter, ssh]}}\n'
                      for i in range(170))
    path = folder / "big.yaml"
    path.write_text("registry: registry.example.com/ml/pytorch\nimages:\n" + entries)
    return path


def compare(name: str, pairs: list[tuple[float, float]], baseline: str, goal: float) -> None:
    ours, base = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    print(f"{name}: {ours:.3f} s (median of {len(pairs)}); {baseline}: {base:.3f} s; ratio {ours / base:.2f}x "
          f"(goal {goal}x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    build = str(ROOT / "build.py")
    validate = [(seconds(lambda: run(PYTHON, build, "validate")),
                 seconds(lambda: run(PYTHON, "-c", "import yaml, jinja2, click, rich"))) for _ in range(runs)]
    compare("validate", validate, "import yaml, jinja2, click, rich", 2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        matrix = big_matrix(folder)
        render, again, check = [], [], []
        for index in range(runs):
            out, copy = folder / f"out{index}", folder / f"copy{index}"
            fresh = seconds(lambda: run(PYTHON, build, "render", "--matrix", str(matrix), "--max-images", "600",
                                        "--tag", "v1", "--out", str(out)))  # noqa: B023
            copied = seconds(lambda: run("cp", "-r", str(out), str(copy)))  # noqa: B023
            render.append((fresh, copied))
            again.append((seconds(lambda: run(PYTHON, build, "render", "--matrix", str(matrix), "--max-images", "600",
                                              "--tag", "v1", "--out", str(out))), copied))  # noqa: B023
            check.append((seconds(lambda: run(PYTHON, build, "render", "--check", "--matrix", str(matrix),
                                              "--max-images", "600", "--out", str(out))), copied))  # noqa: B023
            shutil.rmtree(out)
            shutil.rmtree(copy)
        print(f"render of {len(list((folder / 'big.yaml').read_text().splitlines())) - 2} entries (510 images):")
        compare("  fresh render", render, "cp -r of its output", 1.5)
        compare("  unchanged re-render", again, "cp -r of its output", 1.5)
        compare("  render --check", check, "cp -r of its output", 1.5)


if __name__ == "__main__":
    main()
