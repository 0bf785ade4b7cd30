"""`build --from-release MANIFEST` (torchimages/build/released.py): what a release recorded (each lock line's pip step,
each base image's FROM) read back and checked, each build given its step's lock and the released base, and a rebuild
that cannot give the release's images refused before anything is built. The rebuild itself, through a real engine and
pip's hash-checking mode, is tests/integration/test_publish.py's."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from torchimages import manifest, wheellock
from torchimages.build import released, render
from torchimages.build.inputs import BuildInputs
from torchimages.build.jobs import BuildJob, BuildRunner, Selection, plan_jobs
from torchimages.build.released import FromRelease
from torchimages.engine import BuildOutcome
from torchimages.errors import UserError
from torchimages.input.grammar import locked_wheel_problem, materials_problem
from torchimages.manifest import BuiltFrom
from torchimages.publish import push
from torchimages.report import Report
from torchimages.settings import SETTINGS

from ..conftest import digest, plan_of
from ..fake_engine import FakeEngine
from ..release_files import CPU, IMAGES, REPOSITORY, candidates, pushed_record

ENTRY = """
registry: registry.example.com/ml/pytorch
images:
  - {flavor: cpu, torch: "2.13.0", python: "3.11", variants: [jupyter, ssh]}
"""
BASE = "localhost/debian:bookworm-slim"
BASE_ID = digest("bookworm")


def wheel(name: str, step: str | None, seed: str = "") -> wheellock.LockedWheel:
    file = f"{name}-1.0-py3-none-any.whl"
    return wheellock.LockedWheel(name, "1.0", file, hashlib.sha256(f"{name}{seed}".encode()).hexdigest(),
                                 f"https://pypi.org/packages/{file}", step)


BASE_WHEELS = (wheel("torch", "torch"), wheel("numpy", "torch"), wheel("pillow", "pip"))
JUPYTER_WHEELS = (*BASE_WHEELS, wheel("jupyterlab", "jupyter"))


def release(folder: Path, *, locks: dict[str, tuple[wheellock.LockedWheel, ...]] | None = None,
            built_from: dict | None = None, epoch: object = None) -> Path:
    """A release manifest whose base and jupyter images carry locks (c.wheels/IMAGE.txt) and whose base names the image
    it was built FROM; every image records `epoch` as its SOURCE_DATE_EPOCH where one is given."""
    data = candidates(folder)
    for entry in data["images"] if epoch is not None else ():
        entry["source_date_epoch"] = epoch
    (folder / "c.wheels").mkdir(exist_ok=True)
    locks = {CPU: BASE_WHEELS, IMAGES[1]: JUPYTER_WHEELS} if locks is None else locks
    for entry in data["images"]:
        if entry["image"] in locks:
            text = wheellock.lock_text(locks[entry["image"]]).encode()
            (folder / "c.wheels" / f"{entry['image']}.txt").write_bytes(text)
            entry["wheels"] = {"path": f"c.wheels/{entry['image']}.txt", "count": len(locks[entry["image"]]),
                               "sha256": hashlib.sha256(text).hexdigest()}
    data["images"][0]["built_from"] = {"image": BASE, "id": BASE_ID} if built_from is None else built_from
    if not data["images"][0]["built_from"]:
        del data["images"][0]["built_from"]
    path = folder / "c.json"
    path.write_text(json.dumps(data))
    return path


def jobs_of(tmp_path: Path, inputs: BuildInputs | None = None) -> list[BuildJob]:
    inputs = inputs or BuildInputs()
    plan = plan_of(ENTRY)
    render.write(plan, "v2.7.1", tmp_path / "images")
    return plan_jobs(plan, "v2.7.1", tmp_path / "images", Selection(), base_for=inputs.base_for)


def test_a_lock_line_says_which_pip_step_installed_its_wheel_and_reads_back_the_same() -> None:
    for step in ("torch", None):
        line = wheel("numpy", step).line()
        assert locked_wheel_problem(line) is None, line
        assert wheellock.parse_line(line) == wheel("numpy", step)
    assert "# torch: numpy-1.0-py3-none-any.whl from https://" in wheel("numpy", "torch").line()
    assert locked_wheel_problem(wheel("numpy", "Torch").line()) is not None  # a step is lowercase letters


def report(*names: str) -> bytes:
    items = [{"download_info": {"url": f"https://pypi.org/packages/{name}-1.0-py3-none-any.whl",
                                "archive_info": {"hashes": {"sha256": hashlib.sha256(name.encode()).hexdigest()}}},
              "metadata": {"name": name, "version": "1.0"}} for name in names]
    return json.dumps({"version": "1", "install": items}).encode()


def test_each_wheel_read_from_an_image_is_marked_with_the_step_whose_report_named_it() -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as folder:
        for step, names in (("torch", ("torch", "numpy")), ("jupyter", ("jupyterlab",))):
            data = report(*names)
            member = tarfile.TarInfo(f"torchimages-wheels/{step}.json")
            member.size = len(data)
            folder.addfile(member, io.BytesIO(data))
    wheels = wheellock.from_image_folder(archive.getvalue(), CPU)
    assert {(w.name, w.step) for w in wheels} == {("torch", "torch"), ("numpy", "torch"), ("jupyterlab", "jupyter")}


def test_a_base_images_from_travels_in_the_manifest_and_only_a_base_carries_one(tmp_path: Path) -> None:
    read = manifest.read(release(tmp_path))
    assert read.by_name()[CPU].built_from == BuiltFrom(BASE, BASE_ID)
    written, _ = manifest.write(read.promoted(), tmp_path / "out" / "v2.7.json")
    assert manifest.read(written).by_name()[CPU].built_from == BuiltFrom(BASE, BASE_ID)
    data = json.loads((tmp_path / "c.json").read_text())
    data["images"][1]["built_from"] = {"image": BASE, "id": BASE_ID}
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"images\[1\].*built_from.*is a base image's"):
        manifest.read(tmp_path / "c.json")


@pytest.mark.parametrize(("built_from", "words"), [
    ({"image": "bad image name", "id": BASE_ID}, "field 'image'"),
    ({"image": BASE, "id": "sha256:12"}, "field 'id'"),
    ({"image": BASE, "id": BASE_ID, "more": 1}, "more"),
])
def test_a_built_from_that_is_not_an_image_and_its_id_is_refused(tmp_path: Path, built_from: dict, words: str) -> None:
    with pytest.raises(UserError, match=words):
        manifest.read(release(tmp_path, built_from=built_from))


def test_each_build_gets_every_steps_lock_and_a_base_builds_from_the_released_image(tmp_path: Path) -> None:
    from_release = FromRelease.read(release(tmp_path))
    builder = LockRecordingBuilder()
    engine = FakeEngine(images={BASE: {"Id": BASE_ID, "Os": "linux", "Architecture": "amd64", "Config": {}}}).engine
    outcomes = BuildRunner(engine, BuildInputs(), lambda _event: None, builder=builder, released=from_release).run(
        [job for job in jobs_of(tmp_path) if job.variant in ("base", "jupyter")])
    assert all(outcome.ok for outcome in outcomes.values()), outcomes
    assert builder.base_images[CPU] == BASE
    base_locks, jupyter_locks = builder.locks[CPU], builder.locks[IMAGES[1]]
    assert sorted(base_locks) == ["devel.txt", "jupyter.txt", "pip.txt", "torch.txt"]
    assert base_locks["torch.txt"] == wheellock.lock_text(BASE_WHEELS[:2]) and base_locks["jupyter.txt"] == ""
    assert jupyter_locks["jupyter.txt"] == wheellock.lock_text(JUPYTER_WHEELS[3:])
    # every line of a step's lock is one pip's --require-hashes reads
    for text in (*base_locks.values(), *jupyter_locks.values()):
        assert all(locked_wheel_problem(line) is None for line in text.splitlines())


def test_base_image_given_wins_over_the_released_one(tmp_path: Path) -> None:
    inputs = BuildInputs(base_image="localhost/other:1")
    builder = LockRecordingBuilder()
    engine = FakeEngine(images={"localhost/other:1": {"Id": digest(1), "Os": "linux", "Architecture": "amd64"}}).engine
    BuildRunner(engine, inputs, lambda _event: None, builder=builder, released=FromRelease.read(release(tmp_path))).run(
        [job for job in jobs_of(tmp_path, inputs) if job.variant == "base"])
    assert builder.base_images[CPU] == "localhost/other:1"


@pytest.mark.parametrize(("recorded", "passed"), [
    (1700000000, "1700000000"),  # another release's time: given to every build
    (SETTINGS.source_date_epoch, None),  # the rendered Dockerfile's own: the build's arguments stay as they were
    (None, None),  # an older release, which recorded none
])
def test_a_rebuild_gives_the_environment_the_time_its_release_recorded_and_records_it(
        tmp_path: Path, recorded: int | None, passed: str | None) -> None:
    from_release = FromRelease.read(release(tmp_path, epoch=recorded))
    builder = LockRecordingBuilder()
    engine = FakeEngine(images={BASE: {"Id": BASE_ID, "Os": "linux", "Architecture": "amd64", "Config": {}}}).engine
    outcomes = BuildRunner(engine, BuildInputs(), lambda _event: None, builder=builder, released=from_release).run(
        [job for job in jobs_of(tmp_path) if job.variant in ("base", "jupyter")])
    assert builder.epochs == {CPU: passed, IMAGES[1]: passed}
    recorded_now = {image: outcome.materials["source_date_epoch"] for image, outcome in outcomes.items()}
    assert recorded_now == dict.fromkeys((CPU, IMAGES[1]), recorded or SETTINGS.source_date_epoch)
    assert all(materials_problem(outcome.materials) is None for outcome in outcomes.values())


def test_the_time_travels_from_the_build_into_the_manifest_and_back(tmp_path: Path) -> None:
    materials = {"dockerfile": "Dockerfile", "dockerfile_sha256": "0" * 64, "from": BASE, "from_id": BASE_ID,
                 "wheels": {}, "indexes": [], "engine": "20.10.24", "source_date_epoch": 1700000000}
    report = Report("v2.7", "matrix.yaml", images=[pushed_record(materials=materials)], folder=tmp_path)
    pushed = push.manifest([report], REPOSITORY).by_name()[CPU]
    assert (pushed.source_date_epoch, pushed.built_from) == (1700000000, BuiltFrom(BASE, BASE_ID))
    read = manifest.read(release(tmp_path, epoch=1700000000))
    written, _ = manifest.write(read.promoted(), tmp_path / "out" / "v2.7.json")
    assert {item.source_date_epoch for item in manifest.read(written).images} == {1700000000}
    assert {item.source_date_epoch for item in manifest.read(release(tmp_path / "older")).images} == {None}


@pytest.mark.parametrize("epoch", [-1, 2**32, "1700000000", True, 1.5])
def test_a_recorded_time_that_is_not_one_is_refused_naming_the_field(tmp_path: Path, epoch: object) -> None:
    with pytest.raises(UserError, match=r"images\[0\].*source_date_epoch.*whole number of seconds"):
        manifest.read(release(tmp_path, epoch=epoch))
    materials = {"dockerfile": "Dockerfile", "dockerfile_sha256": "0" * 64, "from": "", "from_id": None, "wheels": {},
                 "indexes": [], "engine": "20.10.24", "source_date_epoch": epoch}
    assert "source_date_epoch must be a whole number" in (materials_problem(materials) or "")


@dataclass
class LockRecordingBuilder:
    """Records each build's FROM and the wheel locks its context holds (the context is gone after the build)."""

    cross_installs: bool = True
    dockerfile: str = "Dockerfile"
    locks: dict[str, dict[str, str]] = field(default_factory=dict)
    base_images: dict[str, str | None] = field(default_factory=dict)
    epochs: dict[str, str | None] = field(default_factory=dict)

    def build(self, image: str, context: Path, tag: str, *, buildargs: dict[str, str], emit: object,
              cancel: threading.Event, **_options: object) -> BuildOutcome:
        folder = context / "build-config" / released.LOCKS
        self.locks[image] = {file.name: file.read_text() for file in folder.iterdir()} if folder.is_dir() else {}
        self.base_images[image] = buildargs.get("BASE_IMAGE")
        self.epochs[image] = buildargs.get("SOURCE_DATE_EPOCH")
        return BuildOutcome(image, tag, image_id=digest(image))

    def stop_builds(self) -> None: ...

    def describe(self) -> str:
        return "recording"


@pytest.mark.parametrize(("change", "words"), [
    ({"locks": {}}, f"{CPU}: release v2.7 records no wheel lock for it"),
    ({"locks": {CPU: (wheel("torch", None),), IMAGES[1]: JUPYTER_WHEELS}},
     f"{CPU}: its lock does not say which pip step installed torch==1.0"),
    ({"built_from": {}}, f"{CPU}: release v2.7 does not record the image it was built FROM"),
])
def test_a_release_that_did_not_record_what_a_rebuild_needs_is_refused_naming_the_image(tmp_path: Path, change: dict,
                                                                                        words: str) -> None:
    from_release = FromRelease.read(release(tmp_path, **change))
    jobs = [job for job in jobs_of(tmp_path) if job.variant == "base"]
    assert any(words in line for line in from_release.problems(jobs)), from_release.problems(jobs)


def test_an_image_the_release_does_not_hold_is_refused(tmp_path: Path) -> None:
    from_release = FromRelease.read(release(tmp_path))
    from_release.images.pop(IMAGES[2])
    lines = from_release.problems(jobs_of(tmp_path))
    assert lines == [f"{IMAGES[2]} is not an image of release v2.7 ({tmp_path / 'c.json'}): select the images it holds "
                     "(--only)"]


def wheelhouse_of(folder: Path, wheels: tuple[wheellock.LockedWheel, ...]) -> Path:
    """A wheelhouse whose files hash to the locked sha256: each test wheel's bytes are its name (wheel() hashes so)."""
    folder.mkdir()
    for item in wheels:
        (folder / item.file).write_bytes(item.name.encode())
    return folder


def test_a_locked_wheel_the_wheelhouse_lacks_is_refused_naming_it_its_hash_and_where_it_was_looked(
        tmp_path: Path) -> None:
    from_release = FromRelease.read(release(tmp_path))
    jobs = jobs_of(tmp_path)[:2]
    house = wheelhouse_of(tmp_path / "wh", JUPYTER_WHEELS)
    sources = released.build_sources(BuildInputs(wheelhouse=house, offline=True), jobs, fetch=None)  # type: ignore
    engine = FakeEngine(images={BASE: {"Id": BASE_ID}}).engine
    released.check(from_release, jobs, sources, engine, lambda _platform: None)  # every wheel is there: no refusal
    (house / "jupyterlab-1.0-py3-none-any.whl").unlink()
    with pytest.raises(UserError) as refused:
        released.check(from_release, jobs, sources, engine, lambda _platform: None)
    line = str(refused.value)
    assert line.startswith(f"--from-release {tmp_path / 'c.json'}: jupyterlab==1.0 (jupyterlab-1.0-py3-none-any.whl, "
                           f"sha256:{JUPYTER_WHEELS[3].sha256}) is served by no source: wheelhouse {house}"), line


def test_a_base_image_of_another_id_than_the_releases_is_refused(tmp_path: Path) -> None:
    from_release = FromRelease.read(release(tmp_path))
    jobs = [job for job in jobs_of(tmp_path) if job.variant == "base"]
    engine = FakeEngine(images={BASE: {"Id": digest("trixie")}}).engine
    lines = released.base_problems(from_release, jobs, engine, lambda _platform: None)
    assert len(lines) == 1 and lines[0].startswith(
        f"{CPU} was built FROM {BASE}, then {BASE_ID}; {BASE} is {digest('trixie')} on this engine"), lines


def test_a_base_image_this_engine_lacks_and_cannot_pull_is_refused_with_the_pulls_answer(tmp_path: Path) -> None:
    from_release = FromRelease.read(release(tmp_path))
    jobs = [job for job in jobs_of(tmp_path) if job.variant == "base"]
    fake = FakeEngine()
    fake.pull = lambda reference, **_options: iter([{"error": f"pull access denied for {reference}"}])  # type: ignore
    lines = released.base_problems(from_release, jobs, fake.engine, lambda _platform: None)
    assert lines == [f"{CPU} was built FROM {BASE}; {BASE} is not on this engine and its pull failed (pull access "
                     f"denied for {BASE}): load that image, or give --base-image REF of it"]


def test_a_base_pinned_by_the_releases_digest_is_left_to_the_engines_pull_to_check(tmp_path: Path) -> None:
    pinned = f"registry.example.com/debian@{digest('pinned')}"
    from_release = FromRelease.read(release(tmp_path, built_from={"image": pinned, "id": BASE_ID}))
    jobs = [job for job in jobs_of(tmp_path) if job.variant == "base"]
    assert released.base_problems(from_release, jobs, FakeEngine().engine, lambda _platform: None) == []


def test_an_offline_rebuild_looks_in_the_wheelhouse_alone_and_an_online_one_in_the_indexes_too(tmp_path: Path) -> None:
    jobs = jobs_of(tmp_path)
    house = tmp_path / "wh"
    house.mkdir()
    offline = released.build_sources(BuildInputs(wheelhouse=house, offline=True), jobs, fetch=None)  # type: ignore
    assert [str(source) for source in offline] == [f"wheelhouse {house}"]
    online = released.build_sources(BuildInputs(wheelhouse=house), jobs, fetch=None)  # type: ignore
    assert [str(source) for source in online] == [f"wheelhouse {house}", "index https://pypi.org/simple/",
                                                  "index https://download.pytorch.org/whl/cpu"]
    shutil.rmtree(house)
