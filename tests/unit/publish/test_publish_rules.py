"""Publishing's rules that need no registry: retries and backoff, the transient/denied split, credentials."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from torchimages import registry
from torchimages.errors import UserError
from torchimages.input.specs import Release
from torchimages.publish import push as publish
from torchimages.publish.pushstage import PushOptions
from torchimages.report import ImageRecord, Report, SmokeStage

from ..conftest import ROOT


def publisher(**options: object) -> publish.Publisher:
    return publish.Publisher(None, "registry.example.com/ml/pytorch", Release("v2.7"), credentials=None, **options)


def failing(message: str) -> tuple[list[int], object]:
    calls: list[int] = []

    def action() -> None:
        calls.append(1)
        raise publish.PushError(message, transient=publish.is_transient(message))
    return calls, action


def test_transient_failures_are_retried_three_times_after_1_2_and_4_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(publish.time, "sleep", slept.append)
    calls, action = failing("received unexpected HTTP status: 503 Service Unavailable")
    outcome = publish.PushOutcome("img", "r:t")
    with pytest.raises(publish.PushError, match=r"pushing r:t failed after 4 attempt\(s\): received unexpected"):
        publisher()._retrying(outcome, "pushing r:t", action)
    assert (slept, len(calls), outcome.attempts) == ([1.0, 2.0, 4.0], 4, 4)


def test_a_retry_that_succeeds_stops_retrying(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(publish.time, "sleep", slept.append)
    results = iter([publish.PushError("blob upload unknown", transient=True), "sha256:abc"])

    def action() -> str:
        result = next(results)
        if isinstance(result, Exception):
            raise result
        return result
    assert publisher()._retrying(publish.PushOutcome("img", "r:t"), "pushing", action) == "sha256:abc"
    assert slept == [1.0]


def test_refused_credentials_are_never_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(publish.time, "sleep", slept.append)
    calls, action = failing("unauthorized: authentication required")
    with pytest.raises(publish.PushError, match=r"after 1 attempt\(s\)") as caught:
        publisher()._retrying(publish.PushOutcome("img", "r:t"), "pushing", action)
    assert not caught.value.transient and slept == [] and len(calls) == 1


@pytest.mark.parametrize(("message", "transient"), [
    ("received unexpected HTTP status: 503 Service Unavailable", True),
    ("received unexpected HTTP status: 502 Bad Gateway", True),
    ("blob upload unknown", True),
    ("Get https://r/v2/: dial tcp 127.0.0.1:5000: connect: connection refused", True),
    ("net/http: TLS handshake timeout", True),
    ("write tcp 10.0.0.5:41234->10.0.0.9:5000: write: connection reset by peer", True),
    ("Patch https://r/v2/ml/pt/blobs/uploads/1: unexpected EOF", True),
    ("unauthorized: authentication required", False),
    ("denied: requested access to the resource is denied", False),
    ("received unexpected HTTP status: 403 Forbidden", False),
    ("unauthorized: incorrect username or password (after a timeout)", False),  # denied wins over transient words
    ("manifest invalid: manifest invalid", False),
])
def test_transient_and_denied_errors_are_told_apart(message: str, transient: bool) -> None:
    assert publish.is_transient(message) is transient


def test_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_REGISTRY_PASSWORD", "from-env")
    options = PushOptions("r.example.com/ml/x", registry_user="ci", password_env="MY_REGISTRY_PASSWORD")
    assert options.credentials() == registry.Credentials("ci", "from-env")


def test_password_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("from-stdin\nsecond line\n"))
    monkeypatch.setenv("TORCHIMAGES_REGISTRY_PASSWORD", "not-this-one")
    options = PushOptions("r.example.com/ml/x", registry_user="ci", password_stdin=True)
    assert options.credentials() == registry.Credentials("ci", "from-stdin")


def test_user_without_a_password_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHIMAGES_REGISTRY_PASSWORD", raising=False)
    with pytest.raises(UserError, match="set TORCHIMAGES_REGISTRY_PASSWORD or use --password-stdin"):
        PushOptions("r.example.com/ml/x", registry_user="ci").credentials()


def test_credentials_from_the_docker_config_are_read_and_nothing_is_written(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    auth = base64.b64encode(b"robot:pa:ss").decode()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"r.example.com:5000": {"auth": auth}}}))
    before = config.read_bytes()
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert PushOptions("r.example.com:5000/ml/x").credentials() == registry.Credentials("robot", "pa:ss")
    assert PushOptions("other.example.com/ml/x").credentials() is None
    assert config.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_a_carriage_return_from_stdin_is_not_part_of_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("from-windows\r\n"))
    options = PushOptions("r.example.com/ml/x", registry_user="ci", password_stdin=True)
    assert options.credentials() == registry.Credentials("ci", "from-windows")


def test_password_stdin_without_a_user_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("secret\n"))
    with pytest.raises(UserError, match="--password-stdin needs --registry-user"):
        PushOptions("r.example.com/ml/x", password_stdin=True).credentials()


@pytest.mark.parametrize("registry", ["ci:secret@r.example.com/ml/x", "token@r.example.com:5000/ml/x"])
def test_credentials_in_the_registry_reference_are_refused(registry: str) -> None:
    with pytest.raises(UserError, match="--registry must not carry credentials"):
        PushOptions(registry, registry_user="ci").credentials()


HELPER = """#!/bin/sh
# A docker-credential-* helper as docker calls it: the action as argument, the server URL on stdin.
read -r server
echo "$1 $server" >> "{log}"
case "$1:$server" in
    get:r.example.com:5000) printf '{{"ServerURL": "%s", "Username": "robot", "Secret": "from-helper"}}' "$server" ;;
    get:broken.example.com) echo "the keychain is locked" >&2; exit 1 ;;
    get:*) echo "credentials not found in native keychain"; exit 1 ;;
esac
"""


def install_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict) -> Path:
    bin_dir, log = tmp_path / "bin", tmp_path / "helper.log"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-fake"
    helper.write_text(HELPER.format(log=log))
    helper.chmod(0o755)
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    return log


@pytest.mark.parametrize("config", [{"credsStore": "fake"}, {"credHelpers": {"r.example.com:5000": "fake"}},
                                    {"auths": {"r.example.com:5000": {}}, "credsStore": "fake"}])
def test_credentials_come_from_the_helper_the_docker_config_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  config: dict) -> None:
    log = install_helper(tmp_path, monkeypatch, config)
    assert PushOptions("r.example.com:5000/ml/x").credentials() == registry.Credentials("robot", "from-helper")
    assert log.read_text().splitlines() == ["get r.example.com:5000"]


def test_a_helper_without_an_entry_means_no_credentials_and_a_failing_one_is_named(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    install_helper(tmp_path, monkeypatch, {"credsStore": "fake"})
    assert registry.credentials_from_docker_config("other.example.com") is None
    with pytest.raises(UserError, match=r"the credential helper for broken\.example\.com failed"):
        registry.credentials_from_docker_config("broken.example.com")
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "missing"}))
    with pytest.raises(UserError, match="docker-credential-missing"):
        registry.credentials_from_docker_config("r.example.com:5000")


@pytest.mark.parametrize(("stdin", "message"), [("", "the password on standard input is empty"),
                                                ("\r\n", "the password on standard input is empty")])
def test_start_registry_takes_its_password_from_stdin_only(tmp_path: Path, stdin: str, message: str) -> None:
    result = subprocess.run(["bash", str(ROOT / "scripts" / "start-registry.sh"), str(tmp_path / "r"), "1", "ci"],
                            input=stdin, capture_output=True, text=True, timeout=30, check=False,
                            env={**os.environ, "REGISTRY_PASSWORD": "ignored-now"})
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "r").exists(), "nothing is made before the password is known"


def test_a_base_not_pushed_keeps_back_the_variants_of_its_own_platform() -> None:
    """An entry of two platforms whose arm64 base is over its budget: its arm64 variant is not pushed (it was tested
    FROM that base), and no registry is asked for either."""
    passed = SmokeStage(20, 0, 0, 0, 1.0, 0, {}, None)
    entry = "torch2.14.0-cu130-cudnn9.24-py3.11"
    base = ImageRecord(f"{entry}-arm64", entry, "base", "t:base", "built", {}, smoke=passed, platform="linux/arm64",
                       over_budget="grew 9% over v2.6")
    ssh = ImageRecord(f"{entry}-ssh-arm64", entry, "ssh", "t:ssh", "built", {}, smoke=passed, platform="linux/arm64")
    outcomes = publisher().publish(Report("v2.7", "matrix.yaml", images=[base, ssh]))
    assert [(o.image, o.error, o.tried) for o in outcomes] == [
        (base.image, "not pushed: over its size budget: grew 9% over v2.6", False),
        (ssh.image, f"not pushed: its base {entry} (linux/arm64) was not pushed", False)]


def test_a_digest_the_engines_push_stream_makes_up_is_not_believed_without_the_registrys_read_back() -> None:
    """The push stream is the engine's answer (aux.Digest): the image counts as pushed only when the registry, read back
    after the push, holds that digest under the tag; a made-up one is the image's error, never recorded as pushed."""
    tested = "sha256:" + "e" * 64

    class Engine:
        def image_id(self, _tag: str) -> str:
            return tested

        def tag(self, *_args: object) -> None:
            return None

        def push(self, *_args: object) -> list[dict]:
            return [{"status": "Pushed", "id": "\x1b[2Jlayer"}, {"aux": {"Digest": "sha256:made-up\n", "Size": -1}}]

    class Registry:
        def __init__(self) -> None:  # no tag before the push; then the one the registry really holds
            self.answers = [None, registry.RemoteTag("sha256:" + "a" * 64, tested)]

        def tag(self, _name: str, _tag: str) -> registry.RemoteTag | None:
            return self.answers.pop(0)

    pusher = publish.Publisher(Engine(), "registry.example.com/ml/pytorch", Release("v2.7"), credentials=None,  # type: ignore[arg-type]
                               retries=0)
    pusher.registry = Registry()  # type: ignore[assignment]
    record = ImageRecord("img", "img", "base", "r/img:v2.7", "built", {}, image_id=tested,
                         smoke=SmokeStage(9, 0, 0, 0, 1.0, 0, {}, None, image_id=tested))
    outcome = pusher._publish_one(record, "v2.7-img")
    assert outcome.error == f"the registry reports sha256:{'a' * 64} after the push", outcome
