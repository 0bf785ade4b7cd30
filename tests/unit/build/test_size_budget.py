"""The size budget. An image may grow at most --max-growth over the same image of the previous
release unless its matrix entry states why; a variant may add only its budget over its base; an image over budget
fails the release and is not pushed."""

from __future__ import annotations

import pytest

from torchimages.build.budget import Budget, parse_growth
from torchimages.input import matrix, specs
from torchimages.input.specs import Release
from torchimages.manifest import ManifestImage, ReleaseManifest, SmokeCounts
from torchimages.publish import push as publish
from torchimages.report import ImageRecord, Report, SmokeStage

from ..conftest import ROOT, digest, run_cli

CPU = "torch2.13.0-cpu-py3.11"


def plan(reason: str | None = None) -> specs.Plan:
    text = (ROOT / "matrix.yaml").read_text()
    if reason:
        text = text.replace('  - flavor: cpu\n', f'  - flavor: cpu\n    size_growth_reason: "{reason}"\n')
    return specs.resolve(matrix.loads(text, "matrix.yaml"))


def report(base: int, jupyter_adds: int) -> Report:
    smoke = SmokeStage(passed=9, failed=0, skipped=0, skipped_no_gpu=0, seconds=1.0, gpus=0, tiers={}, error=None,
                       image_id=digest(1))
    return Report("v2", "matrix.yaml", images=[
        ImageRecord(image=CPU, entry=CPU, variant="base", tag="t", result="built", versions={}, size_bytes=base,
                    smoke=smoke),
        ImageRecord(image=f"{CPU}-jupyter", entry=CPU, variant="jupyter", tag="t", result="built", versions={},
                    size_bytes=base + jupyter_adds, adds_bytes=jupyter_adds, smoke=smoke)])


COUNTS = SmokeCounts(passed=9, failed=0, skipped=0, skipped_no_gpu=0)
PREVIOUS = ReleaseManifest("v1", "r.example.com/ml/pt", images=(
    ManifestImage(CPU, "base", digest(1), {}, COUNTS, size_bytes=1_400_000_000),
    ManifestImage(f"{CPU}-jupyter", "jupyter", digest(2), {}, COUNTS, size_bytes=1_600_000_000)))


def test_growth_over_the_previous_release_is_refused_past_the_budget() -> None:
    within = Budget(previous=PREVIOUS).check(plan(), report(1_460_000_000, 190_000_000))
    assert within == {}, "4.3% is within 5%"
    over = Budget(previous=PREVIOUS).check(plan(), report(1_480_000_000, 190_000_000))
    assert over[CPU].startswith("grew 5.7% over release v1 (1.40 GB -> 1.48 GB), above --max-growth 5%")
    assert "state size_growth_reason in its matrix entry" in over[CPU]
    assert f"{CPU}-jupyter" not in over, "the variant grew 4.4%"
    assert Budget(max_growth=0.10, previous=PREVIOUS).check(plan(), report(1_480_000_000, 190_000_000)) == {}


def test_a_stated_reason_lets_the_entry_grow() -> None:
    assert Budget(previous=PREVIOUS).check(plan("torch 2.13 adds cuDNN frontend"), report(1_600_000_000, 190_000_000)) == {}


def test_a_variant_may_add_only_its_budget() -> None:
    over = Budget().check(plan(), report(1_400_000_000, 350_000_000))
    assert over == {f"{CPU}-jupyter": "the jupyter variant adds 350.00 MB over its base, above its budget of 300.00 MB; "
                                      "if intended, state size_growth_reason in its matrix entry"}


def test_an_image_over_budget_fails_the_release_and_is_not_pushed() -> None:
    run = report(1_400_000_000, 350_000_000)
    run.images[1].over_budget = "the jupyter variant adds 350.00 MB"
    assert run.images[0].ok and not run.images[1].ok
    only = Report(run.release, run.matrix, images=[run.images[1]])
    publisher = publish.Publisher(None, "r.example.com/ml/pt", Release(run.release), credentials=None)
    outcomes = publisher.publish(only)  # no registry is asked
    assert outcomes[0].error == "not pushed: over its size budget: the jupyter variant adds 350.00 MB"


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125)])
def test_growth_is_written_as_a_share(text: str, value: float) -> None:
    assert parse_growth(text) == pytest.approx(value)


def test_a_bad_max_growth_and_reason_are_refused() -> None:
    result = run_cli("build", "--tag", "v2.7", "--max-growth", "lots", "--dry-run")
    assert result.returncode == 2 and "--max-growth 'lots' is not a growth" in result.stderr
    with pytest.raises(Exception, match="size_growth_reason"):
        plan(" ")


def test_each_platform_is_held_to_its_own_image_of_the_previous_release() -> None:
    """An entry of two platforms: the arm64 image is compared with the previous arm64 image, never with amd64's."""
    cu130 = "torch2.14.0-cu130-cudnn9.24-py3.11"
    two = specs.resolve(matrix.loads("registry: r.example.com/ml/pt\nimages:\n  - {flavor: cuda, torch: '2.14.0', "
                                     "cuda: '13.0', python: '3.11', platforms: [linux/amd64, linux/arm64]}\n"))
    previous = ReleaseManifest("v1", "r.example.com/ml/pt", images=(
        ManifestImage(f"{cu130}-amd64", "base", digest(1), {}, COUNTS, size_bytes=6_300_000_000),
        ManifestImage(f"{cu130}-arm64", "base", digest(2), {}, COUNTS, size_bytes=5_800_000_000,
                      platform="linux/arm64")))
    images = [ImageRecord(image=f"{cu130}-{arch}", entry=cu130, variant="base", tag="t", result="built", versions={},
                          size_bytes=size, platform=f"linux/{arch}") for arch, size in (("amd64", 6_300_000_000),
                                                                                        ("arm64", 6_100_000_000))]
    over = Budget(previous=previous).check(two, Report("v2", "m.yaml", images=images))
    assert list(over) == [f"{cu130}-arm64"] and over[f"{cu130}-arm64"].startswith("grew 5.2% over release v1")
