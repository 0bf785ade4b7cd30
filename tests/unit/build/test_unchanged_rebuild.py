"""A rebuild whose image is already here: the build runner (torchimages.build.jobs) tags nothing new and asks
no builder when the image under the build's tag carries this build's content digest, platform and GPU labels and this
release's stamp, and, for a variant, sits on its base as the base is now. Anything else is built. Driven through the
fake engine and a builder that records what it is asked; the real no-op rebuilds are measured in
benchmarks/layers_bench.py and docs/performance.md."""

from __future__ import annotations

from pathlib import Path

from torchimages.build import render
from torchimages.build.cache import stamp_labels
from torchimages.build.inputs import BuildInputs
from torchimages.build.jobs import BuildRunner, Selection, plan_jobs
from torchimages.engine import BuildOutcome, Engine
from torchimages.events import StageEvent

from ..conftest import digest, plan_of
from ..fake_engine import FakeEngine
from .test_platform_jobs import RecordingBuilder

ENTRY = """
registry: registry.example.com/ml/pytorch
images:
  - {flavor: cpu, name: cpu-tiny, torch: "2.13.0", python: "3.11", variants: [ssh]}
"""
FROM = "local/debian:bookworm"
FROM_LAYERS = [digest("debian layer")]


def first_build(tmp_path: Path, release: str = "v1") -> tuple[list, dict[str, dict]]:
    """Render and build the entry once; the images as the engine holds them after it (labels, layers)."""
    plan = plan_of(ENTRY)
    render.write(plan, release, tmp_path / release)
    jobs = plan_jobs(plan, release, tmp_path / release, Selection(), base_for=BuildInputs(base_image=FROM).base_for)
    builder = RecordingBuilder()
    from_image = {FROM: {"Id": digest("debian"), "Os": "linux", "Architecture": "amd64", "Config": {},
                         "RootFS": {"Layers": FROM_LAYERS}}}
    BuildRunner(FakeEngine(images=dict(from_image)).engine, BuildInputs(base_image=FROM), lambda _: None,
                builder=builder).run(jobs)
    held = dict(from_image)
    layers = list(FROM_LAYERS)
    for job, asked in zip(jobs, builder.asked, strict=True):
        dockerfile = (job.context / "Dockerfile").read_text()
        layers = [*layers, digest(f"{job.image} layer")]
        held[job.tag] = {"Id": digest(job.image), "Os": "linux", "Architecture": "amd64",
                         "Config": {"Labels": {**(stamp_labels(dockerfile) or {}), **asked["labels"]}}, "RootFS": {"Layers": layers}}
    return jobs, held


def rebuild(jobs: list, images: dict[str, dict], *, no_cache: bool = False) -> tuple[dict[str, BuildOutcome],
                                                                                       RecordingBuilder, list[StageEvent]]:
    fake = FakeEngine(images=images)
    engine = Engine(api=fake, no_cache=no_cache)  # type: ignore[arg-type]
    builder, events = RecordingBuilder(), []
    outcomes = BuildRunner(engine, BuildInputs(base_image=FROM), events.append, builder=builder).run(jobs)
    return outcomes, builder, events


def test_an_image_already_here_is_not_built_again(tmp_path: Path) -> None:
    jobs, held = first_build(tmp_path)
    outcomes, builder, events = rebuild(jobs, held)
    assert builder.asked == [], "a builder was asked for an image the engine already holds"
    for job in jobs:
        assert outcomes[job.image].ok and outcomes[job.image].image_id == held[job.tag]["Id"]
        assert outcomes[job.image].content_digest == held[job.tag]["Config"]["Labels"]["io.torchimages.content-digest"]
    notes = [e.message for e in events if e.kind == "note"]
    assert len(notes) == 2 and all(n.startswith("unchanged: ") and "not built again" in n for n in notes), notes


def test_no_cache_builds_it_again(tmp_path: Path) -> None:
    jobs, held = first_build(tmp_path)
    _, builder, _ = rebuild(jobs, held, no_cache=True)
    assert [a["image"] for a in builder.asked] == [job.image for job in jobs]


def test_another_content_digest_under_the_tag_is_built(tmp_path: Path) -> None:
    jobs, held = first_build(tmp_path)
    base = jobs[0].tag
    held[base]["Config"]["Labels"]["io.torchimages.content-digest"] = digest("other content")
    _, builder, _ = rebuild(jobs, held)
    # the base is built; its variant's digest (its base's content digest among its inputs) is the one held, and it sits
    # on the base tag's layers, so it stays
    assert [a["image"] for a in builder.asked] == [jobs[0].image]


def test_another_release_stamp_under_the_tag_is_built(tmp_path: Path) -> None:
    jobs, held = first_build(tmp_path)
    for job in jobs:  # the same content, the stamp of an earlier release (a tag moved by hand, say)
        held[job.tag]["Config"]["Labels"]["org.opencontainers.image.version"] = "v0"
    _, builder, _ = rebuild(jobs, held)
    assert len(builder.asked) == 2


def test_a_variant_not_on_its_base_as_it_is_now_is_built(tmp_path: Path) -> None:
    jobs, held = first_build(tmp_path)
    base, variant = jobs[0].tag, jobs[1].tag
    # the base tag now holds another image of the same content (rebuilt with --no-cache, say): other layers
    held[base] = {**held[base], "Id": digest("rebuilt base"), "RootFS": {"Layers": [*FROM_LAYERS, digest("new")]}}
    outcomes, builder, _ = rebuild(jobs, held)
    assert [a["image"] for a in builder.asked] == [jobs[1].image]
    assert outcomes[jobs[0].image].image_id == digest("rebuilt base") and variant in held


def test_a_stamp_that_cannot_be_read_is_built(tmp_path: Path) -> None:
    jobs, held = first_build(tmp_path)
    dockerfile = jobs[0].context / "Dockerfile"
    text = dockerfile.read_text()
    assert stamp_labels(text), "the rendered Dockerfile has no stamp to break"
    dockerfile.write_text(text.replace('org.opencontainers.image.version="v1"', 'org.opencontainers.image.version="v1'))
    assert stamp_labels(dockerfile.read_text()) is None
    _, builder, _ = rebuild(jobs, held)
    assert [a["image"] for a in builder.asked] == [jobs[0].image]  # its variant's stamp is read, and matches
