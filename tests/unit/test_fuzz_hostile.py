"""Every matrix field and every CLI value, sent shell metacharacters, newlines, control
characters, rich markup and path tricks, is refused with a message or rendered inert; never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
import unicodedata
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchimages import cli
from torchimages.build import render
from torchimages.errors import HIDDEN, UserError
from torchimages.input import matrix, specs
from torchimages.input.matrix import LIST_FIELDS

from .conftest import ROOT, shell_words
from .hostile import hostile

# Requirements the grammar must accept although a shell would act on them: a PEP 508 marker's string holds anything
# but its own quote. Only quoting where they are used keeps them inert.
marker_requirements = hostile.filter(lambda v: '"' not in v and "\\" not in v and v.isprintable()).map(
    lambda v: f'einops; platform_machine != "{v}"')
ENTRY = {"flavor": "cpu", "torch": "2.13.0", "python": "3.11", "variants": ["jupyter", "ssh"]}
FIELDS = ["name", "flavor", "torch", "cuda", "cudnn", "python", "ngc", "base_image", "variants", "apt", "pip", "registry"]


def document(field: str, value: str) -> str:
    entry = dict(ENTRY)
    registry = "registry.example.com/ml/pytorch"
    if field == "registry":
        registry = value
    else:
        entry[field] = [value] if field in LIST_FIELDS else value
    return yaml.safe_dump({"registry": registry, "images": [entry]}, allow_unicode=True)


def instruction_names(dockerfile: Path) -> list[str]:
    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.read_bytes()))
    return [i["instruction"] for i in parser.structure if i["instruction"] != "COMMENT"]


BENIGN: dict[str, list[str]] = {}


def benign_instructions(variant: str) -> list[str]:
    """The instruction names of the plain entry's render, per variant: what any accepted value must render into."""
    if not BENIGN:
        with tempfile.TemporaryDirectory() as tmp:
            plan = specs.resolve(matrix.loads(document("apt", "git")))
            render.write(plan, "v1", Path(tmp) / "out")
            for image in plan.specs[0].image_names():
                BENIGN[image.removeprefix(plan.specs[0].name).lstrip("-") or "base"] = instruction_names(
                    Path(tmp) / "out" / image / "Dockerfile")
    return BENIGN[variant]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELDS), hostile | marker_requirements)
def test_every_matrix_field_refuses_or_renders_inert(field: str, value: str) -> None:
    try:
        plan = specs.resolve(matrix.loads(document(field, value), "fuzz.yaml"))
    except UserError as exc:
        assert exc.problems and all(str(p).startswith("fuzz.yaml") for p in exc.problems), exc.problems
        assert all("\n" not in str(p) and "\r" not in str(p) for p in exc.problems), "a message spans lines"
        return
    with tempfile.TemporaryDirectory() as tmp:
        render.write(plan, "v1", Path(tmp) / "out")
        spec = plan.specs[0]
        for image in spec.image_names():
            dockerfile = Path(tmp) / "out" / image / "Dockerfile"
            variant = image.removeprefix(spec.name).lstrip("-") or "base"
            assert instruction_names(dockerfile) == benign_instructions(variant), f"{field}={value!r} changed {image}"
            if field in ("apt", "pip") and variant == "base":
                parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.read_bytes()))
                runs = [shell_words(i["value"]) for i in parser.structure if i["instruction"] == "RUN"]
                # as the matrix read it: YAML folds a line break it allows in a quoted scalar (U+0085) to a space
                [loaded] = spec.pip if field == "pip" else spec.apt
                assert any(loaded in words for words in runs), f"{value!r} (read as {loaded!r}) is not one shell word"


OPTIONS = [
    ["validate", "--matrix", "{}"],
    ["matrix", "--tag", "{}"],
    ["render", "--tag", "{}", "--out", "out"],
    ["--tag", "{}", "--dry-run"],
    ["--tag", "v1", "--only", "{}", "--dry-run"],
    ["--tag", "v1", "--dry-run", "--images", "out/{}"],
    ["--tag", "v1", "--dry-run", "--push", "--registry", "{}"],
    ["--tag", "v1", "--dry-run", "--push", "--registry", "r.example.com/ml/x", "--registry-user", "{}"],
    ["--tag", "v1", "--dry-run", "--apt-mirror", "{}"],
    ["--tag", "v1", "--dry-run", "--pip-index-url", "{}"],
    ["--tag", "v1", "--dry-run", "--torch-index-url", "{}"],
    ["--tag", "v1", "--dry-run", "--base-image", "{}"],
    ["--tag", "v1", "--dry-run", "--ca-bundle", "{}"],
    ["--tag", "v1", "--dry-run", "--wheelhouse", "{}"],
    ["--tag", "v1", "--dry-run", "--max-images", "{}"],
    ["--tag", "v1", "--dry-run", "--jobs", "{}"],
    ["--tag", "v1", "--dry-run", "--max-growth", "{}"],
    ["--tag", "v1", "--dry-run", "--push", "--registry", "r.example.com/ml/x", "--candidate", "{}"],
    ["render", "--check", "--tag", "{}"],
    ["manifest", "--registry", "{}", "--out", "out/m.json", "report.json"],
]


def run_in_process(args: list[str], cwd: Path) -> tuple[int, str]:
    """cli.run as `python build.py ARGS` runs it, in this process (a subprocess per example would take minutes)."""
    stderr = io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        old_argv = sys.argv
        sys.argv = ["build.py", *args]
        try:
            cli.run()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.argv = old_argv
    return code, stderr.getvalue()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout-like folder two levels down, so a value that climbs out of it can be seen."""
    root = tmp_path_factory.mktemp("fuzz-cli")
    cwd = root / "a" / "b"
    cwd.mkdir(parents=True)
    (cwd / "matrix.yaml").write_text((ROOT / "matrix.yaml").read_text())
    (cwd / "report.json").write_text(json.dumps({"release": "v1", "matrix": "matrix.yaml", "images": []}))
    return cwd


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(OPTIONS), hostile)
def test_every_cli_value_is_refused_with_a_message_or_accepted(workspace: Path, option: list[str], value: str) -> None:
    if "\x00" in value:  # an OS argument vector cannot hold NUL: no user can pass one
        value = value.replace("\x00", "")
    before = sorted(p.name for p in workspace.parents[1].iterdir())
    args = [a.replace("{}", value) for a in option]
    code, stderr = run_in_process(args, workspace)
    allowed = (0, 1, 2) if "--check" in args else (0, 2)  # render --check exits 1 for a stale folder
    assert "Traceback" not in stderr and code in allowed, f"{args!r}: exit {code}\n{stderr[-2000:]}"
    if code == 2:
        assert stderr.strip(), f"{args!r}: exit 2 without a message"
    hidden = {c for c in stderr if c != "\n" and unicodedata.category(c) in HIDDEN}
    assert not hidden, f"{args!r}: the message prints raw control characters {hidden}: {stderr!r}"
    assert sorted(p.name for p in workspace.parents[1].iterdir()) == before, f"{args!r} wrote outside its folder"
