"""The SBOM step of publishing: every pushed image gets the SBOM of the image its suite tested, several scanned at a
time (syft itself reads real images in tests/integration/publish/test_publish.py)."""

from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit.fake_engine import FakeEngine
from torchimages.errors import UserError
from torchimages.publish import pushstage as publishstage
from torchimages.publish import sbom
from torchimages.report import ImageRecord, PushStage, Report, SbomStage

CLASSIC = FakeEngine().engine


def pushed_report(names: list[str], *, failed_push: str = "") -> Report:
    report = Report(release="v1", matrix="matrix.yaml")
    for name in names:
        push = PushStage(f"r.example/ml/x:v1-{name}", digest="sha256:" + "a" * 64, error="denied" if name == failed_push
                         else None)
        report.images.append(ImageRecord(image=name, entry=name, variant="base", tag=f"r/{name}:v1", result="built",
                                         versions={}, image_id=f"sha256:{name}", push=push))
    return report


class FakeSyft:
    """sbom.generate answered after a pause; counts the scans side by side and which image IDs were scanned."""

    def __init__(self, failing: str = "") -> None:
        self.now = self.most = 0
        self.scanned: list[str] = []
        self.lock = threading.Lock()
        self.failing = failing

    def __call__(self, image_id: str, out: Path, *, save: object = None) -> SbomStage:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.2)
        with self.lock:
            self.now -= 1
            self.scanned.append(image_id)
        if image_id == self.failing:
            raise UserError(f"syft could not read {image_id}")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("{}")
        return SbomStage(path=str(out), sha256="0" * 64, image_id=image_id, packages={"deb": 1})


def test_pushed_images_are_scanned_side_by_side_and_each_keeps_its_own_sbom(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    syft = FakeSyft()
    monkeypatch.setattr(sbom, "generate", syft)
    report = pushed_report(["a", "b", "c", "d", "e"], failed_push="d")
    publishstage.write_sboms(report, tmp_path / "v1.sbom", lambda event: None, CLASSIC)
    assert 1 < syft.most <= publishstage.SBOM_SCANS_AT_A_TIME, syft.most
    assert sorted(syft.scanned) == ["sha256:a", "sha256:b", "sha256:c", "sha256:e"], "a failed push has no SBOM"
    for record in report.images:
        expected = None if record.image == "d" else f"v1.sbom/{record.image}.spdx.json"
        assert (record.sbom.path if record.sbom else None) == expected, record


def test_a_failed_scan_is_raised_after_the_others_ended(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    syft = FakeSyft(failing="sha256:b")
    monkeypatch.setattr(sbom, "generate", syft)
    report = pushed_report(["a", "b", "c"])
    with pytest.raises(UserError, match="syft could not read sha256:b"):
        publishstage.write_sboms(report, tmp_path / "v1.sbom", lambda event: None, CLASSIC)
    assert len(syft.scanned) == 3 and report.images[0].sbom is not None


def test_scans_run_one_at_a_time_where_the_temporary_folder_holds_one(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """Two 6.2 GB CUDA images: with room for one scan (about twice an image's size), they are scanned one after the
    other; with room for both, side by side."""
    report = pushed_report(["a", "b", "c"])
    for record in report.images:
        record.size_bytes = 6_200_000_000
    for free, most in ((16 * 10**9, 1), (40 * 10**9, 2)):
        syft = FakeSyft()
        monkeypatch.setattr(sbom, "generate", syft)
        monkeypatch.setattr(publishstage.shutil, "disk_usage", lambda _path, free=free: SimpleNamespace(free=free))
        publishstage.write_sboms(report, tmp_path / "v1.sbom", lambda event: None, CLASSIC)
        assert syft.most == most, (free, syft.most)


def fake_syft(folder: Path, written: bytes) -> str:
    """A syft stand-in that writes `written` where `-o spdx-json=PATH` asks."""
    (folder / "written").write_bytes(written)
    script = folder / "syft"
    script.write_text(f'#!/bin/sh\nfor a; do case "$a" in spdx-json=*) cp "{folder / "written"}" "${{a#spdx-json=}}";; '
                      "esac; done\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("written", [b"not json", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b""],
                         ids=["text", "not-utf8", "nested", "empty"])
def test_an_sbom_that_is_not_spdx_json_is_one_line_and_never_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                      written: bytes) -> None:
    """What syft wrote (or an earlier scan left in the cache) is read back as input: what is not JSON is refused in one
    line naming the file, and no record of it is made."""
    monkeypatch.setattr(sbom, "syft", lambda: fake_syft(tmp_path, written))
    with pytest.raises(UserError) as refused:
        sbom.generate("sha256:" + "a" * 64, tmp_path / "out" / "x.spdx.json", cache=tmp_path / "cache")
    message = str(refused.value)
    assert "not an SPDX JSON SBOM" in message and "\n" not in message, message


def test_package_kinds_an_sbom_names_outside_the_grammar_are_not_counted(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """A package URL's type becomes a key of the manifest's package counts, which the manifest's reader checks: one
    the grammar refuses is passed over here, so push never writes a manifest its own reader refuses."""
    refs = [{"referenceType": "purl", "referenceLocator": locator}
            for locator in ("pkg:deb/debian/bash@5.2", "pkg:../x@1", "pkg:de\nb/debian/x@1", "pkg:" + "p" * 40 + "/x@1")]
    document = {"packages": [{"externalRefs": [ref]} for ref in refs]}
    monkeypatch.setattr(sbom, "syft", lambda: fake_syft(tmp_path, json.dumps(document).encode()))
    stage = sbom.generate("sha256:" + "b" * 64, tmp_path / "out" / "x.spdx.json", cache=tmp_path / "cache")
    assert stage.packages == {"deb": 1}


def test_on_the_containerd_store_syft_reads_the_image_as_the_engine_saves_it(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """syft 1.18's own reading of a containerd-store engine takes its compressed layers for broken tars: there the
    image is saved (an OCI archive) and syft reads the archive, named by the image ID; the archive goes after."""
    image_id = "sha256:" + "c" * 64
    engine = FakeEngine(driver_status=[["driver-type", "io.containerd.snapshotter.v1"]],
                        saved={image_id: b"the saved image"}).engine
    seen = tmp_path / "seen"
    script = tmp_path / "syft"
    script.write_text(f'#!/bin/sh\necho "$@" > {seen}; for a; do case "$a" in oci-archive:*) cat "${{a#oci-archive:}}" '
                      f'>> {seen};; spdx-json=*) echo "{{}}" > "${{a#spdx-json=}}";; esac; done\n')
    script.chmod(0o755)
    monkeypatch.setattr(sbom, "syft", lambda: str(script))
    monkeypatch.setattr(sbom, "generate", functools.partial(sbom.generate, cache=tmp_path / "cache"))
    report = pushed_report(["a"])
    report.images[0].image_id = image_id
    publishstage.write_sboms(report, tmp_path / "v1.sbom", lambda event: None, engine)
    argv, content = seen.read_text().splitlines()
    archive = argv.split()[1].removeprefix("oci-archive:")
    assert argv.split()[:1] == ["scan"] and f"--source-name {image_id}" in argv, argv
    assert content == "the saved image" and not Path(archive).exists(), "the archive was not the saved image, or stayed"
