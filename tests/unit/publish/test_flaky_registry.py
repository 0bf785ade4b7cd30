"""Push and promote against a stand-in registry that drops the connection or answers 5xx the first few times it is
asked: each call is tried again, up to the retry limit, and an answer that is final (4xx) is never tried again. The
stand-in is a local HTTPS server that speaks the registry's manifest API; the engine's push is a stand-in that puts
the image's manifest there, as a real push would."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from torchimages.events import StageEvent
from torchimages.input.specs import Release
from torchimages.manifest import ManifestImage, ReleaseManifest, SmokeCounts
from torchimages.publish import promote
from torchimages.publish import push as publish
from torchimages.registry import RegistryClient
from torchimages.report import ImageRecord, Report, SmokeStage

from ..conftest import AnsweringHandler, digest, tls_server
from ..fake_engine import FakeEngine

MEDIA = "application/vnd.docker.distribution.manifest.v2+json"
IMAGE = "torch2.13.0-cpu-py3.11"
IMAGE_ID = digest("the tested image")  # the local image's ID: its config digest in the registry
RETRIES = 3


class FlakyRegistry(AnsweringHandler):
    """Manifests by tag and by digest; each GET or PUT first takes the next of its method's `failures`: 'drop' (the
    connection closes without an answer), or an HTTP status it answers instead."""

    failures: ClassVar[dict[str, list[str | int]]] = {}  # method -> what its next requests get instead of an answer
    manifests: ClassVar[dict[str, bytes]] = {}  # tag or digest -> body
    asked: ClassVar[list[str]] = []  # "METHOD path" of every request, failed or not

    def failed(self) -> bool:
        FlakyRegistry.asked.append(f"{self.command} {self.path}")
        waiting = FlakyRegistry.failures.get(self.command)
        if not waiting:
            return False
        failure = waiting.pop(0)
        if failure == "drop":
            self.close_connection = True  # no status line: the client sees the connection end
        else:
            self.answer(int(failure), b'{"errors": [{"code": "UNAVAILABLE"}]}', {"Content-Type": "application/json"})
        return True

    def do_GET(self) -> None:
        if self.failed():
            return
        body = FlakyRegistry.manifests.get(self.path.rsplit("/", 1)[1])
        if body is None:
            self.answer(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}', {})
        else:
            self.answer(200, body, {"Content-Type": MEDIA, "Docker-Content-Digest": digest_of(body)})

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.failed():
            return
        FlakyRegistry.manifests[self.path.rsplit("/", 1)[1]] = FlakyRegistry.manifests[digest_of(body)] = body
        self.answer(201, b"", {"Docker-Content-Digest": digest_of(body)})


def digest_of(body: bytes) -> str:
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


GZIP_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def manifest_of(config: str, layers: tuple[str, ...] = (GZIP_LAYER,)) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": MEDIA, "config": {"digest": config},
                       "layers": [{"mediaType": media_type, "digest": f"sha256:{n:064x}", "size": 1}
                                  for n, media_type in enumerate(layers)]}).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    httpd, host, ca = tls_server(FlakyRegistry, tmp_path_factory.mktemp("tls"))
    yield host, ca
    httpd.shutdown()


@pytest.fixture
def registry(server: tuple[str, Path]) -> Iterator[tuple[str, Path]]:
    FlakyRegistry.failures, FlakyRegistry.manifests, FlakyRegistry.asked = {}, {}, []
    yield server


class PushingEngine(FakeEngine):
    """The engine's tag and push: the push puts the image's manifest into the stand-in registry under its tag."""

    def __init__(self, host: str, ca: Path) -> None:
        super().__init__(images={f"local/{IMAGE}": {"Id": IMAGE_ID, "Config": {}}})
        self.registry, self.pushes = RegistryClient(host, ca=ca), 0

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        assert image_id == IMAGE_ID

    layers: tuple[str, ...] = (GZIP_LAYER,)  # the media types of the manifest the push puts

    def push(self, repository: str, tag: str, stream: bool, decode: bool,
             auth_config: dict[str, str] | None) -> Iterator[dict[str, Any]]:
        self.pushes += 1
        body = manifest_of(IMAGE_ID, self.layers)
        self.registry.put_manifest(repository.split("/", 1)[1], tag, body, MEDIA)
        yield {"status": "Pushed", "id": "layer"}
        yield from self.said(tag, body)

    def said(self, tag: str, body: bytes) -> Iterator[dict[str, Any]]:
        """How the push's stream ends, naming the digest: the classic store's `aux`."""
        yield {"aux": {"Tag": tag, "Digest": digest_of(body), "Size": len(body)}}


def push_one(host: str, ca: Path, engine_class: type[PushingEngine] = PushingEngine,
             ) -> tuple[publish.PushOutcome, PushingEngine, list[StageEvent]]:
    engine, events = engine_class(host, ca), []
    passed = SmokeStage(9, 0, 0, 0, 1.0, 0, {}, None, image_id=IMAGE_ID)
    record = ImageRecord(IMAGE, IMAGE, "base", f"local/{IMAGE}", "built", {}, image_id=IMAGE_ID, smoke=passed)
    publisher = publish.Publisher(engine.engine, f"{host}/ml/pt", Release("v2.7"), credentials=None, ca=ca,
                                  retries=RETRIES, backoff=0, emit=events.append)
    [outcome] = publisher.publish(Report("v2.7", "matrix.yaml", images=[record]))
    return outcome, engine, events


@pytest.mark.parametrize("failure", ["drop", 502, 503, 504])
def test_a_push_goes_through_a_registry_that_fails_the_first_reads(registry: tuple[str, Path],
                                                                  failure: str | int) -> None:
    host, ca = registry
    FlakyRegistry.failures = {"GET": [failure] * RETRIES}  # the tag's first three reads fail; the fourth is the limit
    outcome, engine, events = push_one(host, ca)
    assert outcome.error is None and outcome.pushed and outcome.digest == digest_of(manifest_of(IMAGE_ID)), outcome
    assert engine.pushes == 1 and outcome.attempts == RETRIES + 3  # 4 reads, the push, the read-back
    notes = [e.message for e in events if e.kind == "note"]
    assert len(notes) == RETRIES and all("attempt" in note and "retrying" in note for note in notes), notes


def test_a_registry_that_keeps_failing_is_one_message_after_the_last_try(registry: tuple[str, Path]) -> None:
    host, ca = registry
    FlakyRegistry.failures = {"GET": ["drop"] * (RETRIES + 1)}
    outcome, engine, _ = push_one(host, ca)
    assert outcome.error and outcome.error.startswith(f"reading {host}/ml/pt:v2.7-{IMAGE} failed after 4 attempt(s)")
    assert engine.pushes == 0 and not outcome.pushed and len(FlakyRegistry.asked) == RETRIES + 1


@pytest.mark.parametrize("status", [401, 403, 400])
def test_a_final_answer_is_never_asked_again(registry: tuple[str, Path], status: int) -> None:
    host, ca = registry
    FlakyRegistry.failures = {"GET": [status]}
    outcome, engine, _ = push_one(host, ca)
    assert outcome.error and f"{status} Client Error" in outcome.error, outcome.error
    assert engine.pushes == 0 and FlakyRegistry.asked == [f"GET /v2/ml/pt/manifests/v2.7-{IMAGE}"]


class DropsAfterThePush(PushingEngine):
    """A push after which the registry drops the read-back's first try and answers its second 503."""

    def push(self, *args: Any, **options: Any) -> Iterator[dict[str, Any]]:
        yield from super().push(*args, **options)
        FlakyRegistry.failures = {"GET": ["drop", 503]}


def test_a_read_back_that_fails_is_read_again_and_the_image_pushed_once(registry: tuple[str, Path]) -> None:
    host, ca = registry
    outcome, engine, _ = push_one(host, ca, DropsAfterThePush)
    assert outcome.error is None and outcome.pushed and engine.pushes == 1, outcome
    assert outcome.attempts == 5  # the read before, the push, three reads back


# --- promote: every read and PUT of the registry API through the same kind of failures ------------------------------

CANDIDATES = (IMAGE, f"{IMAGE}-ssh")


def candidates(host: str) -> ReleaseManifest:
    """Two candidates pushed under their candidate tags, each a manifest the registry holds."""
    images = []
    for n, name in enumerate(CANDIDATES):
        config = json.dumps({"architecture": "amd64", "os": "linux", "n": n}).encode()  # served as its blob
        FlakyRegistry.manifests[digest_of(config)] = config
        body = manifest_of(digest_of(config))
        FlakyRegistry.manifests[digest_of(body)] = FlakyRegistry.manifests[f"v2.7-rc.1-{name}"] = body
        images.append(ManifestImage(name, "base" if n == 0 else "ssh", digest_of(body), {}, SmokeCounts(9, 0, 0, 0)))
    return ReleaseManifest("v2.7", f"{host}/ml/pt", candidate="rc.1", images=tuple(images))


def promoted(host: str, ca: Path) -> list[promote.Promotion]:
    promotions = promote.plan(candidates(host), dict.fromkeys(CANDIDATES, "linux/amd64"))
    runner = promote.Promoter(RegistryClient(host, ca=ca), f"{host}/ml/pt", lambda _event: None, retries=RETRIES,
                              backoff=0)
    runner.inspect(promotions)
    runner.check(promotions)
    runner.promote(promotions)
    return promotions


@pytest.mark.parametrize("failure", ["drop", 500, 503])
def test_promotion_goes_through_a_registry_that_fails_three_times_in_a_row(registry: tuple[str, Path],
                                                                           failure: str | int) -> None:
    host, ca = registry
    FlakyRegistry.failures = {"GET": [failure] * RETRIES, "PUT": [failure] * RETRIES}
    promotions = promoted(host, ca)
    assert [(p.state, p.error) for p in promotions] == [("promoted", None)] * 2
    assert {tag: FlakyRegistry.manifests[tag] for tag in (f"v2.7-{name}" for name in CANDIDATES)} == {
        f"v2.7-{name}": FlakyRegistry.manifests[f"v2.7-rc.1-{name}"] for name in CANDIDATES}


def test_a_put_that_fails_with_503_is_put_again(registry: tuple[str, Path]) -> None:
    host, ca = registry
    FlakyRegistry.failures = {"PUT": [503, "drop"]}
    assert [p.state for p in promoted(host, ca)] == ["promoted", "promoted"]
    puts = [line for line in FlakyRegistry.asked if line.startswith("PUT")]
    assert puts == [f"PUT /v2/ml/pt/manifests/v2.7-{CANDIDATES[0]}"] * 3 + [f"PUT /v2/ml/pt/manifests/v2.7-{CANDIDATES[1]}"]


def test_promotion_stops_at_the_retry_limit_and_at_a_final_answer(registry: tuple[str, Path]) -> None:
    host, ca = registry
    FlakyRegistry.failures = {"GET": [503] * (RETRIES + 1)}  # the first release tag's read, four times
    with pytest.raises(promote.PromotionRefused, match=r"failed after 4 attempt\(s\).*no release tag was written"):
        promoted(host, ca)
    FlakyRegistry.failures, FlakyRegistry.asked = {"GET": [400]}, []
    with pytest.raises(promote.PromotionRefused, match=r"failed after 1 attempt\(s\)"):
        promoted(host, ca)
    assert len(FlakyRegistry.asked) == 1 and FlakyRegistry.asked[0].startswith("GET")


class ContainerdStorePushingEngine(PushingEngine):
    """Docker 26 with the containerd image store: the digest comes only in the push's last status line, after
    another tag's line, which is not this push's digest."""

    def said(self, tag: str, body: bytes) -> Iterator[dict[str, Any]]:
        yield {"status": f"other-tag: digest: sha256:{'0' * 64} size: 9"}
        yield {"status": f"{tag}: digest: {digest_of(body)} size: {len(body)}"}


def test_the_containerd_stores_push_says_its_digest_in_a_status_line(registry: tuple[str, Path]) -> None:
    host, ca = registry
    outcome, engine, _ = push_one(host, ca, ContainerdStorePushingEngine)
    assert outcome.error is None and outcome.pushed and outcome.digest == digest_of(manifest_of(IMAGE_ID)), outcome
    assert engine.pushes == 1 and outcome.min_docker is None  # gzip layers: every supported engine pulls them


ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"


class ZstdPushingEngine(ContainerdStorePushingEngine):
    """An image built with --compression zstd: the registry then holds its base's gzip layer beside zstd ones."""

    layers = (GZIP_LAYER, ZSTD_LAYER, ZSTD_LAYER)


class ForeignPushingEngine(ContainerdStorePushingEngine):
    layers = (GZIP_LAYER, "text/html")


def test_what_the_registry_holds_decides_which_engines_pull_it(registry: tuple[str, Path]) -> None:
    """The push reads the layers' media types back from the registry: a zstd one needs Docker 23.0 to pull (recorded
    in the report's push stage, and from there in the manifest's runs_on); a layer of no known type is an error."""
    host, ca = registry
    outcome, _, _ = push_one(host, ca, ZstdPushingEngine)
    assert outcome.error is None and outcome.min_docker == "23.0" and outcome.stage().min_docker == "23.0", outcome
    FlakyRegistry.manifests = {}  # another registry: the tag is not there yet
    outcome, _, _ = push_one(host, ca, ForeignPushingEngine)
    assert outcome.error and "a layer of no known media type" in outcome.error and outcome.min_docker is None, outcome
