"""`build.py bake` (torchimages/build/bake.py): each target is given what the build runner gives a BuildKit build of
the same image (build arguments, labels, platform, the staged context's files), with pip's network settings in the
secret file and the proxies read where bake runs; a variant built from its base's image, as `build` builds it. Through
the fake engine and a builder that records what it is asked; buildx builds an exported file in
tests/integration/build/test_buildkit.py."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.buildpy import build_py
from torchimages.build import bake, render
from torchimages.build.buildkit import as_secret
from torchimages.build.inputs import BuildInputs
from torchimages.build.jobs import BuildRunner, Selection, plan_jobs

from ..conftest import ROOT, plan_of, run_cli
from ..fake_engine import FakeEngine
from .test_platform_jobs import AMD64_BASE, ARM64_BASE, ENTRY, NAME, RecordingBuilder, image

PROXY = "http://user:proxy-secret@proxy.example.com:3128"


class ContextRecordingBuilder(RecordingBuilder):
    def build(self, image: str, context: Path, tag: str, **options: object) -> object:  # type: ignore[override]
        outcome = super().build(image, context, tag, **options)  # type: ignore[arg-type]
        self.asked[-1]["files"] = sorted(str(p.relative_to(context)) for p in context.rglob("*"))
        self.asked[-1]["tag"] = tag
        return outcome


def inputs(tmp_path: Path) -> BuildInputs:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "numpy-2.4.6-cp311-cp311-manylinux_2_28_aarch64.whl"):
        (wheels / name).write_bytes(b"wheel")
    return BuildInputs(pip_index_url="https://token:index-secret@pypi.example.com/simple", wheelhouse=wheels,
                       platform_bases=(("linux/amd64", AMD64_BASE), ("linux/arm64", ARM64_BASE)))


def runner_and_jobs(tmp_path: Path, *, without: str = "") -> tuple[BuildRunner, list, ContextRecordingBuilder]:
    """The entry rendered (`without` a kind of file), its jobs, and a runner over the fake engine that records."""
    plan = plan_of(ENTRY)
    render.write(plan, "v1", tmp_path / "images")
    for removed in (tmp_path / "images").glob(f"*/{without}") if without else ():
        removed.unlink()
    given = inputs(tmp_path)
    jobs = plan_jobs(plan, "v1", tmp_path / "images", Selection(), base_for=given.base_for)
    engine = FakeEngine(images={AMD64_BASE: image("amd64"), ARM64_BASE: image("arm64")}).engine
    builder = ContextRecordingBuilder(dockerfile="Dockerfile.buildkit")
    return BuildRunner(engine, given, lambda _event: None, builder=builder), jobs, builder


@pytest.fixture
def both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], dict, Path]:
    """What the runner gives each build, and the bake file exported from the same plan and inputs."""
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    runner, jobs, builder = runner_and_jobs(tmp_path)
    runner.run(jobs)
    path, _data = bake.export(jobs, runner_and_jobs(tmp_path / "again")[0], tmp_path / "bake")
    return builder.asked, json.loads(path.read_text()), tmp_path / "bake"


def test_each_target_is_given_what_the_runner_gives_that_build(both: tuple[list[dict], dict, Path],
                                                                tmp_path: Path) -> None:
    asked, data, out = both
    assert len(asked) == len(data["target"]) == 4  # base and ssh, for amd64 and arm64
    for build in asked:
        target = data["target"][bake.target_name(build["image"])]
        context = Path(target["context"])
        assert sorted(str(p.relative_to(context)) for p in context.rglob("*")) == build["files"]
        assert (target["labels"], target["platforms"], target["tags"]) == (build["labels"], [build["platform"]],
                                                                           [build["tag"]])
        dockerfile = context / target["dockerfile"]
        declared = set(bake.ARG_LINE.findall(dockerfile.read_text()))
        if (context / "Dockerfile.buildkit").is_file():  # the installing images: pip's settings in the secret
            assert dockerfile.name == "Dockerfile.buildkit"
            kept, _options = as_secret(build["buildargs"], tmp_path / "secret.env")
            secret = out / "secrets" / f"{build['image']}.env"
            assert target["secret"] == [f"id=build-env,src={secret.resolve()}"]
            assert secret.read_text() == (tmp_path / "secret.env").read_text() and "index-secret" in secret.read_text()
            assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        else:
            assert dockerfile.name == "Dockerfile" and "secret" not in target
            kept = build["buildargs"]
        assert "BASE_IMAGE" in declared
        assert target["args"] == {**{k: v for k, v in kept.items() if k in declared}, "HTTPS_PROXY": "${HTTPS_PROXY}"}
    assert data["target"][bake.target_name(f"{NAME}-arm64")]["args"]["TORCH_INSTALL"] == "cross"


def test_no_secret_is_written_into_the_bake_file_and_a_variant_is_built_from_its_base_s_image(
        both: tuple[list[dict], dict, Path]) -> None:
    _asked, data, out = both
    text = (out / bake.BAKE_FILE).read_text()
    assert "proxy-secret" not in text and "index-secret" not in text
    assert data["variable"] == {"HTTPS_PROXY": {"default": ""}}
    base, ssh = (data["target"][bake.target_name(f"{NAME}{suffix}")] for suffix in ("-arm64", "-ssh-arm64"))
    assert ssh["args"]["BASE_IMAGE"] == base["tags"][0] and "contexts" not in ssh  # the base's image, as build gives it
    assert data["group"][f"{bake.target_name(NAME)}-all"]["targets"] == list(data["target"])
    assert data["group"]["default"]["targets"] == list(data["target"])
    assert data["group"]["bases"]["targets"] == [bake.target_name(f"{NAME}-amd64"), bake.target_name(f"{NAME}-arm64")]
    assert all(name.replace("-", "").replace("_", "").isalnum() for name in data["target"])


def test_a_declared_argument_that_carries_credentials_is_read_where_bake_runs(tmp_path: Path) -> None:
    """A context built from its classic Dockerfile (no Dockerfile.buildkit) declares the index URL as an argument:
    its token is not written into the file either."""
    runner, jobs, _builder = runner_and_jobs(tmp_path, without="Dockerfile.buildkit")
    path, _data = bake.export(jobs, runner, tmp_path / "bake")
    data = json.loads(path.read_text())
    base = data["target"][bake.target_name(f"{NAME}-amd64")]
    assert base["dockerfile"] == "Dockerfile" and base["args"]["PIP_INDEX_URL"] == "${PIP_INDEX_URL}"
    assert "PIP_INDEX_URL" in data["variable"] and "index-secret" not in path.read_text()


def test_matrix_format_bake_needs_a_folder_and_an_engine_and_writes_nothing_without_them(tmp_path: Path) -> None:
    """`matrix --format bake` writes what `bake` writes: a folder (it is no listing to print) from what the engine
    holds (the FROM images' IDs, for the content digest): without either, one line and exit 2, nothing written."""
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    assert run_cli("render", "--tag", "v2.7", cwd=tmp_path).returncode == 0
    no_folder = run_cli("matrix", "--format", "bake", "--tag", "v2.7", cwd=tmp_path)
    assert no_folder.returncode == 2 and "give --out DIR" in no_folder.stderr, no_folder.stderr
    nowhere = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}  # the session's engines answer
    no_engine = build_py("matrix", "--format", "bake", "--tag", "v2.7", "--out", "bake", cwd=tmp_path, env=nowhere,
                         timeout=60)
    assert no_engine.returncode == 2 and "no Docker engine answers" in no_engine.stderr, no_engine.stderr
    assert "Traceback" not in no_engine.stderr and not (tmp_path / "bake").exists()
