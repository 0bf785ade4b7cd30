"""Build inputs checked before anything is built, and the build args they become."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from torchimages.build.inputs import BuildInputs
from torchimages.errors import UserError

from ..conftest import ROOT, run_cli


@pytest.mark.parametrize("mirror", ["http://user:secret@mirror.example.com", "https://ghp_token@mirror.example.com/debian",
                                    "http://user:@mirror.example.com:8080"])
def test_an_apt_mirror_with_credentials_is_refused(mirror: str) -> None:
    with pytest.raises(UserError, match="--apt-mirror must not contain credentials"):
        BuildInputs(apt_mirror=mirror).check()


@pytest.mark.parametrize("command", [["build", "--images", "no-such-folder"], ["--dry-run"], []])
def test_an_apt_mirror_with_credentials_is_refused_before_anything_is_rendered_or_built(tmp_path: Path,
                                                                                       command: list[str]) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    result = run_cli(*command, "--tag", "v2.7", "--only", "torch*-cpu-*", "--apt-mirror", "http://u:secret@mirror.example.com",
                     cwd=tmp_path)
    assert result.returncode == 2 and "--apt-mirror must not contain credentials" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "matrix.yaml"], "something was rendered before the refusal"


def test_a_plain_apt_mirror_is_accepted_and_passed_as_a_build_arg() -> None:
    inputs = BuildInputs(apt_mirror="http://mirror.example.com")
    inputs.check()
    assert inputs.buildargs(base_image=None)["APT_MIRROR"] == "http://mirror.example.com"


def test_build_args_carry_the_inputs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "FTP_PROXY",
                 "ftp_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("https_proxy", "http://proxy.example.com:3128")
    (tmp_path / "x-1.0-py3-none-any.whl").write_bytes(b"")
    inputs = BuildInputs(pip_index_url="https://pypi.example.com/simple", torch_index_url="https://torch.example.com/cpu",
                         wheelhouse=tmp_path, offline=True)
    inputs.check()
    assert inputs.buildargs(base_image="local/debian:12") == {
        "HTTPS_PROXY": "http://proxy.example.com:3128", "PIP_INDEX_URL": "https://pypi.example.com/simple",
        "TORCH_INDEX_URL": "https://torch.example.com/cpu", "BASE_IMAGE": "local/debian:12", "OFFLINE": "1"}
    monkeypatch.delenv("https_proxy")
    assert BuildInputs().buildargs(base_image=None) == {}, "nothing given, nothing passed: the Dockerfile's defaults hold"


@pytest.mark.parametrize(("inputs", "message"), [
    (BuildInputs(offline=True), "--offline needs --wheelhouse DIR"),
    (BuildInputs(ca_bundle=ROOT / "no-such-ca.pem"), "no-such-ca.pem: no such file"),
    (BuildInputs(wheelhouse=ROOT / "templates"), "no .whl files there"),
])
def test_inputs_that_cannot_work_are_refused(inputs: BuildInputs, message: str) -> None:
    with pytest.raises(UserError, match=message):
        inputs.check()


@pytest.mark.parametrize(("inputs", "message"), [
    (BuildInputs(apt_mirror="http://mirror.example.com#&\\1"), "--apt-mirror 'http://mirror.example.com#&\\\\1' is not an http"),
    (BuildInputs(apt_mirror="ftp://mirror.example.com"), "is not an http(s) URL"),
    (BuildInputs(pip_index_url="https://pypi.example.com/simple --trusted-host evil"), "is not an http(s) URL"),
    (BuildInputs(torch_index_url="https://download.pytorch.org/whl/cpu\nRUN id"), "--torch-index-url: holds the control"),
    (BuildInputs(base_image="debian:bookworm\nRUN id"), "--base-image: holds the control"),
    (BuildInputs(base_image="$(id)"), "--base-image: '$(id)' is not an image reference"),
])
def test_urls_and_the_base_image_have_a_grammar(inputs: BuildInputs, message: str) -> None:
    with pytest.raises(UserError) as caught:
        inputs.check()
    assert message in str(caught.value.problems[0].message), caught.value.problems


def test_ordinary_urls_and_base_images_pass() -> None:
    BuildInputs(apt_mirror="http://172.17.0.1:8080", pip_index_url="https://user:token@pypi.example.com/simple/",
                torch_index_url="https://download.pytorch.org/whl/cu121",
                base_image="127.0.0.1:5443/ml/base:v1@sha256:" + "0" * 64).check()


@pytest.mark.parametrize(("name", "value"), [("HTTPS_PROXY", "http://proxy.example.com:3128\nRUN id"),
                                             ("no_proxy", "localhost,\x1b[2J.example.com"),
                                             ("http_proxy", "http://ci:s3cret@proxy.example.com:3128\u202e")])
def test_a_proxy_variable_that_is_not_one_line_of_text_is_refused_before_anything_is_built(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str) -> None:
    """Proxies come from the environment and go to every build as they are (Docker's predefined build arguments): one
    that is not one line of visible text is refused, named, its password never shown."""
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError) as refused:
        BuildInputs().check()
    message = str(refused.value)
    assert message.startswith(f"{name}: holds the control or invisible character") and "\n" not in message, message
    assert "s3cret" not in message
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    result = run_cli("--tag", "v2.7", "--dry-run", cwd=tmp_path)  # refused before the plan, as the other inputs are
    assert result.returncode == 2 and f"{name}: holds the control" in result.stderr, result.stderr


def test_a_proxy_with_credentials_is_passed_but_never_hashed_into_the_content_label(monkeypatch: pytest.MonkeyPatch,
                                                                                   tmp_path: Path) -> None:
    from torchimages.build.cache import content_digest

    (tmp_path / "Dockerfile").write_text("FROM x\nRUN true\n")
    parent = "sha256:" + "1" * 64
    monkeypatch.setenv("HTTPS_PROXY", "http://ci:s3cret@proxy.example.com:3128")
    BuildInputs().check()
    args = BuildInputs().buildargs(base_image=None)
    assert args["HTTPS_PROXY"] == "http://ci:s3cret@proxy.example.com:3128"
    assert content_digest(tmp_path, args, parent) == content_digest(tmp_path, {}, parent)
