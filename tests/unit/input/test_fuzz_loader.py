"""Random and malformed YAML never escapes as anything but a clean UserError."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchimages.errors import UserError
from torchimages.input import matrix, specs
from torchimages.input.matrix import ENTRY_FIELDS

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=12), st.sampled_from(["2.3", "2.3.1", "12.1", "3.11", "cuda", "cpu", "ngc",
                                                           "24.05", "jupyter", "ssh", "8.9"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from([*ENTRY_FIELDS, "x"]), inner, max_size=5), max_leaves=20)
entries = st.dictionaries(st.sampled_from([*ENTRY_FIELDS, "bogus"]), values, max_size=8)
documents = st.fixed_dictionaries(
    {}, optional={"registry": st.one_of(scalars, st.just("registry.example.com/ml/pytorch")),
                  "images": st.one_of(values, st.lists(entries, max_size=4)),
                  "matrix": st.one_of(values, st.dictionaries(st.sampled_from([*ENTRY_FIELDS, "include", "exclude"]),
                                                              st.lists(values, max_size=3), max_size=4)),
                  "junk": values})


def check(text: str) -> None:
    try:
        specs.resolve(matrix.loads(text, "fuzz.yaml"))
    except UserError as exc:
        assert exc.problems, "a UserError always carries at least one problem"
        assert all(str(p).startswith("fuzz.yaml") for p in exc.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    check(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_random_structured_documents(document: dict) -> None:
    check(yaml.safe_dump(document))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["registry: a.b/c\n", "images:\n", "  - ", "{", "}", "[", "]", "flavor: cpu",
                                 "torch: '2.3'", ", ", "\n", "&a ", "*a ", "!!python/object:os.system ", "? ",
                                 ":", "'", '"', "\t", "- - -", "<<: *a\n"]), max_size=30))
def test_malformed_fragments(pieces: list[str]) -> None:
    check("".join(pieces))


def refused(text: str) -> list[str]:
    """The problems a document is refused with; a document that loads fails the test."""
    with pytest.raises(UserError) as caught:
        specs.resolve(matrix.loads(text, "fuzz.yaml"))
    return [str(p) for p in caught.value.problems]


def test_recursive_alias_is_a_clean_error() -> None:
    [problem] = refused("registry: a.b/c\nimages: &x [*x]\n")
    assert problem.startswith("fuzz.yaml:2: ") and "recursive alias" in problem, problem


def test_python_object_tag_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    refused(f"registry: a.b/c\nimages: !!python/object/apply:os.system ['touch {marker}']\n")
    assert not marker.exists(), "loading the matrix ran the command in a !!python/object/apply tag"


@pytest.mark.parametrize("kind", ["folder", "not-utf8", "device", "too-big"])
def test_a_matrix_path_that_is_no_yaml_text_is_one_line(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """--matrix names any path: a folder, bytes that are not UTF-8, a device that never ends (/dev/zero) or a file too
    big for a matrix is one line naming it, read no further than the limit."""
    from torchimages.input import yamlsource

    path = {"folder": tmp_path, "device": Path("/dev/zero")}.get(kind, tmp_path / "matrix.yaml")
    if kind == "not-utf8":
        path.write_bytes(b"registry: r.example.com/ml/x\n\xff\xfe\n")
    if kind == "too-big":
        monkeypatch.setattr(yamlsource, "MAX_BYTES", 1000)
        path.write_text("# padding\n" * 200)
    with pytest.raises(UserError) as refused:
        matrix.load(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: cannot read file") and "\n" not in message, message
