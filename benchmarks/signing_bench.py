"""What signing and attesting add to a release's push and promote, in one run. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/signing_bench.py REPORT [--rounds 2]

REPORT is a tested build report of images on this engine (the main job's reports/RELEASE/build-report.json, e.g. of
the README's CPU command). Each round pushes the report's images as candidates and promotes them twice, to two fresh
private registries (each push uploads every layer, no cross-repository mount): once plainly, once with --sign-key
(each image attested: SBOM, provenance, smoke results; every release tag signed, the attestations verified first). The
order alternates between rounds, and the SBOMs are made once before the first round (syft's scans are cached by image
ID, so both sides reuse them). Goal: signing and attesting add at most 10 % to push and promote.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from cache_bench import registry  # noqa: E402

REPOSITORY = "bench/signing"


def build_py(*args: str, password: str, stdin: str | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), *args], cwd=ROOT, capture_output=True, text=True,
                            check=False, input=stdin, env={**os.environ, "TORCHIMAGES_REGISTRY_PASSWORD": password})
    if result.returncode != 0:
        sys.exit(f"build.py {' '.join(args[:2])} failed:\n{result.stderr[-2000:]}")
    return time.monotonic() - started, result


def release(report: Path, matrix_path: Path, folder: Path, key: Path | None) -> tuple[float, float]:
    """Push REPORT's images as candidates to a fresh registry and promote them; the seconds of each."""
    with registry(folder / "registry") as (host, password):
        copy = folder / "report.json"
        shutil.copy(report, copy)
        common = ["--registry", f"{host}/{REPOSITORY}", "--registry-user", "bench", "--plain",
                  "--tag", json.loads(report.read_text())["release"]]
        signing = ["--sign-key", str(key)] if key else []
        pushed, _ = build_py("push", "--report", str(copy), "--candidate", "rc.1", "--manifest",
                             str(folder / "candidates.json"), *common, *signing, password=password)
        promoted, _ = build_py("promote", "--candidates", str(folder / "candidates.json"), "--manifest",
                               str(folder / "release.json"), "--matrix", str(matrix_path), *common, *signing,
                               password=password)
    return pushed, promoted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--matrix", type=Path, default=ROOT / "matrix.yaml",
                        help="the matrix of exactly the report's images (promote asks for every image it makes)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="signing-bench-") as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, str(ROOT / "build.py"), "keygen", "--out", str(folder / "keys")], check=True,
                       capture_output=True)
        key = folder / "keys" / "cosign.key"
        release(args.report.resolve(), args.matrix.resolve(), folder / "warm", None)  # the SBOMs made once, for both
        rows = []
        for round_number in range(args.rounds):
            order = [None, key] if round_number % 2 == 0 else [key, None]
            for signing in order:
                where = folder / f"round{round_number}-{'signed' if signing else 'plain'}"
                pushed, promoted = release(args.report.resolve(), args.matrix.resolve(), where, signing)
                rows.append((round_number, bool(signing), pushed, promoted))
                shutil.rmtree(where, ignore_errors=True)
    print(f"{'round':>5} {'signed':>6} {'push s':>8} {'promote s':>9} {'total s':>8}")
    for round_number, signed, pushed, promoted in rows:
        print(f"{round_number:>5} {'yes' if signed else 'no':>6} {pushed:8.1f} {promoted:9.1f} {pushed + promoted:8.1f}")
    plain = sum(p + q for _, s, p, q in rows if not s)
    signed_total = sum(p + q for _, s, p, q in rows if s)
    print(f"signing and attesting add {100 * (signed_total - plain) / plain:.1f} % to push and promote "
          f"({signed_total:.1f} s against {plain:.1f} s over {args.rounds} round(s); goal: at most 10 %)")


if __name__ == "__main__":
    main()
