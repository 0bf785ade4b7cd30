"""`build.py selfcheck`: the suite's GPU and compute checks against a host's own torch (a GPU machine without Docker).

A GPU host often has torch and nothing else, and no network. So this module imports neither the Docker SDK nor
click nor rich: it needs pytest and pytest-testinfra in the interpreter that runs it (requirements-selfcheck.txt,
carried as wheels; see docs/smoke-suite.md) and torch in the one given with --python (by default the same one). The probes
run in the torch interpreter; pytest runs in this one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import UserError, visible
from ..files import atomic_write
from ..input import grammar
from ..settings import SETTINGS
from . import junit
from .suite import SMOKE_DIR, pytest_options

SUITE = ("test_gpu.py", "test_compute.py")
PROBE = ("import json, torch; print(json.dumps({'gpus': torch.cuda.device_count(), 'cuda': torch.version.cuda, "
         "'torch': torch.__version__}))")
NEEDED = {"pytest": "pytest", "testinfra": "pytest-testinfra"}


class SelfcheckError(Exception):
    """Something to fix before the checks can run; printed as one message, exit code 2."""


def torch_facts(python: str) -> dict:
    """torch's version, CUDA and GPU count, read by the interpreter that will run the probes."""
    try:
        completed = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300, check=False)
    except FileNotFoundError:
        raise SelfcheckError(f"--python {python}: no such interpreter") from None
    except PermissionError:
        raise SelfcheckError(f"--python {python}: not executable") from None
    except subprocess.TimeoutExpired:
        raise SelfcheckError(f"{python} took more than 300 s to import torch and count the GPUs") from None
    if "No module named 'torch'" in completed.stderr:
        raise SelfcheckError(f"{python} has no torch: give the interpreter that has it, e.g. --python /usr/bin/python3")
    if completed.returncode != 0:
        tail = " | ".join(completed.stderr.strip().splitlines()[-3:])
        raise SelfcheckError(f"{python} could not import torch and count the GPUs: {tail}")
    return facts_from(python, completed.stdout)


def facts_from(python: str, stdout: str) -> dict:
    """The probe's answer, read as input: its last line a JSON object of a GPU count, torch's version and its CUDA."""
    lines = stdout.strip().splitlines()
    try:
        facts = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):  # not JSON, or nested past Python's limit
        facts = None
    if (not isinstance(facts, dict) or grammar.count_problem(facts.get("gpus"))
            or grammar.text_problem(facts.get("torch"), grammar.version_problem)
            or grammar.optional_problem(facts.get("cuda"), grammar.version_problem)):
        said = repr(visible(lines[-1])[:80]) if lines else "nothing"
        raise SelfcheckError(f"--python {python}: printed {said}, not torch's version, CUDA and GPU count; give the "
                             "interpreter that has torch, e.g. --python /usr/bin/python3")
    return facts


def missing_test_tools() -> list[str]:
    return [package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None]


def command(python: str, host: dict, *, require_gpu: bool, facts_file: Path) -> list[str]:
    facts = {"image": "local", "variant": "base", "flavor": "cuda" if host["cuda"] else "cpu", "expected": {},
             "labels": {}, "user": "", "label_prefix": "", "require_gpu": require_gpu,
             "probes": str(SMOKE_DIR / "probes"), "jupyter": None, "ssh": None,
             "gpus": host["gpus"], "python": python}
    facts_file.write_text(json.dumps(facts))
    return [sys.executable, "-m", "pytest", *(str(SMOKE_DIR / name) for name in SUITE), "--hosts=local://",
            f"--facts={facts_file}", *pytest_options(), "-v", "-rs"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="build.py selfcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that has torch (default: this one); pytest runs in this one")
    parser.add_argument("--require-gpu", action="store_true", help="fail, instead of skip, the GPU checks without a GPU")
    parser.add_argument("--junit", type=Path, help="folder to write selfcheck.xml into: a JUnit testcase per check")
    args = parser.parse_args(argv)
    try:
        if not (SETTINGS.root / "tests" / "smoke").is_dir():
            raise SelfcheckError(f"{SETTINGS.root} has no tests/smoke: run selfcheck in the project's checkout")
        missing = missing_test_tools()
        if missing:
            raise SelfcheckError(f"{sys.executable} lacks {', '.join(missing)}: install requirements-selfcheck.txt into "
                                 "it (offline: from the wheels the GPU-host steps of docs/smoke-suite.md carry along)")
        host = torch_facts(args.python)
    except SelfcheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"selfcheck: torch {host['torch']}, CUDA {host['cuda']}, {host['gpus']} GPU(s), probes run by {args.python}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
        pytest = command(args.python, host, require_gpu=args.require_gpu, facts_file=Path(tmp) / "facts.json")
        if args.junit:
            pytest += [f"--junitxml={Path(tmp) / 'junit.xml'}", "-o", "junit_family=xunit2"]
        started = time.monotonic()
        code = subprocess.run(pytest, check=False, cwd=SETTINGS.root).returncode
        if args.junit:
            return junit_written(Path(tmp) / "junit.xml", args.junit, host, time.monotonic() - started) or code
    return code


def junit_written(pytest_file: Path, folder: Path, host: dict, seconds: float) -> int:
    """The checks pytest ran as FOLDER/selfcheck.xml; 2 when that cannot be done (said on stderr)."""
    try:
        checks = junit.pytest_checks(pytest_file)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "selfcheck.xml"
        properties = {"torch": host["torch"], "cuda": host["cuda"] or "none", "gpus": str(host["gpus"])}
        atomic_write(path, junit.document([junit.checks_suite("selfcheck", checks, properties=properties,
                                                              seconds=seconds)]))
    except (RuntimeError, OSError, UserError) as exc:
        print(f"error: --junit {folder}: {exc}", file=sys.stderr)
        return 2
    print(f"junit: {path}")
    return 0
