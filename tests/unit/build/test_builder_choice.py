"""Without --builder, the build uses the engine's own default: BuildKit from Docker 23, the classic builder on 20.10;
--builder (or TORCHIMAGES_BUILDER) still chooses (torchimages/build/stage.py:builder_of, engine.default_builder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchimages import cli
from torchimages.build.buildkit import BuildKitBuilder
from torchimages.build.classic import ClassicBuilder
from torchimages.build.stage import builder_of
from torchimages.options import build_options_from

from ..fake_engine import FakeEngine


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
