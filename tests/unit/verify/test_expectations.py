"""The smoke suite's expectations come from the matrix text: edit the matrix and they follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchimages.build.jobs import Selection, plan_jobs
from torchimages.input import matrix, specs
from torchimages.verify.smoke import Target

from ..conftest import ROOT

CPU_ENTRY = 'torch: "2.13.0"\n    python: "3.11"'


@pytest.mark.parametrize(("torch", "python"), [("2.13.0", "3.11"), ("2.12.0", "3.12")])
def test_the_suite_expects_what_the_matrix_says(torch: str, python: str) -> None:
    text = (ROOT / "matrix.yaml").read_text()
    assert CPU_ENTRY in text, "matrix.yaml's CPU entry changed: update this test's edit"
    edited = text.replace(CPU_ENTRY, f'torch: "{torch}"\n    python: "{python}"')
    plan = specs.resolve(matrix.loads(edited, "matrix.yaml"))
    jobs = plan_jobs(plan, "v1", Path("images"), Selection(only=("torch*-cpu-*",)))
    assert sorted(job.variant for job in jobs) == ["base", "jupyter", "ssh"]
    for job in jobs:
        expected = Target.of(job.spec, job.variant, job.tag).expected
        assert (expected["torch"], expected["python"], expected["cuda"], expected["cudnn"]) == (torch, python, None, None)
