"""An image's content digest covers everything its build reads except the release, so the next
release can reuse an unchanged image (build --cache-from previous) and must rebuild a changed one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from torchimages.build import cache as buildcache
from torchimages.build import render
from torchimages.build.cache import CacheSources, content_digest
from torchimages.build.inputs import BuildInputs
from torchimages.build.jobs import BuildRunner, Selection, plan_jobs
from torchimages.errors import UserError
from torchimages.input import matrix, specs
from torchimages.manifest import ManifestImage, ReleaseManifest, SmokeCounts

from ..conftest import ROOT, digest, plan_of, run_cli
from ..fake_engine import FakeEngine
from .test_platform_jobs import RecordingBuilder

PARENT = "sha256:" + "1" * 64


@pytest.fixture(scope="module")
def plan() -> specs.Plan:
    return specs.resolve(matrix.load(ROOT / "matrix.yaml"))


def rendered(plan: specs.Plan, release: str, folder: Path) -> Path:
    render.write(plan, release, folder)
    return folder


@pytest.fixture(scope="module")
def two_releases(plan: specs.Plan, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return (rendered(plan, "v2.6", tmp_path_factory.mktemp("v2.6")),
            rendered(plan, "v2.7", tmp_path_factory.mktemp("v2.7")))


def test_every_image_has_the_same_content_in_two_releases_but_other_labels(plan: specs.Plan,
                                                                           two_releases: tuple[Path, Path]) -> None:
    old, new = two_releases
    images = [image for spec in plan.specs for _, image in spec.images()]
    assert len(images) == 14
    for image in images:
        assert content_digest(old / image, {}, PARENT) == content_digest(new / image, {}, PARENT), (
            f"{image}: something above the release stamp depends on the release")
        old_stamp = buildcache.stamp_of((old / image / "Dockerfile").read_text())
        new_stamp = buildcache.stamp_of((new / image / "Dockerfile").read_text())
        assert 'version="v2.6"' in old_stamp and 'version="v2.7"' in new_stamp, image


def test_the_stamp_is_the_last_instruction_and_holds_only_labels(two_releases: tuple[Path, Path]) -> None:
    for dockerfile in two_releases[1].glob("*/Dockerfile"):
        stamp = buildcache.stamp_of(dockerfile.read_text())
        instructions = [line.split()[0] for line in stamp.splitlines()
                        if line and not line.startswith((" ", "#"))]
        assert instructions == ["LABEL"], (dockerfile, instructions)


def test_the_digest_follows_files_arguments_and_the_parent(two_releases: tuple[Path, Path], tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    shutil.copytree(two_releases[1] / "torch2.13.0-cpu-py3.11", context)
    digest = content_digest(context, {"OFFLINE": "1"}, PARENT)
    assert digest.startswith("sha256:") and len(digest) == 71

    assert content_digest(context, {"OFFLINE": "1"}, "sha256:" + "2" * 64) != digest, "another FROM image"
    assert content_digest(context, {}, PARENT) != digest, "a build argument"
    assert content_digest(context, {"OFFLINE": "1", "HTTPS_PROXY": "http://p:3128"}, PARENT) == digest, "a proxy"
    assert content_digest(context, {"OFFLINE": "1", "BASE_IMAGE": "x"}, PARENT) == digest, "the parent stands for it"

    (context / "build-config" / "wheelhouse").mkdir(exist_ok=True)
    (context / "build-config" / "wheelhouse" / "numpy-2.0-py3-none-any.whl").write_bytes(b"one")
    with_wheel = content_digest(context, {"OFFLINE": "1"}, PARENT)
    assert with_wheel != digest, "a wheel added"
    (context / "build-config" / "wheelhouse" / "numpy-2.0-py3-none-any.whl").write_bytes(b"two")
    assert content_digest(context, {"OFFLINE": "1"}, PARENT) != with_wheel, "a wheel's bytes"
    other_bytes = content_digest(context, {"OFFLINE": "1"}, PARENT)
    (context / "build-config" / "wheelhouse" / "numpy-2.0-py3-none-any.whl").chmod(0o755)
    assert content_digest(context, {"OFFLINE": "1"}, PARENT) != other_bytes, "a file's mode"
    (context / "build-config" / "wheelhouse" / "numpy-2.0-py3-none-any.whl").unlink()
    assert content_digest(context, {"OFFLINE": "1"}, PARENT) == digest, "the wheel gone again"
    (context / "build-config" / "extra-ca.pem").write_text("-----BEGIN CERTIFICATE-----\none\n")
    with_ca = content_digest(context, {"OFFLINE": "1"}, PARENT)
    assert with_ca != digest, "an extra CA bundle (BuildInputs copies --ca-bundle to build-config/extra-ca.pem)"
    (context / "build-config" / "extra-ca.pem").write_text("-----BEGIN CERTIFICATE-----\ntwo\n")
    assert content_digest(context, {"OFFLINE": "1"}, PARENT) != with_ca, "another CA bundle"
    (context / "build-config" / "extra-ca.pem").unlink()

    dockerfile = context / "Dockerfile"
    text = dockerfile.read_text()
    before = content_digest(context, {"OFFLINE": "1"}, PARENT)
    assert "# ---- final image" in text and 'CMD ["/bin/bash"]' in text and 'io.torchimages.flavor="cpu" \\\n' in text
    for changed, same, why in [
        (text.replace("# ---- final image", "# ---- the final image, said otherwise"), True, "a comment"),
        (text.replace('version="v2.7"', 'version="v9"'), True, "a label's value in the stamp"),
        (text.replace('CMD ["/bin/bash"]', 'CMD ["/bin/sh"]'), False, "an instruction"),
        (text.replace('      io.torchimages.flavor="cpu" \\\n', ""), False, "a label dropped from the stamp"),
    ]:
        dockerfile.write_text(changed)
        assert (content_digest(context, {"OFFLINE": "1"}, PARENT) == before) is same, why


def test_credentials_in_an_index_url_are_not_hashed(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\nRUN true\n")
    with_token = content_digest(tmp_path, {"PIP_INDEX_URL": "https://ci:s3cret@pypi.example/simple"}, PARENT)
    assert with_token == content_digest(tmp_path, {"PIP_INDEX_URL": "https://pypi.example/simple"}, PARENT)
    assert with_token != content_digest(tmp_path, {"PIP_INDEX_URL": "https://mirror.example/simple"}, PARENT)


def previous_release(repository: str = "r.example/ml/pt") -> ReleaseManifest:
    counts = SmokeCounts(1, 0, 0, 0)
    return ReleaseManifest("v2.6", repository, images=(
        ManifestImage("a", "base", digest("aa"), {}, counts, content_digest=digest(1)),
        ManifestImage("b", "base", digest("bb"), {}, counts, content_digest=digest(2)),
        ManifestImage("c", "base", digest("cc"), {}, counts)))  # a manifest written before content digests


def test_only_an_image_with_the_same_digest_is_reused() -> None:
    cache = CacheSources.parse(("previous", "r.example/ml/cache:main"), previous_release(), "r.example/ml/pt")
    assert cache.reusable("a", digest(1)) == f"r.example/ml/pt@{digest('aa')}"
    assert cache.reusable("b", digest(1)) is None
    assert cache.reusable("c", None) is None and cache.reusable("c", digest(3)) is None
    assert cache.reusable("d", digest(1)) is None
    assert cache.layer_sources("b") == [f"r.example/ml/pt@{digest('bb')}", "r.example/ml/cache:main"]
    assert cache.layer_sources("d") == ["r.example/ml/cache:main"]
    assert CacheSources.parse(("r.example/x:1",), None, "r.example/ml/pt").previous == {}
    with pytest.raises(UserError, match="--cache-from previous needs --previous MANIFEST"):
        CacheSources.parse(("previous",), None, "r.example/ml/pt")


def test_only_the_releases_own_repository_is_reused_from() -> None:
    with pytest.raises(UserError, match=r"the --previous manifest's images are in evil\.example/ml/pt, not in this "
                                        r"release's repository r\.example/ml/pt"):
        CacheSources.parse(("previous",), previous_release("evil.example/ml/pt"), "r.example/ml/pt")


@pytest.mark.parametrize("labels", [{}, {buildcache.CONTENT_LABEL: digest(2)},
                                    {buildcache.CONTENT_LABEL: digest(1) + "\n"}, {buildcache.CONTENT_LABEL: 7}])
def test_a_pulled_image_whose_own_content_label_is_not_this_builds_is_not_reused(labels: dict) -> None:
    """The previous release's manifest names the image; the engine's answer for the pulled image (its labels) must say
    the same content, or the image is built."""
    from torchimages.build.jobs import BuildRunner

    class Engine:
        def image_labels(self, _reference: str) -> dict:
            return labels

    events: list = []
    runner = BuildRunner.__new__(BuildRunner)
    runner.engine, runner.emit = Engine(), events.append  # type: ignore[assignment]
    assert runner._labelled("a", "r.example/ml/pt@sha256:aa", digest(1)) is False
    assert "not reused" in events[0].message and "\n" not in events[0].message
    labels_ok = {buildcache.CONTENT_LABEL: digest(1)}
    runner.engine.image_labels = lambda _reference: labels_ok  # type: ignore[method-assign]
    assert runner._labelled("a", "r.example/ml/pt@sha256:aa", digest(1)) is True


def test_the_stamp_dockerfile_writes_the_release_labels_on_the_previous_image(two_releases: tuple[Path, Path]) -> None:
    text = (two_releases[1] / "torch2.13.0-cpu-py3.11-ssh" / "Dockerfile").read_text()
    stamp = buildcache.stamp_dockerfile("r.example/ml/pt@sha256:aa", text)
    lines = [line for line in stamp.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "FROM r.example/ml/pt@sha256:aa" and lines[1].startswith("LABEL ")
    assert stamp.endswith(text[text.index(buildcache.STAMP_MARKER):])
    with pytest.raises(UserError, match="no release stamp"):
        buildcache.stamp_of("FROM x\nLABEL a=b\n")


@pytest.mark.parametrize(("args", "message"), [
    (("--cache-from", "previous"), "--cache-from previous needs --previous MANIFEST"),
    (("--cache-from", "r.example/x:1", "--no-cache"), "--cache-from and --no-cache contradict each other"),
    (("--cache-from", "r.example/x:1\nrm -rf /"), "--cache-from"),
    (("--cache-from", "UPPER/Case"), "--cache-from UPPER/Case"),
])
def test_bad_cache_sources_are_refused_before_anything_is_built(args: tuple[str, ...], message: str) -> None:
    result = run_cli("build", "--tag", "v2.7", "--dry-run", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def digests_of_a_build(folder: Path, wheel: bytes | None) -> dict[str, str | None]:
    """The content digest of each image of a CPU entry as the build runner takes it, given a wheelhouse holding one
    wheel with these bytes (None: no wheelhouse)."""
    base = "local/debian:bookworm"
    the_plan = plan_of('registry: r.example/ml/pt\nimages:\n  - {flavor: cpu, name: cpu-tiny, torch: "2.13.0", '
                       'python: "3.11", variants: [ssh]}\n')
    render.write(the_plan, "v1", folder / "images")
    wheelhouse = None
    if wheel is not None:
        wheelhouse = folder / "wheels"
        wheelhouse.mkdir(exist_ok=True)
        (wheelhouse / "numpy-2.0.0-py3-none-any.whl").write_bytes(wheel)
    inputs = BuildInputs(base_image=base, wheelhouse=wheelhouse)
    jobs = plan_jobs(the_plan, "v1", folder / "images", Selection(), base_for=inputs.base_for)
    engine = FakeEngine(images={base: {"Id": digest("debian"), "Os": "linux", "Architecture": "amd64", "Config": {}}})
    outcomes = BuildRunner(engine.engine, inputs, lambda _event: None, builder=RecordingBuilder()).run(jobs)
    return {image: outcome.content_digest for image, outcome in outcomes.items()}


def test_the_build_runner_takes_the_digest_of_the_context_with_its_wheelhouse(tmp_path: Path) -> None:
    """The wheelhouse is part of what a build reads: a wheel added or changed is a new content digest for the image
    that installs from it and, through its parent, for its variants, so --cache-from previous never reuses an image
    built from other wheels."""
    without = digests_of_a_build(tmp_path / "a", None)
    one, two = digests_of_a_build(tmp_path / "b", b"one"), digests_of_a_build(tmp_path / "c", b"two")
    assert set(without) == {"cpu-tiny", "cpu-tiny-ssh"} and all(without.values())
    for image in without:
        assert len({without[image], one[image], two[image]}) == 3, image
    assert digests_of_a_build(tmp_path / "d", b"one") == one, "the same wheels, the same digests"
