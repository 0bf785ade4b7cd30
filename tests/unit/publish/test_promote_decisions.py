"""Promotion decided where it is decided, in `Promoter` and the `promote` command, against a local
HTTPS server that speaks the registry's manifest API (GET by tag or digest, PUT by tag). The real registry's runs are
in tests/integration/publish/test_promote.py; here each decision is driven on its own: what is PUT, when nothing is, and the
exit code."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import requests
import yaml

from torchimages.events import StageEvent
from torchimages.manifest import ManifestImage, ReleaseManifest, SmokeCounts
from torchimages.publish import promote
from torchimages.registry import RegistryClient

from ..conftest import ROOT, AnsweringHandler, tls_server

MEDIA = "application/vnd.oci.image.manifest.v1+json"
AMD64 = "linux/amd64"
CPU = "torch2.13.0-cpu-py3.11"
IMAGES = (CPU, f"{CPU}-jupyter", f"{CPU}-ssh")


ARCH_OF = {11: "arm64"}  # the arm64 candidate of the two-platform tests; every other body is an amd64 image's
CONFIGS: dict[str, bytes] = {}  # every config blob a body names, by digest: what GET .../blobs/DIGEST answers


def body_of(n: int, arch: str | None = None, *, media_type: str = MEDIA) -> bytes:
    """Image n's manifest, naming a real config blob (os, architecture; v8 for arm64) that the stand-in serves."""
    arch = arch or ARCH_OF.get(n, "amd64")
    config = json.dumps({"architecture": arch, "os": "linux", "n": n, **({"variant": "v8"} if arch == "arm64" else {})})
    CONFIGS[digest_of(config.encode())] = config.encode()
    return json.dumps({"schemaVersion": 2, "mediaType": media_type, "layers": [],
                       "config": {"digest": digest_of(config.encode()), "size": len(config)}}).encode()


def digest_of(body: bytes) -> str:
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


class ManifestRegistry(AnsweringHandler):
    by_digest: ClassVar[dict[str, bytes]] = {}  # what GET .../manifests/DIGEST answers
    tags: ClassVar[dict[str, str]] = {}  # tag -> digest
    puts: ClassVar[list[tuple[str, bytes]]] = []
    put_types: ClassVar[list[str]] = []  # the Content-Type of each PUT
    refused: ClassVar[set[str]] = set()  # tags whose PUT is answered 400 (an answer promote does not retry)
    content_type: ClassVar[str] = MEDIA  # the Content-Type of a manifest GET answers

    def do_GET(self) -> None:
        reference = self.path.rsplit("/", 1)[1]
        if "/blobs/" in self.path:
            blob = CONFIGS.get(reference)
            self.answer(200 if blob else 404, blob or b"{}", {"Content-Type": "application/octet-stream"})
            return
        digest = self.tags.get(reference, reference)
        body = self.by_digest.get(digest)
        if body is None:
            self.answer(404, b"{}", {})
        else:
            self.answer(200, body, {"Content-Type": self.content_type, "Docker-Content-Digest": digest})

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        tag = self.path.rsplit("/", 1)[1]
        if tag in self.refused:
            self.answer(400, b'{"errors": [{"code": "MANIFEST_INVALID"}]}', {})
            return
        self.puts.append((tag, body))
        self.put_types.append(self.headers["Content-Type"])
        self.tags[tag] = digest_of(body)
        self.by_digest.setdefault(digest_of(body), body)
        self.answer(201, b"", {"Docker-Content-Digest": digest_of(body)})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    httpd, host, ca = tls_server(ManifestRegistry, tmp_path_factory.mktemp("tls"))
    yield host, ca
    httpd.shutdown()


@pytest.fixture
def registry(server: tuple[str, Path]) -> Iterator[tuple[str, Path]]:
    """The server holding three candidates (pushed under their candidate tags), and no release tag."""
    ManifestRegistry.by_digest, ManifestRegistry.tags, ManifestRegistry.puts, ManifestRegistry.put_types = {}, {}, [], []
    ManifestRegistry.refused, ManifestRegistry.content_type = set(), MEDIA
    for n, name in enumerate(IMAGES):
        body = body_of(n)
        ManifestRegistry.by_digest[digest_of(body)] = body
        ManifestRegistry.tags[f"v2.7-rc.1-{name}"] = digest_of(body)
    yield server


def candidates(host: str) -> ReleaseManifest:
    counts = SmokeCounts(9, 0, 0, 0)
    variants = ("base", "jupyter", "ssh")
    return ReleaseManifest("v2.7", f"{host}/ml/pt", candidate="rc.1", images=tuple(
        ManifestImage(name, variant, digest_of(body_of(n)), {}, counts)
        for n, (name, variant) in enumerate(zip(IMAGES, variants, strict=True))))


def promoter(host: str, ca: Path, *, force: bool = False) -> tuple[promote.Promoter, list[StageEvent]]:
    events: list[StageEvent] = []
    return promote.Promoter(RegistryClient(host, ca=ca), f"{host}/ml/pt", events.append, force=force, retries=0,
                            backoff=0.01), events


def test_each_release_tag_is_the_candidates_manifest_byte_for_byte(registry: tuple[str, Path]) -> None:
    host, ca = registry
    promotions = promote.plan(candidates(host), dict.fromkeys(IMAGES, AMD64))
    runner, _ = promoter(host, ca)
    runner.inspect(promotions)
    runner.check(promotions)
    runner.promote(promotions)
    assert [p.state for p in promotions] == ["promoted"] * 3
    assert ManifestRegistry.puts == [(f"v2.7-{name}", body_of(n)) for n, name in enumerate(IMAGES)]


def test_a_manifest_whose_bytes_are_not_the_candidates_digest_is_never_put(registry: tuple[str, Path]) -> None:
    host, ca = registry
    wanted = digest_of(body_of(0))
    ManifestRegistry.by_digest[wanted] = body_of(99)  # the registry answers other bytes under the tested digest
    promotions = promote.plan(candidates(host), dict.fromkeys(IMAGES, AMD64))
    runner, _ = promoter(host, ca)
    with pytest.raises(promote.PromotionRefused, match=f"{IMAGES[0]}'s digest {wanted} with another manifest"):
        runner.inspect(promotions)
    assert ManifestRegistry.puts == []


def test_a_release_tag_at_another_image_refuses_the_whole_release(registry: tuple[str, Path]) -> None:
    host, ca = registry
    ManifestRegistry.tags[f"v2.7-{IMAGES[2]}"] = digest_of(body_of(0))  # an earlier, other image
    promotions = promote.plan(candidates(host), dict.fromkeys(IMAGES, AMD64))
    with pytest.raises(promote.PromotionRefused, match=r"release tags are immutable: .*v2\.7-torch2\.13\.0-cpu-py3\.11-ssh "
                                                       r"already points at"):
        promoter(host, ca)[0].check(promotions)
    assert ManifestRegistry.puts == []
    forced, _ = promoter(host, ca, force=True)
    forced.inspect(promotions)
    forced.check(promotions)
    forced.promote(promotions)
    assert [p.state for p in promotions] == ["promoted"] * 3


def test_a_tag_already_at_its_digest_is_left_as_it_is(registry: tuple[str, Path]) -> None:
    host, ca = registry
    ManifestRegistry.tags[f"v2.7-{IMAGES[0]}"] = digest_of(body_of(0))
    promotions = promote.plan(candidates(host), dict.fromkeys(IMAGES, AMD64))
    runner, events = promoter(host, ca)
    runner.inspect(promotions)
    runner.check(promotions)
    runner.promote(promotions)
    assert [p.state for p in promotions] == ["unchanged", "promoted", "promoted"]
    assert [tag for tag, _ in ManifestRegistry.puts] == [f"v2.7-{IMAGES[1]}", f"v2.7-{IMAGES[2]}"]
    assert [e.kind for e in events if e.image == IMAGES[0]] == ["queued", "unchanged"]


def promote_command(ca: Path, folder: Path, matrix_text: str,
                    made: ReleaseManifest) -> subprocess.CompletedProcess[str]:
    """`build.py promote` of the candidates `made` for the matrix `matrix_text`, with no stored credentials."""
    from torchimages import manifest

    (folder / "matrix.yaml").write_text(matrix_text)
    manifest.write(made, folder / "candidates.json")
    (folder / "docker").mkdir(exist_ok=True)  # no stored credentials
    return subprocess.run([sys.executable, str(ROOT / "build.py"), "promote", "--tag", "v2.7", "--candidates",
                           str(folder / "candidates.json"), "--matrix", str(folder / "matrix.yaml"), "--registry-ca",
                           str(ca), "--plain", "--manifest", str(folder / "release.json")], cwd=folder,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "DOCKER_CONFIG": str(folder / "docker")})


def run_promote(host: str, ca: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """`build.py promote` of the three CPU candidates, for matrix.yaml's CPU entry."""
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["images"], data["registry"] = [e for e in data["images"] if e["flavor"] == "cpu"], f"{host}/ml/pt"
    return promote_command(ca, folder, yaml.safe_dump(data, sort_keys=False), candidates(host))


def test_the_promote_command_exits_0_with_a_release_manifest_and_1_without(registry: tuple[str, Path],
                                                                          tmp_path: Path) -> None:
    host, ca = registry
    ManifestRegistry.tags[f"v2.7-{IMAGES[1]}"] = digest_of(body_of(2))
    refused = run_promote(host, ca, tmp_path)
    assert refused.returncode == 1 and "release tags are immutable" in refused.stderr, refused.stderr
    assert not (tmp_path / "release.json").exists() and ManifestRegistry.puts == []
    del ManifestRegistry.tags[f"v2.7-{IMAGES[1]}"]
    done = run_promote(host, ca, tmp_path)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "release.json").read_text())
    assert written["promoted_from"] == "rc.1" and written["candidate"] is None
    assert [i["tag"] for i in written["images"]] == [f"{host}/ml/pt:v2.7-{name}" for name in IMAGES]
    assert len(ManifestRegistry.puts) == 3


# --- an entry of two platforms: one image index per release tag over the platforms' candidates --------------------

CU130 = "torch2.14.0-cu130-cudnn9.24-py3.11"
PLATFORMS = (("linux/amd64", f"{CU130}-amd64"), ("linux/arm64", f"{CU130}-arm64"))


@pytest.fixture
def two_platforms(server: tuple[str, Path]) -> Iterator[tuple[str, Path]]:
    """The server holding an amd64 and an arm64 candidate of one image."""
    ManifestRegistry.by_digest, ManifestRegistry.tags, ManifestRegistry.puts, ManifestRegistry.put_types = {}, {}, [], []
    ManifestRegistry.refused, ManifestRegistry.content_type = set(), MEDIA
    for n, (_platform, image) in enumerate(PLATFORMS, 10):
        ManifestRegistry.by_digest[digest_of(body_of(n))] = body_of(n)
        ManifestRegistry.tags[f"v2.7-rc.1-{image}"] = digest_of(body_of(n))
    yield server


def platform_candidates(host: str) -> ReleaseManifest:
    counts = SmokeCounts(20, 0, 0, 0)
    return ReleaseManifest("v2.7", f"{host}/ml/pt", candidate="rc.1", images=tuple(
        ManifestImage(image, "base", digest_of(body_of(n)), {}, counts, platform=platform)
        for n, (platform, image) in enumerate(PLATFORMS, 10)))


def promote_with_index(host: str, ca: Path) -> tuple[list[promote.Promotion], list[promote.IndexPromotion]]:
    made = platform_candidates(host)
    promotions = promote.plan(made, {image: platform for platform, image in PLATFORMS})
    indexes = promote.index_plan(promotions, {CU130: list(PLATFORMS)}, made.repository, made.release)
    runner, _ = promoter(host, ca)
    runner.inspect(promotions)
    runner.prepare(indexes, promotions)
    runner.check(promotions, indexes)
    runner.promote(promotions)
    runner.promote_indexes(indexes)
    return promotions, indexes


def test_the_release_tag_of_two_platforms_is_an_oci_index_of_both_candidates(two_platforms: tuple[str, Path]) -> None:
    host, ca = two_platforms
    promotions, [index] = promote_with_index(host, ca)
    assert [p.state for p in promotions] == ["promoted", "promoted"] and index.state == "promoted"
    tag, body = ManifestRegistry.puts[-1]
    assert tag == f"v2.7-{CU130}" and ManifestRegistry.put_types[-1] == promote.INDEX_TYPE
    written = json.loads(body)
    assert written["mediaType"] == promote.INDEX_TYPE and written["schemaVersion"] == 2
    assert written["manifests"] == [
        {"mediaType": MEDIA, "digest": digest_of(body_of(10)), "size": len(body_of(10)),
         "platform": {"architecture": "amd64", "os": "linux"}},
        {"mediaType": MEDIA, "digest": digest_of(body_of(11)), "size": len(body_of(11)),
         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}}]
    assert index.digest == digest_of(body) == ManifestRegistry.tags[f"v2.7-{CU130}"]
    # each platform keeps a release tag of its own, beside the index
    assert {t for t, _ in ManifestRegistry.puts[:-1]} == {f"v2.7-{image}" for _, image in PLATFORMS}
    released = promote.release_manifest(platform_candidates(host), promotions, [index])
    assert released.indexes[0].platforms == PLATFORMS and released.indexes[0].digest == index.digest


def test_an_index_member_is_named_by_its_media_type_alone(two_platforms: tuple[str, Path]) -> None:
    """A registry may answer a manifest's Content-Type with parameters; the index names each member by the media type
    alone, as the OCI image index has it."""
    host, ca = two_platforms
    ManifestRegistry.content_type = f"{MEDIA}; charset=utf-8"
    _promotions, [index] = promote_with_index(host, ca)
    assert index.state == "promoted"
    assert [member["mediaType"] for member in json.loads(index.body)["manifests"]] == [MEDIA, MEDIA]


def test_promoting_again_finds_the_same_index_in_place(two_platforms: tuple[str, Path]) -> None:
    host, ca = two_platforms
    promote_with_index(host, ca)
    puts = len(ManifestRegistry.puts)
    promotions, [index] = promote_with_index(host, ca)
    assert index.state == "unchanged" and {p.state for p in promotions} == {"unchanged"}
    assert len(ManifestRegistry.puts) == puts  # the same members make the same bytes: nothing is written again


def test_an_index_tag_at_another_image_refuses_the_release_before_any_put(two_platforms: tuple[str, Path]) -> None:
    host, ca = two_platforms
    ManifestRegistry.tags[f"v2.7-{CU130}"] = digest_of(body_of(10))  # the amd64 image alone, as an older push left it
    with pytest.raises(promote.PromotionRefused, match=rf"v2\.7-{CU130} already points at"):
        promote_with_index(host, ca)
    assert ManifestRegistry.puts == []


def test_a_member_whose_bytes_are_not_its_digest_refuses_the_release(two_platforms: tuple[str, Path]) -> None:
    host, ca = two_platforms
    ManifestRegistry.by_digest[digest_of(body_of(11))] = body_of(99)
    with pytest.raises(promote.PromotionRefused, match=f"{CU130}-arm64's digest"):
        promote_with_index(host, ca)
    assert ManifestRegistry.puts == []


def promote_platforms(host: str, ca: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """`build.py promote` of the two platforms' candidates, for a matrix of the one entry of two platforms."""
    return promote_command(ca, folder, f"registry: {host}/ml/pt\nimages:\n  - {{flavor: cuda, torch: '2.14.0', "
                                       "cuda: '13.0', python: '3.11', platforms: [linux/amd64, linux/arm64]}\n",
                           platform_candidates(host))


def test_no_index_is_written_over_a_platform_whose_release_tag_was_not(two_platforms: tuple[str, Path],
                                                                       tmp_path: Path) -> None:
    """The arm64 release tag's PUT is refused: the amd64 tag is written, the index is not (it would point users at a
    platform that has no release tag), and running promote again finishes the release with it."""
    host, ca = two_platforms
    ManifestRegistry.refused = {f"v2.7-{CU130}-arm64"}
    cut_short = promote_platforms(host, ca, tmp_path)
    assert cut_short.returncode == 1 and "promotion incomplete" in cut_short.stderr, cut_short.stderr
    assert [tag for tag, _ in ManifestRegistry.puts] == [f"v2.7-{CU130}-amd64"]
    assert f"v2.7-{CU130}" not in ManifestRegistry.tags and not (tmp_path / "release.json").exists()
    ManifestRegistry.refused = set()
    again = promote_platforms(host, ca, tmp_path)
    assert again.returncode == 0, again.stderr
    assert [tag for tag, _ in ManifestRegistry.puts[1:]] == [f"v2.7-{CU130}-arm64", f"v2.7-{CU130}"]


def test_the_promote_command_writes_each_index_into_the_release_manifest(two_platforms: tuple[str, Path],
                                                                         tmp_path: Path) -> None:
    """The matrix says which images are built for several platforms; promote makes an index of each, and the release
    manifest it writes names it, and is read back."""
    from torchimages import manifest

    host, ca = two_platforms
    done = promote_platforms(host, ca, tmp_path)
    assert done.returncode == 0 and "promoted 2 images and 1 image indexes of v2.7" in done.stdout, done.stderr
    released = manifest.read(tmp_path / "release.json")
    [index] = released.indexes
    assert index.name == CU130 and index.platforms == PLATFORMS
    assert index.digest == ManifestRegistry.tags[f"v2.7-{CU130}"]
    assert f"| {CU130} | `{host}/ml/pt@{index.digest}` | linux/amd64, linux/arm64 |" in (
        tmp_path / "release.md").read_text()


def test_a_release_pushed_as_itself_gets_its_index_only_when_every_platform_was_pushed(
        two_platforms: tuple[str, Path]) -> None:
    """`push` without --candidate: the index of an image whose platforms were all pushed by the run is written at
    once (promote's rules); one of a run that pushed some of its platforms is left to candidates and promote."""
    from dataclasses import replace
    from types import SimpleNamespace

    from torchimages.publish.pushstage import write_indexes

    host, ca = two_platforms
    pushed = replace(platform_candidates(host), candidate=None)
    events: list[StageEvent] = []
    publisher = SimpleNamespace(registry=RegistryClient(host, ca=ca), repository=f"{host}/ml/pt", force=False)
    made, ok = write_indexes(pushed, {CU130: list(PLATFORMS)}, publisher, events.append)  # type: ignore[arg-type]
    assert ok and [(i.name, i.platforms) for i in made.indexes] == [(CU130, PLATFORMS)]
    assert ManifestRegistry.tags[f"v2.7-{CU130}"] == made.indexes[0].digest and made.images == pushed.images
    ManifestRegistry.puts.clear()
    one = replace(pushed, images=pushed.images[1:])  # the arm64 image alone
    made, ok = write_indexes(one, {CU130: list(PLATFORMS)}, publisher, events.append)  # type: ignore[arg-type]
    assert ok and made.indexes == () and ManifestRegistry.puts == []
    assert any(e.image == CU130 and e.kind == "note" and "only some of its platforms" in e.message for e in events)


# --- what an index or a release tag says must be true of the bytes it points at ---------------------------------


def mislabelled(host: str, **images: tuple[str, str, int]) -> ReleaseManifest:
    """The two-platform candidates with some images replaced: image -> (platform, image name, body number)."""
    made = platform_candidates(host)
    counts = SmokeCounts(20, 0, 0, 0)
    replaced = {item.image: item for item in made.images}
    for old, (platform, name, n) in images.items():
        replaced[old] = ManifestImage(name, "base", digest_of(body_of(n)), {}, counts, platform=platform)
    return ReleaseManifest("v2.7", made.repository, candidate="rc.1", images=tuple(replaced.values()))


def promote_candidates(host: str, ca: Path, folder: Path, made: ReleaseManifest) -> subprocess.CompletedProcess[str]:
    return promote_command(ca, folder, f"registry: {host}/ml/pt\nimages:\n  - {{flavor: cuda, torch: '2.14.0', "
                                       "cuda: '13.0', python: '3.11', platforms: [linux/amd64, linux/arm64]}\n", made)


def test_one_digest_listed_for_both_platforms_is_refused_before_any_put(two_platforms: tuple[str, Path],
                                                                         tmp_path: Path) -> None:
    """Every arm64 host (GH200, GB200) would pull the amd64 image from an index that lists its digest twice."""
    host, ca = two_platforms
    made = mislabelled(host, **{f"{CU130}-arm64": ("linux/arm64", f"{CU130}-arm64", 10)})
    result = promote_candidates(host, ca, tmp_path, made)
    assert result.returncode == 1, result.stderr
    assert f"the digest {digest_of(body_of(10))} is listed for linux/amd64 and linux/arm64" in result.stderr
    assert ManifestRegistry.puts == [] and not (tmp_path / "release.json").exists()


def test_an_arm64_candidate_whose_config_says_amd64_is_refused_before_any_put(two_platforms: tuple[str, Path],
                                                                              tmp_path: Path) -> None:
    host, ca = two_platforms
    amd64_inside = body_of(12, "amd64")
    ManifestRegistry.by_digest[digest_of(amd64_inside)] = amd64_inside
    made = mislabelled(host, **{f"{CU130}-arm64": ("linux/arm64", f"{CU130}-arm64", 12)})
    result = promote_candidates(host, ca, tmp_path, made)
    assert result.returncode == 1 and "its config says linux/amd64, not linux/arm64" in result.stderr, result.stderr
    assert ManifestRegistry.puts == [] and not (tmp_path / "release.json").exists()


def test_a_candidate_named_arm64_but_recorded_as_amd64_is_refused_as_it_is_read(two_platforms: tuple[str, Path],
                                                                                tmp_path: Path) -> None:
    """The candidates' manifest is input: its reader refuses the mislabel, so promote PUTs nothing and never writes a
    release manifest its own reader would refuse later (fit, diff and the next --previous)."""
    host, ca = two_platforms
    made = mislabelled(host, **{f"{CU130}-arm64": ("linux/amd64", f"{CU130}-arm64", 11)})
    result = promote_candidates(host, ca, tmp_path, made)
    assert result.returncode == 2, result.stderr
    assert f"field 'platform': 'linux/amd64' is not the platform the name '{CU130}-arm64' says" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert ManifestRegistry.puts == [] and not (tmp_path / "release.json").exists()


def test_a_platform_other_than_the_matrixs_is_refused_even_past_the_reader() -> None:
    """plan() holds each candidate to the platform the matrix builds it for and to its name, whoever made the object."""
    made = ReleaseManifest("v2.7", "r.example.com/ml/pt", candidate="rc.1", images=(
        ManifestImage(f"{CU130}-arm64", "base", digest_of(body_of(1)), {}, SmokeCounts(1, 0, 0, 0), platform=AMD64),))
    with pytest.raises(promote.PromotionRefused, match=r"is recorded as linux/amd64 .* the matrix builds it for linux/arm64"):
        promote.plan(made, {f"{CU130}-arm64": "linux/arm64"})
    with pytest.raises(promote.PromotionRefused, match="is recorded as linux/amd64"):
        promote.plan(made, {f"{CU130}-arm64": AMD64})  # the name says arm64, whatever the matrix says


def test_an_index_member_that_is_an_index_is_refused_before_any_put(two_platforms: tuple[str, Path]) -> None:
    host, ca = two_platforms
    nested = json.dumps({"schemaVersion": 2, "mediaType": promote.INDEX_TYPE, "manifests": []}).encode()
    ManifestRegistry.by_digest[digest_of(nested)] = nested
    made = mislabelled(host)
    arm = next(i for i in made.images if i.platform == "linux/arm64")
    made = ReleaseManifest("v2.7", made.repository, candidate="rc.1", images=(
        made.images[0], ManifestImage(arm.image, "base", digest_of(nested), {}, arm.smoke, platform="linux/arm64")))
    promotions = promote.plan(made, {image: platform for platform, image in PLATFORMS})
    with pytest.raises(promote.PromotionRefused, match="not one image's manifest"):
        promoter(host, ca)[0].inspect(promotions)
    assert ManifestRegistry.puts == []


def test_the_media_type_written_is_the_one_inside_the_hashed_bytes(two_platforms: tuple[str, Path]) -> None:
    """The registry's Content-Type header is not covered by the digest: a Docker v2 manifest served as OCI is PUT and
    listed as what its bytes say."""
    host, ca = two_platforms
    docker = "application/vnd.docker.distribution.manifest.v2+json"
    body = body_of(11, "arm64", media_type=docker)  # the stand-in answers every manifest with an OCI Content-Type
    ManifestRegistry.by_digest[digest_of(body)] = body
    made = mislabelled(host)
    arm = next(i for i in made.images if i.platform == "linux/arm64")
    made = ReleaseManifest("v2.7", made.repository, candidate="rc.1", images=(
        made.images[0], ManifestImage(arm.image, "base", digest_of(body), {}, arm.smoke, platform="linux/arm64")))
    promotions = promote.plan(made, {image: platform for platform, image in PLATFORMS})
    indexes = promote.index_plan(promotions, {CU130: list(PLATFORMS)}, made.repository, made.release)
    runner, _ = promoter(host, ca)
    runner.inspect(promotions)
    runner.prepare(indexes, promotions)
    runner.promote(promotions)
    assert ManifestRegistry.put_types[:2] == [MEDIA, docker]
    assert [m["mediaType"] for m in json.loads(indexes[0].body)["manifests"]] == [MEDIA, docker]


@pytest.mark.parametrize("blocked", ["release-hosts.json", "release.md", "release.sbom"])
def test_every_file_promote_writes_is_checked_before_the_first_tag(two_platforms: tuple[str, Path], tmp_path: Path,
                                                                   blocked: str) -> None:
    """The host index, the Markdown twin and the SBOM folder beside the release manifest: a folder or a link where a
    file goes (or a link where the folder goes) refuses the promotion before any PUT, not after the last one."""
    host, ca = two_platforms
    if blocked.endswith(".sbom"):
        (tmp_path / blocked).symlink_to(tmp_path / "elsewhere")
    else:
        (tmp_path / blocked).mkdir()
    result = promote_platforms(host, ca, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"--manifest {tmp_path / 'release.json'}" in result.stderr and blocked in result.stderr, result.stderr
    assert ManifestRegistry.puts == [] and not (tmp_path / "release.json").exists()


@pytest.mark.parametrize("answer", [b"[" * 100_000 + b"]" * 100_000, b"\xff", b"null"], ids=["nested", "not-utf8", "null"])
def test_a_manifest_or_config_the_registry_answers_that_is_no_json_object_refuses_the_release(answer: bytes) -> None:
    """The registry's bytes are read as JSON only after they hash to the digest asked for; what they hold is still the
    registry's word: nested past any limit, not UTF-8 or not an object, it refuses the release in one sentence."""
    with pytest.raises(promote.PromotionRefused, match="the registry holds no JSON manifest"):
        promote.image_manifest(answer, "img")
    assert promote.config_platform_problem(answer, AMD64) == "its config is not a JSON object"


@pytest.mark.parametrize(("served", "words"), [(b"{}", "the registry answered another blob for that digest"),
                                               (b"x" * (promote.MAX_CONFIG_BYTES + 1), "more than the")])
def test_a_config_blob_that_is_not_its_digest_or_too_big_refuses_the_release(registry: tuple[str, Path], served: bytes,
                                                                            words: str) -> None:
    host, ca = registry
    promotions = promote.plan(candidates(host), dict.fromkeys(IMAGES, AMD64))
    CONFIGS[json.loads(body_of(0))["config"]["digest"]] = served
    try:
        with pytest.raises(promote.PromotionRefused, match=words):
            promoter(host, ca)[0].inspect(promotions)
    finally:
        body_of(0)  # serves the real config again
    assert ManifestRegistry.puts == []


@pytest.mark.parametrize(("body", "words"), [(b'{"schemaVersion": 2}', "answered a manifest without a config"),
                                             (b'{"config": {"digest": "sha256:abc"}}', "is not a digest"),
                                             (b"[" * 100_000, "answered a manifest without a config")],
                         ids=["no-config", "short-digest", "nested"])
def test_a_tag_read_back_without_a_config_digest_is_refused(registry: tuple[str, Path], body: bytes, words: str) -> None:
    """What push reads back after a push (RegistryClient.tag): the manifest's config digest is the registry's word that
    the tag holds the image pushed; what is not one digest is an error, never compared as if it were."""
    host, ca = registry
    ManifestRegistry.by_digest[digest_of(body)] = body
    ManifestRegistry.tags["v2.7-odd"] = digest_of(body)
    with pytest.raises(requests.RequestException, match=words):
        RegistryClient(host, ca=ca).tag("ml/pt", "v2.7-odd")
