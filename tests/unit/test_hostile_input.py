"""Hostile and careless input: render never deletes what it did not write, names and
release tags are matched whole, and each refusal exits 2 with a message, never a traceback."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from torchimages import registry
from torchimages.errors import UserError
from torchimages.files import atomic_write
from torchimages.input import matrix, specs

from .conftest import ROOT, AnsweringHandler, build_py, problems_of, run_cli

HEAD = "registry: registry.example.com/ml/pytorch\nimages:\n"


def test_render_refuses_a_folder_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    for out in (tmp_path, tmp_path / "."):
        result = run_cli("render", "--tag", "v1", "--out", str(out))
        assert result.returncode == 2 and "refusing to replace a folder that render did not write" in result.stderr
        assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".git", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_render_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "images").write_text("a file")
    result = run_cli("render", "--tag", "v1", "--out", str(tmp_path / "images"))
    assert result.returncode == 2 and "is a file, not a folder" in result.stderr and "Traceback" not in result.stderr
    assert (tmp_path / "images").read_text() == "a file"


def test_render_replaces_its_own_output_and_leaves_no_staging_folder(tmp_path: Path) -> None:
    out = tmp_path / "images"
    assert run_cli("render", "--tag", "v1", "--out", str(out)).returncode == 0
    leftover = out / "torch2.13.0-cpu-py3.11" / "leftover.txt"
    leftover.write_text("from an earlier render")
    assert run_cli("render", "--tag", "v2", "--out", str(out)).returncode == 0
    assert not leftover.exists() and '"release": "v2"' in (out / "rendered.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images"], "a staging or replaced folder was left behind"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("render", "--tag", "v1", "--out", str(empty)).returncode == 0


@pytest.mark.parametrize("tag", ["../../../tmp/evil", "v 1", "[/x]", "a" * 129, "-v1", "v1\n", "v1:latest", ""])
@pytest.mark.parametrize("command", [["render", "--out", "OUT"], ["--dry-run"], ["matrix"]])
def test_a_release_tag_outside_dockers_grammar_is_refused(tmp_path: Path, tag: str, command: list[str]) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    args = [str(tmp_path / "out") if a == "OUT" else a for a in command]
    result = run_cli(*args, "--tag", tag, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "is not a valid release tag" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml"]


def longest_release() -> str:
    """The longest release whose image tags (RELEASE-IMAGE) all fit Docker's 128 characters, for this matrix."""
    plan = specs.resolve(matrix.load(ROOT / "matrix.yaml"))
    return "a" * (128 - 1 - max(len(name) for spec in plan.specs for name in spec.image_names()))


@pytest.mark.parametrize("tag", ["v2.7", "V2.7_rc-1", "_nightly", longest_release()])
def test_release_tags_inside_the_grammar_are_accepted(tag: str) -> None:
    result = run_cli("--tag", tag, "--only", "torch*-cpu-*", "--dry-run")
    assert result.returncode == 0, result.stderr


def test_a_release_one_character_longer_makes_a_tag_docker_refuses() -> None:
    result = run_cli("--tag", longest_release() + "a", "--only", "torch*-cpu-*", "--dry-run")
    assert result.returncode == 2 and "would be 129 characters; Docker's limit is 128" in result.stderr, result.stderr


def test_a_trailing_newline_does_not_pass_the_name_or_registry_patterns() -> None:
    [name] = problems_of(HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.11", name: "cpu\\n"}\n')
    assert "field 'name': holds the control or invisible character U+000A at position 4" in name
    assert "\n" not in name, "the message itself must stay on one line"
    [registry] = problems_of('registry: "registry.example.com/ml/pytorch\\n"\nimages:\n'
                             '  - {flavor: cpu, torch: "2.13.0", python: "3.11"}\n')
    assert "'registry.example.com/ml/pytorch\\n' is not a registry/repository reference" in registry


@pytest.mark.parametrize("name", ["[/oops]", "[bold]x[/bold]"])
def test_markup_in_user_text_is_printed_as_it_is(tmp_path: Path, name: str) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(HEAD + f'  - {{flavor: cpu, torch: "2.13.0", python: "3.11", name: "{name}"}}\n')
    result = run_cli("validate", "--matrix", str(matrix))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"'{name}' is not a valid image name" in result.stderr, "markup was swallowed from the message"


@pytest.mark.parametrize(("extra", "message"), [
    (["--registry", "ci:secret@r.example.com/ml/x"], "--registry must not carry credentials"),
    (["--registry", "r.example.com/ml/x", "--password-stdin"], "--password-stdin needs --registry-user"),
])
def test_push_options_are_refused_before_anything_is_rendered_or_built(tmp_path: Path, extra: list[str],
                                                                      message: str) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    for dry in ([], ["--dry-run"]):
        result = run_cli("--tag", "v2.7", "--only", "torch*-cpu-*", "--push", *extra, *dry, cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml"]


def test_an_alias_bomb_is_refused() -> None:
    lines = ["registry: registry.example.com/ml/pytorch", 'a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 9)]
    lines.append("images: *a8")
    # Without the limit this document expands to 9^9 values: minutes and gigabytes, not this message.
    problems = problems_of("\n".join(lines) + "\n")
    assert "the document expands to more than 20000 values" in problems[0], problems


def test_a_matrix_past_256_combinations_is_refused() -> None:
    axis = "[" + ", ".join(f'"{i}"' for i in range(10)) + "]"
    text = ("registry: registry.example.com/ml/pytorch\nmatrix:\n  flavor: [cpu]\n"
            f"  torch: {axis}\n  python: {axis}\n  cuda: {axis}\n  cudnn: {axis}\n  ngc: {axis}\n  apt: [{axis}]\n")
    problems = problems_of(text)
    assert problems == ["matrix.yaml:2: matrix: expands to 100000 combinations; at most 256 images (GitHub Actions' "
                        "job-matrix limit): split the matrix, or raise the limit with --max-images"], problems


def test_the_image_limit_counts_listed_images_and_max_images_raises_it(tmp_path: Path) -> None:
    matrix = tmp_path / "big.yaml"
    matrix.write_text(HEAD + "".join(f'  - {{flavor: cpu, torch: "2.13.0", python: "3.11", name: n{i}}}\n' for i in range(300)))
    refused = run_cli("validate", "--matrix", str(matrix))
    assert refused.returncode == 2 and "field 'images': lists 300 images; at most 256" in refused.stderr, refused.stderr
    raised = run_cli("matrix", "--matrix", str(matrix), "--max-images", "300", "--format", "json")
    assert raised.returncode == 0, raised.stderr
    assert len(json.loads(raised.stdout)) == 300
    both = tmp_path / "both.yaml"
    both.write_text(HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.11", name: a}\n'
                    'matrix:\n  flavor: [cpu]\n  torch: ["2.13.0"]\n  python: ["3.11", "3.12"]\n')
    assert run_cli("validate", "--matrix", str(both), "--max-images", "3").returncode == 0
    tight = run_cli("validate", "--matrix", str(both), "--max-images", "2")
    assert tight.returncode == 2 and "expands to 2 combinations beside 1 listed images; at most 2 images" in tight.stderr


def test_deep_nesting_is_a_located_error_not_a_traceback() -> None:
    problems = problems_of("registry: r.example.com/ml/x\nimages: " + "[" * 5000 + "]" * 5000 + "\n")
    assert problems == ["matrix.yaml: nesting deeper than 50 levels"], problems


REPORT = {"release": "v1", "matrix": "matrix.yaml", "images": [{
    "image": "x", "entry": "x", "variant": "base", "tag": "r/x:v1-x", "result": "built", "versions": {},
    "stages": {"push": {"reference": "r.example.com/ml/x:v1-x", "digest": "sha256:" + "a" * 64, "error": None}}}]}


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "not a build report (not JSON"), ("[1, 2]", "TypeError"), ('{"release": "v1", "matrix": "m"}', "KeyError"),
    (json.dumps({**REPORT, "images": [{**REPORT["images"][0], "bogus": 1}]}), "TypeError"),
    (json.dumps(REPORT), "no smoke results"),
])
def test_manifest_of_a_malformed_report_is_a_clear_error(tmp_path: Path, content: str, why: str) -> None:
    report = tmp_path / "report.json"
    report.write_text(content)
    result = run_cli("manifest", "--registry", "r.example.com/ml/x", "--out", str(tmp_path / "m.json"), str(report))
    assert result.returncode == 2 and why in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("marker", ["[]", '{"release": 7}', "{"])
def test_a_malformed_rendered_json_is_not_a_traceback(tmp_path: Path, marker: str) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "rendered.json").write_text(marker)
    result = run_cli("render", "--check", "--out", str(images))
    assert result.returncode == 2 and "no recorded release: give --tag" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("release", ["v2.7\nARG BASE_IMAGE=evil.example/debian:bookworm\n#", "v2.٧", "", "../v2.7"])
def test_a_recorded_release_goes_through_the_grammar_like_a_typed_tag(tmp_path: Path, release: str) -> None:
    """rendered.json is a file render wrote, read back by render, render --check and matrix when no --tag is given (the
    weekly refresh runs exactly that): a release the grammar refuses never reaches a Dockerfile or a listing."""
    images = tmp_path / "images"
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    assert run_cli("render", "--tag", "v2.7", "--out", str(images)).returncode == 0
    (images / "rendered.json").write_text(json.dumps({"release": release, "matrix": "matrix.yaml", "images": []}))
    before = tree_of(images)
    for args in (["render", "--check", "--out", str(images)], ["render", "--out", str(images)],
                 ["matrix", "--format", "json"]):
        result = run_cli(*args, cwd=tmp_path) if args[0] == "matrix" else run_cli(*args)
        assert result.returncode == 2 and "no recorded release: give --tag" in result.stderr, (args, result.stderr)
        assert "ARG BASE_IMAGE" not in result.stdout and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert tree_of(images) == before


@pytest.mark.parametrize(("config", "outcome"), [
    ("[]", None), ('{"auths": []}', None), ('{"auths": {"r.example.com": "x"}}', "Invalid configuration for registry"),
    ("{", "not valid JSON"), ('{"auths": {"r.example.com": {"auth": "!!!"}}}', "are not base64 user:password"),
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"), ("\udcff", "not valid JSON"),
])
def test_a_malformed_docker_config_is_ignored_or_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str,
                                                       outcome: str | None) -> None:
    (tmp_path / "config.json").write_bytes(config.encode("utf-8", "surrogateescape"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    if outcome is None:
        assert registry.credentials_from_docker_config("r.example.com") is None
    else:
        with pytest.raises(UserError, match=outcome):
            registry.credentials_from_docker_config("r.example.com")


def test_atomic_write_leaves_no_temporary_file_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*_args: object) -> None:
        raise OSError("the disk is full")

    monkeypatch.setattr(Path, "replace", failing)  # the final rename fails
    with pytest.raises(OSError):
        atomic_write(tmp_path / "report.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_refuses_a_folder_a_link_or_a_device_before_writing(tmp_path: Path) -> None:
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    for path, words in ((tmp_path / "folder.json", "is a folder"), (tmp_path / "link.json", "is a link"),
                        (Path("/dev/null"), "is under /dev")):
        with pytest.raises(UserError, match=words):
            atomic_write(path, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.json", "link.json"]


def test_another_matrix_renders_beside_the_committed_images_never_over_them(tmp_path: Path) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    (tmp_path / "nightly.yaml").write_text(HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.12", name: nightly-cpu}\n')
    assert run_cli("render", "--tag", "v1", cwd=tmp_path).returncode == 0
    committed = tree_of(tmp_path / "images")
    other = run_cli("render", "--tag", "n1", "--matrix", "nightly.yaml", cwd=tmp_path)
    assert other.returncode == 0 and "under images/nightly for release n1" in other.stdout, other.stderr
    assert (tmp_path / "images/nightly/nightly-cpu/Dockerfile").is_file()
    assert {k: v for k, v in tree_of(tmp_path / "images").items() if not k.startswith("nightly/")} == committed
    # Rendering the main matrix again keeps the other render, and neither --check sees the other's files.
    assert run_cli("render", "--tag", "v1", cwd=tmp_path).returncode == 0
    assert (tmp_path / "images/nightly/nightly-cpu/Dockerfile").is_file()
    assert run_cli("render", "--check", cwd=tmp_path).returncode == 0
    assert run_cli("render", "--check", "--matrix", "nightly.yaml", cwd=tmp_path).returncode == 0
    plan = run_cli("--tag", "n1", "--matrix", "nightly.yaml", "--dry-run", cwd=tmp_path)
    assert "1 images from the contexts in images/nightly/" in plan.stdout, plan.stdout
    given = run_cli("--tag", "n1", "--matrix", "nightly.yaml", "--images", "elsewhere", "--dry-run", cwd=tmp_path)
    assert "from the contexts in elsewhere/" in given.stdout, given.stdout


def test_a_nested_render_named_like_an_image_is_not_swallowed(tmp_path: Path) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    name = "torch2.13.0-cpu-py3.11"
    (tmp_path / f"{name}.yaml").write_text(HEAD + '  - {flavor: cpu, torch: "2.13.0", python: "3.12", name: x}\n')
    assert run_cli("render", "--tag", "v1", "--matrix", f"{name}.yaml", cwd=tmp_path).returncode == 0
    clash = run_cli("render", "--tag", "v1", cwd=tmp_path)
    assert clash.returncode == 2 and "holds another matrix's render" in clash.stderr, clash.stderr
    assert (tmp_path / "images" / name / "x" / "Dockerfile").is_file()


def tree_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_render_check_reports_a_link_in_the_rendered_folder(tmp_path: Path, kind: str) -> None:
    """A build copies what a link points at: a link anywhere under images/ makes it stale, even to identical content."""
    images = tmp_path / "images"
    assert run_cli("render", "--tag", "v2.7", "--out", str(images)).returncode == 0
    context = next(p for p in sorted(images.iterdir()) if (p / "image").is_dir())
    if kind == "folder":
        shutil.copytree(context / "image", tmp_path / "elsewhere")
        shutil.rmtree(context / "image")
        (context / "image").symlink_to(tmp_path / "elsewhere")
    else:
        (tmp_path / "Dockerfile").write_bytes((context / "Dockerfile").read_bytes())
        (context / "Dockerfile").unlink()
        (context / "Dockerfile").symlink_to(tmp_path / "Dockerfile")
    result = run_cli("render", "--check", "--out", str(images))
    linked = context / ("image" if kind == "folder" else "Dockerfile")
    assert result.returncode == 1 and f"  {linked}\n" in result.stderr, result.stderr


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:9", "bogus://x", "tcp://[::1", "unix:///no/such.sock\x1b[2J\nforged"])
def test_a_docker_host_where_no_engine_answers_is_one_line(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    """DOCKER_HOST is the environment's word for where the engine is: an address nothing answers at, or one that is no
    address, is one line naming it (exit 2), never a traceback."""
    from torchimages.engine import Engine, EngineUnavailable

    monkeypatch.setenv("DOCKER_HOST", address)
    with pytest.raises(EngineUnavailable) as refused:
        Engine()
    message = str(refused.value)
    assert "no Docker engine answers at" in message and "set DOCKER_HOST" in message, message
    assert "\n" not in message and "\x1b" not in message, message


class AgedEngine(AnsweringHandler):
    """A Docker API that answers its ping and its /version with the version the test gives (`answers`)."""

    answers: ClassVar[dict] = {}

    def do_GET(self) -> None:
        if self.path.endswith("/_ping"):
            self.answer(200, b"OK", {"Content-Type": "text/plain", "Api-Version": "1.40"})
        else:
            self.answer(200, json.dumps({"ApiVersion": "1.40", **self.answers}).encode(), {"Content-Type": "application/json"})

    do_HEAD = do_GET


ENGINES = [({"Version": "19.03.15", "Components": [{"Name": "Engine", "Version": "19.03.15"}]}, "'19.03.15', older"),
           ({"Version": "1.13.1"}, "'1.13.1', older"),  # before components were listed
           ({"Version": "19.03.0\x1b[2J\nforged", "Components": [{"Name": "Engine"}]}, "older than 20.10"),
           ({"Version": "20.10.24+dfsg1", "Components": [{"Name": "Engine"}]}, None),
           ({"Version": "26.1.5+dfsg1", "Components": [{"Name": "Engine"}]}, None),
           ({"Version": "4.9.3", "Components": [{"Name": "Podman Engine"}]}, None)]  # numbered otherwise: not judged


@pytest.mark.parametrize(("answers", "said"), ENGINES)
def test_a_docker_engine_older_than_the_floor_is_one_line(monkeypatch: pytest.MonkeyPatch, answers: dict,
                                                          said: str | None) -> None:
    """An engine below the oldest generation the tool is tested on (20.10) is refused where it is first asked, one line
    naming its version (exit 2); a supported one, or an engine that is not Docker's, is used."""
    from torchimages.engine import Engine, UnsupportedEngine

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Engine", (AgedEngine,), {"answers": answers}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.server_port}")
    try:
        if said is None:
            assert Engine(timeout=10).version() == answers["Version"]
            return
        with pytest.raises(UnsupportedEngine) as refused:
            Engine(timeout=10)
        message = str(refused.value)
        assert said in message and "docs/engines.md" in message, message
        assert "\n" not in message and "\x1b" not in message and refused.value.exit_code == 2, message
        result = run_cli("test", "--tag", "v1")
        assert result.returncode == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1, \
            result.stderr
    finally:
        server.shutdown()


class EmptyIndex(AnsweringHandler):
    """A package index that lists no file: compat refresh then asks the wheel indexes, whose root is the variable's."""

    def do_GET(self) -> None:
        self.answer(200, b'{"files": []}', {"Content-Type": "application/vnd.pypi.simple.v1+json"})


@pytest.fixture(scope="module")
def empty_index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EmptyIndex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/simple/torch/"
    server.shutdown()


DRY = ["--tag", "v1", "--dry-run"]
REFRESH = ["compat", "refresh", "--check"]
# Each TORCHIMAGES_* variable an option reads, a hostile value, the command, and the words of its refusal: the value
# goes through the option's own checks (click's type, the callback, the rule the stage applies).
OPTION_VARIABLES = [
    ("TORCHIMAGES_MATRIX", "{tmp}/no-such.yaml", ["validate"], "no-such.yaml: cannot read file"),
    ("TORCHIMAGES_PLATFORM", "linux/riscv64", DRY, "Invalid value for '--platform'"),
    ("TORCHIMAGES_BUILDER", "kaniko; id", DRY, "Invalid value for '--builder'"),
    ("TORCHIMAGES_WHEELHOUSE", "{tmp}/empty", DRY, "no .whl files there"),
    ("TORCHIMAGES_OFFLINE", "maybe", DRY, "Invalid value for '--offline'"),
    ("TORCHIMAGES_PIP_INDEX_URL", "https://pypi.example.com/simple --trusted-host evil", DRY, "is not an http(s) URL"),
    ("TORCHIMAGES_TORCH_INDEX_URL", "https://download.pytorch.org/whl/cpu\nRUN id", DRY, "--torch-index-url: holds the"),
    ("TORCHIMAGES_APT_MIRROR", "http://u:secret@mirror.example.com", DRY, "--apt-mirror must not contain credentials"),
    ("TORCHIMAGES_CA_BUNDLE", "{tmp}/empty", DRY, "Invalid value for '--ca-bundle'"),
    ("TORCHIMAGES_BASE_IMAGE", "$(id)", DRY, "--base-image: '$(id)' is not an image reference"),
    ("TORCHIMAGES_PREVIOUS", "{tmp}/previous.json", DRY, "previous.json: not a release manifest"),
    ("TORCHIMAGES_CACHE_FROM", "UPPER/Case", DRY, "--cache-from UPPER/Case"),
    ("TORCHIMAGES_PYPI_INDEX", "file:///etc/passwd", [*REFRESH, "--skip-wheel-index"], "could not read the indexes"),
    ("TORCHIMAGES_WHEEL_INDEX", "file:///etc", REFRESH, "could not read the indexes (InvalidSchema"),
    ("TORCHIMAGES_ADVISORIES", "{tmp}/previous.json", DRY, "not a folder or a zip of OSV JSON files"),
    ("TORCHIMAGES_ALLOWLIST", "{tmp}/previous.json", DRY, "previous.json: not a readable YAML allowlist"),
]


@pytest.mark.parametrize("case", OPTION_VARIABLES, ids=[v[0] for v in OPTION_VARIABLES])
def test_each_option_variable_is_checked_as_its_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, empty_index: str,
                                                       case: tuple[str, str, list[str], str]) -> None:
    """A CI runner sets these instead of options: a hostile value is refused in the same words, exit 2, nothing made."""
    from .test_fuzz_hostile import run_in_process

    variable, value, command, words = case
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    (tmp_path / "empty").mkdir()
    (tmp_path / "previous.json").write_text("[")
    if variable == "TORCHIMAGES_WHEEL_INDEX":
        monkeypatch.setenv("TORCHIMAGES_PYPI_INDEX", empty_index)
    monkeypatch.setenv(variable, value.replace("{tmp}", str(tmp_path)))
    before = sorted(p.name for p in tmp_path.iterdir())
    code, stderr = run_in_process(command, tmp_path)
    assert code == 2 and words in stderr and "Traceback" not in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("root", ["{tmp}", "{tmp}/no-such\nerror: forged", "/dev/null"])
def test_a_torchimages_root_that_is_no_checkout_is_one_line(tmp_path: Path, root: str) -> None:
    """TORCHIMAGES_ROOT says where templates/ and tests/smoke are: a folder that is no checkout, a path that is not
    there or a device is refused in one line before any command runs (exit 2)."""
    env = {**os.environ, "TORCHIMAGES_ROOT": root.replace("{tmp}", str(tmp_path))}
    result = build_py("validate", cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 2 and "is not a torchimages checkout" in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr


# Every option naming a file or folder to write, pointed where nothing may be written: checked as the command line is
# read (options.output_file and output_folder: torchimages/files.py's rules), before anything is rendered or built.
OUTPUTS = [
    (["render", "--tag", "v1", "--out", "/dev/null"], "--out /dev/null: is under /dev"),
    (["render", "--tag", "v1", "--out", "{tmp}/link"], "is a link"),
    (["--tag", "v1", "--dry-run", "--images", "{tmp}/file.txt"], "--images {tmp}/file.txt: is a file, not a folder"),
    (["--tag", "v1", "--dry-run", "--report", "{tmp}/link"], "--report {tmp}/link: is a link"),
    (["--tag", "v1", "--dry-run", "--report", "/proc/self/environ"], "is under /proc"),
    (["--tag", "v1", "--dry-run", "--logs", "{tmp}/file.txt"], "--logs {tmp}/file.txt: is a file, not a folder"),
    (["--tag", "v1", "--dry-run", "--push", "--registry", "r.example.com/ml/x", "--manifest", "{tmp}"], "is a folder"),
    (["manifest", "--registry", "r.example.com/ml/x", "--out", "/dev/stdout", "{tmp}/file.txt"], "is under /dev"),
]


@pytest.mark.parametrize("case", OUTPUTS, ids=[" ".join(case[0][:1] + case[0][-2:-1]) for case in OUTPUTS])
def test_every_output_option_refuses_a_device_a_link_or_the_wrong_kind_before_any_work(
        tmp_path: Path, case: tuple[list[str], str]) -> None:
    from .test_fuzz_hostile import run_in_process

    args, words = ([a.replace("{tmp}", str(tmp_path)) for a in case[0]], case[1].replace("{tmp}", str(tmp_path)))
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    (tmp_path / "file.txt").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    code, stderr = run_in_process(args, tmp_path)
    assert code == 2 and words in stderr and "Traceback" not in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "link", "matrix.yaml"]
    assert (tmp_path / "file.txt").read_text() == "mine" and not (tmp_path / "elsewhere").exists()
