"""`build.py selfcheck` reads what the interpreter given with --python printed as its answer: torch's version, its
CUDA and the GPU count. Whatever that program prints, the answer is believed only in that shape, and anything else
is one line naming --python (exit 2), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchimages.verify import selfcheck

GOOD = {"gpus": 1, "cuda": "12.1", "torch": "2.3.1+cu121"}


@pytest.mark.parametrize("printed", [
    "", "not json", "[1, 2]", "[" * 100_000 + "]" * 100_000, json.dumps({**GOOD, "gpus": -1}),
    json.dumps({**GOOD, "gpus": True}), json.dumps({**GOOD, "gpus": "1"}), json.dumps({**GOOD, "torch": "2.3.1\nforged"}),
    json.dumps({**GOOD, "torch": None}), json.dumps({**GOOD, "cuda": "12.1; rm -rf /"}),
    json.dumps({**GOOD, "torch": "\x1b]0;owned\x07"}),
], ids=["nothing", "text", "list", "nested", "negative", "bool", "string-count", "newline", "no-torch", "shell",
        "escape"])
def test_a_probe_answer_outside_its_shape_is_one_line_naming_the_interpreter(printed: str) -> None:
    with pytest.raises(selfcheck.SelfcheckError) as refused:
        selfcheck.facts_from("/opt/py/bin/python", printed)
    message = str(refused.value)
    assert message.startswith("--python /opt/py/bin/python: printed") and "\n" not in message, message
    assert "\x1b" not in message and len(message) < 300, message


def test_the_last_line_is_the_answer_and_a_cpu_torch_has_no_cuda() -> None:
    printed = "a warning torch printed first\n" + json.dumps({**GOOD, "cuda": None, "gpus": 0})
    assert selfcheck.facts_from("python", printed) == {**GOOD, "cuda": None, "gpus": 0}


def test_an_interpreter_that_prints_a_hostile_answer_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' '{\"gpus\": 1, \"cuda\": null, \"torch\": \"$(id)\"}'\n")
    fake.chmod(0o755)
    assert selfcheck.main(["--python", str(fake)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: --python {fake}: printed") and "not torch's version" in error, error


def test_selfcheck_runs_on_a_python_with_torch_pytest_and_testinfra_only() -> None:
    """A GPU host's Python has torch, pytest and testinfra (requirements-selfcheck.txt): selfcheck imports nothing else
    of this project's requirements (no Docker SDK, click, rich, yaml or packaging)."""
    import subprocess
    import sys

    from ..conftest import ROOT

    code = ("import builtins, sys; real = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    if name.split('.')[0] in ('docker', 'click', 'rich', 'yaml', 'packaging', 'jinja2', 'requests'):\n"
            "        raise ModuleNotFoundError(name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            "import torchimages.verify.selfcheck\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
