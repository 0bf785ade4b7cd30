"""Without --builder, the build uses the engine's own default: BuildKit from Docker 23, the classic builder on 20.10;
--builder (or TORCHIMAGES_BUILDER) still chooses (torchimages/build/stage.py:builder_of, engine.default_builder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchimages import cli
from torchimages.build.buildkit import BuildKitBuilder, BuildKitCli
from torchimages.build.classic import ClassicBuilder
from torchimages.build.stage import builder_of
from torchimages.errors import UserError
from torchimages.options import build_options_from

from ..fake_engine import FakeEngine
from .test_buildkit_stream import NO_ATTESTATIONS, fake_docker


@pytest.mark.parametrize(("version", "named", "expected"), [
    ("20.10.24+dfsg1", None, ClassicBuilder),
    ("22.06.0-beta.0", None, ClassicBuilder),
    ("23.0.0", None, BuildKitBuilder),
    ("26.1.5+dfsg1", None, BuildKitBuilder),
    ("29.1.2", None, BuildKitBuilder),
    ("26.1.5+dfsg1", "classic", ClassicBuilder),
    ("20.10.24+dfsg1", "buildkit", BuildKitBuilder),
    ("unknown", None, ClassicBuilder),
])
def test_the_builder_follows_the_engine_unless_named(version: str, named: str | None, expected: type) -> None:
    assert isinstance(builder_of(named, FakeEngine(version=version).engine), expected)


@pytest.mark.parametrize(("args", "env", "expected"), [([], None, None), (["--builder", "classic"], None, "classic"),
                                                       ([], "buildkit", "buildkit")])
def test_the_command_leaves_the_choice_to_the_engine_unless_told(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  args: list[str], env: str | None,
                                                                  expected: str | None) -> None:
    """`build.py build` without --builder (or TORCHIMAGES_BUILDER) hands the build no builder, so the engine's decides."""
    monkeypatch.delenv("TORCHIMAGES_BUILDER", raising=False)
    if env:
        monkeypatch.setenv("TORCHIMAGES_BUILDER", env)
    with cli.build.make_context("build", ["--tag", "v1", *args]) as context:
        options = build_options_from("v1", tmp_path, context.params, repository="registry.example.com/ml/pytorch")
    assert options.builder == expected


# A docker CLI with buildx that knows two builders: `fleet` (the remote driver: loads into DOCKER_HOST's engine) and
# `sidectx` (the docker driver of a context whose engine is at SIDE). What it was asked goes to the file `asked`.
SIDE = "unix:///var/run/side.sock"
BUILDERS = f"""echo "$@" >> "$(dirname "$0")/asked"
case "$*" in
  "buildx inspect fleet") printf 'Name:   fleet\\nDriver: remote\\n'; exit 0 ;;
  "buildx inspect sidectx") printf 'Name:   sidectx\\nDriver: docker\\n'; exit 0 ;;
  "buildx inspect "*) echo "ERROR: no builder \\"$3\\" found" >&2; exit 1 ;;
  "context inspect sidectx --format "*) echo {SIDE}; exit 0 ;;
esac
exit 3
"""


def buildx_cli(tmp_path: Path) -> BuildKitCli:
    return BuildKitCli(str(fake_docker(tmp_path / "cli", "27.3.1", buildx=True, script=BUILDERS)), "27.3.1", buildx=True)


def test_a_named_buildx_builder_is_checked_before_any_build_and_named_on_the_build(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", SIDE)
    cli = buildx_cli(tmp_path)
    remote = BuildKitBuilder(FakeEngine().engine, cli, instance="fleet")
    assert remote.selects == ["--builder", "fleet"] and "builder fleet" in remote.describe()
    assert cli.command(remote.selects) == [cli.path, "buildx", "build", "--builder", "fleet", "--load", *NO_ATTESTATIONS]
    # the docker driver builds on its context's engine: buildx wants the context named, and it is this run's engine
    assert BuildKitBuilder(FakeEngine().engine, cli, instance="sidectx").selects == ["--context", "sidectx"]
    assert cli.command(["--context", "sidectx"]) == [cli.path, "--context", "sidectx", "buildx", "build", "--load", *NO_ATTESTATIONS]


@pytest.mark.parametrize(("instance", "host", "words"), [
    ("nosuch", SIDE, 'no buildx builder nosuch answers here (ERROR: no builder "nosuch" found)'),
    ("sidectx", "unix:///var/run/docker.sock", f"builds on the engine of docker context sidectx ({SIDE}), not on this "
                                                "run's unix:///var/run/docker.sock"),
    ("--push", SIDE, "'--push' is not a builder name"),
    ("../x", SIDE, "'../x' is not a builder name"),
])
def test_a_builder_that_cannot_serve_this_run_is_one_line_before_any_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                            instance: str, host: str, words: str) -> None:
    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(UserError) as refused:
        BuildKitBuilder(FakeEngine().engine, buildx_cli(tmp_path), instance=instance)
    assert words in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_a_named_buildx_builder_needs_buildkit_and_the_plugin(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"but this build uses the classic builder \(the default of this Docker 20\.10\.24"):
        builder_of(None, FakeEngine().engine, instance="fleet")
    with pytest.raises(UserError, match=r"\(--builder classic\): build with --builder buildkit"):
        builder_of("classic", FakeEngine(version="27.3.1").engine, instance="fleet")
    old = BuildKitCli(str(fake_docker(tmp_path / "old", "20.10.24")), "20.10.24", buildx=False)
    with pytest.raises(UserError, match="needs the buildx plugin"):
        BuildKitBuilder(FakeEngine().engine, old, instance="fleet")


def test_the_command_takes_the_buildx_builder_by_option_or_environment(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("TORCHIMAGES_BUILDX_BUILDER", "fleet")
    with cli.build.make_context("build", ["--tag", "v1"]) as context:
        assert build_options_from("v1", tmp_path, context.params, repository="r.example/x").buildx_builder == "fleet"
    with cli.build.make_context("build", ["--tag", "v1", "--buildx-builder", "other"]) as context:
        assert build_options_from("v1", tmp_path, context.params, repository="r.example/x").buildx_builder == "other"


CONTAINERD = [["driver-type", "io.containerd.snapshotter.v1"]]


def test_zstd_layers_are_exported_as_built_on_the_containerd_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--compression zstd: buildx's image exporter into the engine's store, every layer zstd under OCI media types,
    instead of --load (whose layers the push gzips); gzip, the default, keeps --load."""
    monkeypatch.setenv("DOCKER_HOST", SIDE)
    cli = buildx_cli(tmp_path)
    current = FakeEngine(version="26.1.5+dfsg1", driver_status=CONTAINERD).engine
    zstd = BuildKitBuilder(current, cli, compression="zstd")
    assert cli.command(zstd.selects, zstd.output) == [
        cli.path, "buildx", "build", "--output=type=image,compression=zstd,force-compression=true,oci-mediatypes=true",
        *NO_ATTESTATIONS]
    gzip = BuildKitBuilder(current, cli)
    assert gzip.output is None and "--load" in cli.command(gzip.selects, gzip.output)
    # a builder of this engine (the docker driver, named by its context) keeps what it exported
    assert BuildKitBuilder(current, cli, instance="sidectx", compression="zstd").output == zstd.output


def test_zstd_where_the_layers_would_not_stay_so_is_one_line_before_any_build(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", SIDE)
    cases = [
        (lambda: builder_of(None, FakeEngine().engine, compression="zstd"),
         "uses the classic builder (the default of this Docker 20.10.24 engine), whose layers the push gzips"),
        (lambda: builder_of("classic", FakeEngine(version="27.3.1", driver_status=CONTAINERD).engine, compression="zstd"),
         "uses the classic builder (--builder classic)"),
        (lambda: BuildKitBuilder(FakeEngine().engine, buildx_cli(tmp_path), compression="zstd"),
         "needs an engine with the containerd image store, which keeps the layers as BuildKit compressed them for the "
         "push: Docker 20.10.24 here has the classic store"),
        (lambda: BuildKitBuilder(FakeEngine(driver_status=CONTAINERD).engine,
                                 BuildKitCli(str(fake_docker(tmp_path / "old", "20.10.24")), "20.10.24", buildx=False),
                                 compression="zstd"),
         "--compression zstd needs the buildx plugin"),
        (lambda: BuildKitBuilder(FakeEngine(driver_status=CONTAINERD).engine, buildx_cli(tmp_path), instance="fleet",
                                 compression="zstd"),
         "--compression zstd with --buildx-builder fleet: a builder of another driver than docker loads the image"),
    ]
    for make, words in cases:
        with pytest.raises(UserError) as refused:
            make()
        assert words in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_the_command_takes_the_compression_by_option_or_environment(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.delenv("TORCHIMAGES_COMPRESSION", raising=False)
    with cli.build.make_context("build", ["--tag", "v1"]) as context:
        assert build_options_from("v1", tmp_path, context.params, repository="r.example/x").compression == "gzip"
    monkeypatch.setenv("TORCHIMAGES_COMPRESSION", "zstd")
    with cli.build.make_context("build", ["--tag", "v1"]) as context:
        assert build_options_from("v1", tmp_path, context.params, repository="r.example/x").compression == "zstd"
