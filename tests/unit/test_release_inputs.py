"""What the release path reads after the matrix is input. A release manifest, a build report and the lock
file are read by typed readers that refuse a hostile or malformed file with one line (exit 2, no traceback), and the
commands that read them write and send nothing before every check passed."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from torchimages import manifest
from torchimages.errors import UserError
from torchimages.input import lock, matrix, specs
from torchimages.report import ImageRecord, PushStage, Report, SbomStage

from .conftest import ROOT, build_py, digest
from .release_files import CPU, CU130, IMAGES, REPOSITORY, SBOM, candidates, pushed_record, two_platform_release


def first(data: dict) -> dict:
    return data["images"][0]


def set_in(path: tuple, value: object) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


# Each: how a file goes wrong, and the words of the one line that refuses it (field included).
HOSTILE: list[tuple[str, Callable[[dict], None], str]] = [
    ("short digest", set_in(("images", 0, "digest"), "sha256:abc"), "field 'digest': 'sha256:abc' is not a digest"),
    ("digest with quotes", set_in(("images", 0, "digest"), 'sha256:"; rm -rf /'), "field 'digest'"),
    ("uppercase digest", set_in(("images", 0, "digest"), "sha256:" + "A" * 64), "is not a digest"),
    ("tag latest", set_in(("images", 0, "tag"), f"{REPOSITORY}:latest"), "field 'tag': '127.0.0.1:9/ml/pt:latest' is not"),
    ("release tag elsewhere", set_in(("images", 0, "release_tag"), f"{REPOSITORY}:../../other/x"), "field 'release_tag'"),
    ("reference in another registry", set_in(("images", 0, "reference"), f"evil.example/x@{digest(0)}"),
     "field 'reference'"),
    ("image name with a path", set_in(("images", 0, "image"), "../../outside/x"), "field 'image': '../../outside/x'"),
    ("variant of another image", set_in(("images", 0, "variant"), "ssh"), "field 'variant'"),
    ("absolute SBOM path", set_in(("images", 0, "sbom", "path"), "/etc/passwd"), "field 'path': '/etc/passwd' is not a path"),
    ("SBOM path with ..", set_in(("images", 0, "sbom", "path"), "c.sbom/../../secret"), "is not a path inside"),
    ("SBOM a string", set_in(("images", 0, "sbom"), "c.sbom/x.json"), "field 'sbom': must be a JSON object"),
    ("SBOM source smuggled", set_in(("images", 0, "sbom", "source"), "/etc/shadow"), "field 'source': is not a field"),
    ("SBOM hash not hex", set_in(("images", 0, "sbom", "sha256"), "x"), "field 'sha256': 'x' is not a sha256"),
    ("version with a newline", set_in(("images", 0, "versions", "torch"), "2.13.0\nARG X=1"), "U+000A"),
    ("unknown version key", set_in(("images", 0, "versions", "evil"), "1"), "is not one of torch"),
    ("negative size", set_in(("images", 0, "size_bytes"), -1), "field 'size_bytes': must be a whole number"),
    ("size true", set_in(("images", 0, "size_bytes"), True), "field 'size_bytes': must be a whole number"),
    ("smoke count a string", set_in(("images", 0, "smoke", "passed"), "9"), "field 'passed': must be a whole number"),
    ("smoke missing", lambda d: first(d).pop("smoke"), "field 'smoke': is missing"),
    ("images a dict", set_in(("images",), {}), "field 'images': must be a list"),
    ("image a list", set_in(("images", 0), []), "images[0]: must be a JSON object"),
    ("same image twice", lambda d: d["images"].append(copy.deepcopy(first(d))), f"names '{CPU}' twice"),
    ("release with a slash", set_in(("release",), "v2.7/x"), "field 'release'"),
    ("candidate with a newline", set_in(("candidate",), "rc\n1"), "field 'candidate'"),
    ("repository with credentials", set_in(("repository",), "user:pw@r.example/x"), "field 'repository'"),
    ("candidate tag over 128 characters", set_in(("candidate",), "c" * 124),
     "field 'candidate': release and candidate make a tag longer than 128 characters"),
    ("image tag over 128 characters", set_in(("candidate",), "c" * 110), "field 'image': makes the tag"),
    ("content digest short", set_in(("images", 0, "content_digest"), "sha256:1"), "field 'content_digest'"),
]


@pytest.mark.parametrize(("change", "words"), [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE])
def test_a_hostile_manifest_is_refused_naming_the_field(tmp_path: Path, change: Callable[[dict], None],
                                                        words: str) -> None:
    data = candidates(tmp_path)
    change(data)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as caught:
        manifest.read(path)
    message = str(caught.value)
    assert words in message and message.startswith(str(path)) and "\n" not in message, message


# An entry of two platforms: each image names its platform, and each image index only images of its name for theirs.
PLATFORM_HOSTILE: list[tuple[str, Callable[[dict], None], str]] = [
    ("unknown platform", set_in(("images", 1, "platform"), "linux/riscv64"),
     "field 'platform': 'linux/riscv64' is not a platform: linux/amd64, linux/arm64"),
    ("arm64 image without its suffix", set_in(("images", 1, "image"), CU130),
     f"field 'platform': 'linux/arm64' is not the platform the name '{CU130}' says (linux/amd64)"),
    ("arm64 image said to be amd64", set_in(("images", 1, "platform"), "linux/amd64"),
     f"field 'platform': 'linux/amd64' is not the platform the name '{CU130}-arm64' says (linux/arm64)"),
    ("index member of another platform", set_in(("indexes", 0, "platforms", "linux/arm64"), f"{CU130}-amd64"),
     f"'{CU130}-amd64' for linux/arm64 is not an image of {CU130} for that platform"),
    ("index member not in the release", set_in(("indexes", 0, "platforms", "linux/arm64"), f"{CU130}-ssh-arm64"),
     f"'{CU130}-ssh-arm64' for linux/arm64 is not an image of {CU130} for that platform"),
    ("index of an unknown platform", set_in(("indexes", 0, "platforms", "linux/riscv64"), f"{CU130}-arm64"),
     "'linux/riscv64' is not a platform"),
    ("index without platforms", set_in(("indexes", 0, "platforms"), {}), "field 'platforms': lists no platform"),
    ("index release tag elsewhere", set_in(("indexes", 0, "release_tag"), f"{REPOSITORY}:latest"),
     "field 'release_tag': '127.0.0.1:9/ml/pt:latest' is not what release, repository and name make"),
    ("index digest short", set_in(("indexes", 1, "digest"), "sha256:1"), "field 'digest'"),
    ("index in a candidates' manifest", set_in(("candidate",), "rc.2"),
     "field 'indexes': a candidates' manifest holds no image index"),
]


@pytest.mark.parametrize(("change", "words"), [case[1:] for case in PLATFORM_HOSTILE],
                         ids=[case[0] for case in PLATFORM_HOSTILE])
def test_a_manifest_of_platforms_and_indexes_is_checked_image_by_image(tmp_path: Path, change: Callable[[dict], None],
                                                                       words: str) -> None:
    data = two_platform_release()
    path = tmp_path / "v2.7.json"
    path.write_text(json.dumps(data))
    read = manifest.read(path)  # the file as promote writes it is read
    assert [(i.name, i.platform) for i in read.images][:2] == [(CU130, "linux/amd64"), (CU130, "linux/arm64")]
    assert (read.indexes[0].name, read.indexes[0].platforms) == (
        CU130, (("linux/amd64", f"{CU130}-amd64"), ("linux/arm64", f"{CU130}-arm64")))
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as caught:
        manifest.read(path)
    message = str(caught.value)
    assert words in message and "\n" not in message, message


def test_the_manifest_written_is_the_manifest_read(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(candidates(tmp_path)))
    read = manifest.read(path)
    assert [read.pushed_tag(i.image) for i in read.images] == [f"v2.7-rc.1-{name}" for name in IMAGES]
    written, _ = manifest.write(read.promoted(), tmp_path / "out" / "v2.7.json")
    again = manifest.read(written)
    assert again.candidate is None and again.promoted_from == "rc.1"
    assert [i.digest for i in again.images] == [i.digest for i in read.images]
    assert (tmp_path / "out" / "v2.7.sbom" / f"{CPU}.spdx.json").read_bytes() == SBOM


@pytest.mark.parametrize("text", [b"", b"[1, 2", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b'"a string"',
                                  b'{"release": "v2.7"}'])
def test_a_file_that_is_no_manifest_is_one_line(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(text)
    with pytest.raises(UserError) as caught:
        manifest.read(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("kind", ["folder", "fifo", "device", "too-big"])
@pytest.mark.parametrize("read", [manifest.read, Report.load], ids=["manifest", "report"])
def test_a_path_that_is_no_regular_file_or_too_big_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              kind: str, read: Callable[[Path], object]) -> None:
    """files.load, under every JSON reader: a folder, a FIFO (it would block), a device (it would never end) or a
    file over the limit is refused by what it is, before a byte is read."""
    from torchimages import files

    path = {"folder": tmp_path, "device": Path("/dev/zero")}.get(kind, tmp_path / "m.json")
    if kind == "fifo":
        os.mkfifo(path)
    if kind == "too-big":
        monkeypatch.setattr(files, "MAX_BYTES", 100)
        path.write_text(json.dumps({"release": "v2.7", "padding": "x" * 200}))
    with pytest.raises(UserError) as caught:
        read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    assert {"folder": "is a folder", "fifo": "is a device, FIFO or socket", "device": "is a device, FIFO or socket",
            "too-big": "bytes is too big for"}[kind] in message, message


def test_an_sbom_link_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    data = candidates(tmp_path)
    secret = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    secret.write_text("registry-password")
    (tmp_path / "c.sbom" / f"{CPU}.spdx.json").unlink()
    (tmp_path / "c.sbom" / f"{CPU}.spdx.json").symlink_to(secret)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"field 'path': 'c.sbom/torch2.13.0-cpu-py3.11.spdx.json' leads out of"):
        manifest.read(path)


def test_an_sbom_that_changed_is_refused_when_read(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(candidates(tmp_path)))
    read = manifest.read(path)
    (tmp_path / "c.sbom" / f"{CPU}.spdx.json").write_bytes(SBOM + b" ")
    with pytest.raises(UserError, match="does not match its sha256"):
        manifest.write(read, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_what_lies_where_an_sbom_is_written_is_compared_or_replaced_never_written_through(tmp_path: Path) -> None:
    """write() reads back an SBOM it wrote before, to leave an unchanged one as it is: a link left there (to a file
    elsewhere) is replaced by the file, never followed, and a file with other bytes is written over."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(candidates(tmp_path)))
    read = manifest.read(path)
    out = tmp_path / "out"
    (out / "v2.7.sbom").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b"not mine")
    (out / "v2.7.sbom" / f"{CPU}.spdx.json").symlink_to(elsewhere)
    (out / "v2.7.sbom" / f"{CPU}-ssh.spdx.json").write_bytes(b"stale")
    manifest.write(read, out / "v2.7.json")
    for name in (CPU, f"{CPU}-ssh"):
        target = out / "v2.7.sbom" / f"{name}.spdx.json"
        assert not target.is_symlink() and target.read_bytes() == SBOM, name
    assert elsewhere.read_bytes() == b"not mine"


def promote(tmp_path: Path, *extra: str, data: dict | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data if data is not None else candidates(tmp_path)))
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())  # the CPU entry only: its three images are promoted
    data["images"] = [entry for entry in data["images"] if entry["flavor"] == "cpu"]
    data["registry"] = REPOSITORY
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "TORCHIMAGES_REGISTRY_PASSWORD": "pw"}
    return build_py("promote", "--tag", "v2.7", "--candidates", str(path), "--matrix", str(matrix), "--registry-user",
                    "u", "--plain", *extra, cwd=tmp_path, env=env, timeout=60)


@pytest.mark.parametrize(("change", "words"), [
    (set_in(("images", 0, "release_tag"), f"{REPOSITORY}:latest"), "field 'release_tag'"),
    (set_in(("images", 0, "sbom"), "c.sbom/x"), "field 'sbom': must be a JSON object"),
    (set_in(("images", 0, "sbom", "path"), "/etc/passwd"), "field 'path': '/etc/passwd'"),
    (set_in(("images", 0, "sbom", "sha256"), "0" * 64), "does not match its sha256"),
    (set_in(("images", 0, "audit"), {"status": "failed", "fail_on": "HIGH", "source": "osv/", "findings": [],
                                     "problems": ["osv/: entries[0]: X expired on 2026-01-01"]}),
     "the audit failed for torch2.13.0-cpu-py3.11: nothing promoted"),
    (set_in(("images", 0, "audit"), {"status": "clean"}), "field 'audit': audit: must be an object of exactly"),
])
def test_promote_refuses_a_hostile_candidates_file_before_it_asks_the_registry(tmp_path: Path,
                                                                              change: Callable[[dict], None],
                                                                              words: str) -> None:
    data = candidates(tmp_path)
    change(data)
    result = promote(tmp_path, data=data)
    assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, "one line, no promotion event"
    assert not (tmp_path / "releases").exists()


def test_promote_checks_the_manifest_path_before_the_first_tag(tmp_path: Path) -> None:
    (tmp_path / "folder.json").mkdir()
    result = promote(tmp_path, "--manifest", str(tmp_path / "folder.json"))
    assert result.returncode == 2 and "is a folder" in result.stderr and "Traceback" not in result.stderr, result.stderr
    reached = promote(tmp_path, "--manifest", str(tmp_path / "release.json"))  # every check passes: the registry is next
    assert reached.returncode == 1 and "not promoted: reading 127.0.0.1:9/ml/pt:v2.7-" in reached.stderr, reached.stderr
    assert "no release tag was written" in reached.stderr and "Traceback" not in reached.stderr
    assert not (tmp_path / "release.json").exists()


@pytest.mark.parametrize("ca", ["no-such-ca.crt", "folder"])
def test_a_registry_ca_that_is_no_file_is_refused_before_the_registry_is_asked(tmp_path: Path, ca: str) -> None:
    """--registry-ca is handed to the HTTPS client, which only opens it when the first request goes out."""
    (tmp_path / "folder").mkdir()
    result = promote(tmp_path, "--registry-ca", str(tmp_path / ca))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "Invalid value for '--registry-ca'" in result.stderr, result.stderr
    assert "reading 127.0.0.1:9" not in result.stderr and not (tmp_path / "releases").exists()


def report_with(record: ImageRecord, folder: Path, **raw: object) -> Path:
    """A report of `record`, with `raw` fields written into its JSON as they are."""
    path = folder / "build-report.json"
    Report("v2.7", "matrix.yaml", images=[record]).write(path)
    data = json.loads(path.read_text())
    data["images"][0].update(raw)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("changes", "words"), [
    ({"image": "../../outside/x"}, "field 'image': '../../outside/x' is not an image name"),
    ({"push": PushStage(f"{REPOSITORY}:v2.7-{CPU}", digest="sha256:abc")}, "field 'stages.push.digest'"),
    ({"sbom": SbomStage("/etc/passwd", "0" * 64, digest("id"), {})}, "field 'stages.sbom.path'"),
    ({"sbom": SbomStage("../x.json", "0" * 64, digest("id"), {})}, "field 'stages.sbom.path'"),
    ({"versions": {"torch": "2.13.0\n"}}, "field 'versions'"),
    ({"runs_on": {"gpu_archs": "8.0 $(id)"}}, "field 'runs_on'"),
    ({"runs_on": {"driver": "580"}}, "field 'runs_on'"),
    ({"tag": "x\ny"}, "field 'tag'"),
    ({"raw": {"size_bytes": "big"}}, "field 'size_bytes'"),
    ({"raw": {"layers": True}}, "field 'layers'"),
    ({"raw": {"stages": "pushed"}}, "'stages' must be a mapping"),
    # an arm64 image recorded as amd64 (and the other way): an index would send each platform's hosts the other's image
    ({"image": f"{CPU}-arm64", "tag": f"r.example.com/ml/pytorch:v2.7-{CPU}-arm64"},
     f"field 'platform': 'linux/amd64' is not the platform the name '{CPU}-arm64' says (linux/arm64)"),
    ({"platform": "linux/arm64"}, f"field 'platform': 'linux/arm64' is not the platform the name '{CPU}' says"),
    ({"raw": {"platform": "linux/arm64\n"}}, "field 'platform'"),
])
def test_manifest_refuses_a_hostile_report_and_writes_nothing(tmp_path: Path, changes: dict, words: str) -> None:
    raw = changes.pop("raw", {})
    report = report_with(pushed_record(**changes), tmp_path / "reports", **raw)
    out = tmp_path / "releases" / "v2.7.json"
    result = build_py("manifest", "--registry", REPOSITORY, "--out", str(out), str(report), cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not out.parent.exists() and not (tmp_path / "outside").exists()


def test_manifest_of_a_clean_report_writes_inside_its_folder(tmp_path: Path) -> None:
    report = report_with(pushed_record(), tmp_path / "reports")
    out = tmp_path / "releases" / "v2.7.json"
    result = build_py("manifest", "--registry", REPOSITORY, "--out", str(out), str(report), cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert manifest.read(out).images[0].digest == digest(0)
    # what a host needs travels from the report into the manifest and its host index (fit reads them there)
    assert manifest.read(out).images[0].runs_on == pushed_record().runs_on
    assert json.loads((out.parent / "v2.7-hosts.json").read_text())["tags"][0]["platforms"]["linux/amd64"]["gpu_archs"] \
        == "none"


def test_push_refuses_the_report_of_another_release(tmp_path: Path) -> None:
    report = report_with(pushed_record(), tmp_path)
    result = build_py("push", "--tag", "v2.8", "--report", str(report), "--registry", REPOSITORY, "--matrix",
                      str(ROOT / "matrix.yaml"), cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "is the report of release v2.7, not v2.8" in result.stderr, result.stderr


SOURCE = "https://registry-1.docker.io/v2/library/debian/manifests/bookworm-slim"  # where lock read the pin
GOOD_PIN = {"digest": "sha256:" + "a" * 64, "locked_at": "2026-12-05T13:00:00Z", "source": SOURCE}


@pytest.mark.parametrize(("pin", "words"), [
    ({**GOOD_PIN, "digest": "sha256:abc"}, "field 'digest'"),
    ({**GOOD_PIN, "digest": "sha256:" + "a" * 64 + "\nARG BASE_IMAGE=other/image"}, "field 'digest'"),
    ({**GOOD_PIN, "locked_at": "t\n"}, "field 'locked_at'"),
    ({**GOOD_PIN, "locked_at": "2026-12-05"}, "field 'locked_at': '2026-12-05' is not a UTC time"),
    ({**GOOD_PIN, "source": "file:///etc/shadow"}, "field 'source': 'file:///etc/shadow' is not where the tag's manifest"),
    ({**GOOD_PIN, "source": "https://user:secret@registry-1.docker.io/v2/library/debian/manifests/bookworm-slim"},
     "field 'source': 'https://***@registry-1.docker.io"),
    ({**GOOD_PIN, "extra": 1}, "field 'extra'"),
    ("sha256:" + "a" * 64, "must be a JSON object"),
])
def test_a_hostile_lock_pin_is_refused(tmp_path: Path, pin: object, words: str) -> None:
    path = tmp_path / "matrix.lock"
    path.write_text(json.dumps({"pins": {"debian:bookworm-slim": pin}}))
    with pytest.raises(UserError) as caught:
        lock.LockFile.load(path)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    assert "secret" not in str(caught.value)
    path.write_text(json.dumps({"pins": {"debian:bookworm-slim": GOOD_PIN}}))
    assert lock.LockFile.load(path).pins["debian:bookworm-slim"].source == SOURCE  # the same pin, as lock writes it


def test_lock_refuses_to_write_a_digest_the_registry_made_up(tmp_path: Path) -> None:
    plan = lock_plan()
    lock_file = lock.LockFile(tmp_path / "matrix.lock")
    for answer in ("sha256:abc", 'sha256:"quoted"', "sha256:" + "a" * 64 + "\n"):
        with pytest.raises(UserError, match="the registry answered a digest that cannot be pinned"):
            lock.update(plan, lock_file, lambda location, answer=answer: answer, refresh=False)
    assert lock_file.pins == {} and not lock_file.path.exists()


def lock_plan() -> specs.Plan:
    """The project's matrix, resolved."""
    return specs.resolve(matrix.load(ROOT / "matrix.yaml"))


@pytest.mark.parametrize(("value", "ok"), [("5%", True), ("0.05", True), ("1", True), ("5", False), ("500%", True),
                                           ("2000%", False), ("-1%", False), ("nan", False), ("0.5%", True)])
def test_max_growth_is_a_percent_or_a_share_never_both(value: str, ok: bool) -> None:
    from torchimages.build.budget import parse_growth

    if ok:
        assert 0 <= parse_growth(value) <= 10
    else:
        with pytest.raises(ValueError):
            parse_growth(value)


@pytest.mark.parametrize(("args", "words"), [
    (["--tag", "v" + "1" * 100, "--dry-run"], "would be 1"),
    (["--tag", "v2.7", "--push", "--candidate", "rc." + "1" * 90, "--dry-run"], "--candidate"),
])
def test_the_tag_length_rule_holds_over_the_whole_image_tag(args: list[str], words: str) -> None:
    result = build_py(*args, timeout=60)
    assert result.returncode == 2 and words in result.stderr and "Docker's limit is 128" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_url_with_credentials_is_redacted_in_every_message() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "--tag", "v2.7", "--dry-run", "--pip-index-url",
                             "https://ci:s3cret-token@pypi.example.com/simple#frag"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 2 and "https://***@pypi.example.com/simple" in result.stderr, result.stderr
    assert "s3cret" not in result.stderr + result.stdout


def test_publish_writes_each_pushed_image_once_in_name_order_with_what_its_report_says(tmp_path: Path) -> None:
    from torchimages.publish import push as publish

    sbom_file = tmp_path / "v2.7.sbom" / f"{CPU}-ssh.spdx.json"
    sbom_file.parent.mkdir()
    sbom_file.write_bytes(SBOM)
    ssh = pushed_record(image=f"{CPU}-ssh", variant="ssh", size_bytes=7, layers=3, content_digest=digest("content"),
                        push=PushStage(f"{REPOSITORY}:v2.7-{CPU}-ssh", digest=digest(1)),
                        sbom=SbomStage(f"v2.7.sbom/{CPU}-ssh.spdx.json", hashlib.sha256(SBOM).hexdigest(), digest("id"),
                                       {"deb": 3}))
    failed = pushed_record(image=f"{CPU}-jupyter", variant="jupyter",
                           push=PushStage(f"{REPOSITORY}:v2.7-{CPU}-jupyter", error="denied"))
    report = Report("v2.7", "matrix.yaml", images=[ssh, failed, pushed_record()], folder=tmp_path)
    made = publish.manifest([report], REPOSITORY)
    assert [i.image for i in made.images] == [CPU, f"{CPU}-ssh"], "sorted, and what failed to push left out"
    item = made.by_name()[f"{CPU}-ssh"]
    assert (item.digest, item.size_bytes, item.layers, item.content_digest) == (digest(1), 7, 3, digest("content"))
    assert item.smoke.passed == 9 and item.sbom is not None and item.sbom.read(item.image) == SBOM
    assert made.candidate is None and made.reference(item) == f"{REPOSITORY}@{digest(1)}"
    with pytest.raises(UserError, match=re.escape(f"{CPU}-ssh was pushed to {REPOSITORY}:v2.7-{CPU}-ssh, not "
                                                  f"other.example/ml/pt:v2.7-{CPU}-ssh")):
        publish.manifest([report], "other.example/ml/pt")
    untested = pushed_record(smoke=None)
    with pytest.raises(UserError, match="records a push but no smoke results"):
        publish.manifest([Report("v2.7", "matrix.yaml", images=[untested], folder=tmp_path)], REPOSITORY)


def test_the_engine_a_pushed_image_needs_goes_into_its_runs_on_and_is_read_back(tmp_path: Path) -> None:
    """A push that read zstd layers back from the registry (PushStage.min_docker) makes the manifest's runs_on say
    min_docker, beside what the build recorded; the written manifest reads back the same, and a report whose push
    stage holds no engine release is refused."""
    from torchimages import manifest as manifests
    from torchimages.publish import push as publish

    needs = {"min_driver": "none", "min_driver_minor_compat": "none", "gpu_archs": "none"}
    zstd = pushed_record(runs_on=needs, push=PushStage(f"{REPOSITORY}:v2.7-{CPU}", digest=digest(1), min_docker="23.0"))
    made = publish.manifest([Report("v2.7", "matrix.yaml", images=[zstd], folder=tmp_path)], REPOSITORY)
    assert made.by_name()[CPU].runs_on == {**needs, "min_docker": "23.0"}
    written = tmp_path / "releases" / "v2.7.json"
    written.parent.mkdir()
    manifests.write(made, written)
    assert manifests.read(written).by_name()[CPU].runs_on == {**needs, "min_docker": "23.0"}
    gzip = pushed_record(runs_on=needs, push=PushStage(f"{REPOSITORY}:v2.7-{CPU}", digest=digest(1)))
    assert publish.manifest([Report("v2.7", "m.yaml", images=[gzip], folder=tmp_path)], REPOSITORY).by_name()[CPU].runs_on == needs
    report = tmp_path / "report.json"
    Report("v2.7", "matrix.yaml", images=[pushed_record(push=PushStage(f"{REPOSITORY}:v2.7-{CPU}", digest=digest(1),
                                                                      min_docker="latest"))]).write(report)
    with pytest.raises(UserError, match=r"stages\.push\.min_docker.*'latest' is not a Docker engine release"):
        Report.load(report)


def test_a_written_manifest_has_its_host_index_beside_it(tmp_path: Path) -> None:
    """releases/v2.7-hosts.json: per tag, each platform's pin, versions, GPU generations and driver, from the manifest
    as read (what `build.py fit --manifest` decides with), published as a release asset of its own."""
    source = tmp_path / "in.json"
    source.write_text(json.dumps(two_platform_release()))
    json_path, _ = manifest.write(manifest.read(source), tmp_path / "releases" / "v2.7.json")
    index = json.loads((tmp_path / "releases" / "v2.7-hosts.json").read_text())
    assert json_path.name == "v2.7.json" and index["release"] == "v2.7" and index["repository"] == REPOSITORY
    tags = {tag["tag"]: tag["platforms"] for tag in index["tags"]}
    assert set(tags) == {f"{REPOSITORY}:v2.7-{CU130}", f"{REPOSITORY}:v2.7-{CU130}-ssh"}
    arm64 = tags[f"{REPOSITORY}:v2.7-{CU130}"]["linux/arm64"]
    assert arm64["pin"] == f"{REPOSITORY}@{digest('p1')}" and arm64["cuda"] == "13.0"
    assert (arm64["gpu_archs"], arm64["min_driver"], arm64["min_driver_minor_compat"]) == \
        ("8.0 8.6 9.0 10.0 11.0 12.0", "580.95.05", "580")
    assert tags[f"{REPOSITORY}:v2.7-{CU130}"]["linux/amd64"]["gpu_archs"] == "7.5 8.0 8.6 9.0 10.0 12.0"


LOCK_LINE = ("torch==2.13.0+cpu --hash=sha256:" + "ab" * 32 + "  # torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl "
             "from file:///tmp/build-config/wheelhouse/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl")


def with_lock(tmp_path: Path, text: bytes = (LOCK_LINE + "\n").encode(), **entry: object) -> Path:
    """The candidates' manifest with the base image's wheel lock beside it (c.wheels/IMAGE.txt)."""
    data = candidates(tmp_path)
    (tmp_path / "c.wheels").mkdir(exist_ok=True)
    (tmp_path / "c.wheels" / f"{CPU}.txt").write_bytes(text)
    first(data)["wheels"] = {"path": f"c.wheels/{CPU}.txt", "count": 1, "sha256": hashlib.sha256(text).hexdigest(),
                             **entry}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    return path


def test_the_wheel_lock_travels_with_the_manifest_and_is_written_beside_the_release(tmp_path: Path) -> None:
    read = manifest.read(with_lock(tmp_path))
    assert read.by_name()[CPU].wheels == (LOCK_LINE,) and read.by_name()[IMAGES[1]].wheels is None
    written, _ = manifest.write(read.promoted(), tmp_path / "out" / "v2.7.json")
    assert (tmp_path / "out" / "v2.7.wheels" / f"{CPU}.txt").read_text() == LOCK_LINE + "\n"
    assert manifest.read(written).by_name()[CPU].wheels == (LOCK_LINE,)
    result = build_py("wheels", "check", str(written), "--wheelhouse", str(tmp_path), "--offline")
    assert result.returncode == 1 and f"sha256:{'ab' * 32}) is served by no source: wheelhouse" in result.stderr


@pytest.mark.parametrize(("text", "entry", "words"), [
    ((LOCK_LINE + "\n").encode(), {"sha256": "0" * 64}, "not the file whose sha256 the manifest records"),
    (b"torch==2.13.0\n", {}, "is not a locked wheel"),
    ((LOCK_LINE + "\n").encode(), {"count": 2}, "field 'count': is not the 1 wheels"),
    ((LOCK_LINE + "\n").encode(), {"path": "../x.txt"}, "field 'path'"),
])
def test_a_wheel_lock_asset_that_is_not_what_the_manifest_records_is_refused(tmp_path: Path, text: bytes,
                                                                              entry: dict, words: str) -> None:
    with pytest.raises(UserError) as caught:
        manifest.read(with_lock(tmp_path, text, **entry))
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
