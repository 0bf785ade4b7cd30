"""The compatibility data: complete for 2.0..newest, every row sourced, known facts intact."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from torchimages.build import render
from torchimages.input import compat, matrix, specs

from ..conftest import ROOT

DATA = compat.load()


def test_every_torch_minor_from_2_0_to_2_15() -> None:
    minors = {".".join(r.version.split(".")[:2]) for r in DATA.torch}
    assert {f"2.{n}" for n in range(16)} <= minors


def test_every_cited_source_is_defined() -> None:
    cited = set()
    for release in DATA.torch:
        cited.update(release.sources)
        for build in release.builds:
            for keys in build.sources.values():
                cited.update(keys)
    for release in DATA.ngc:
        cited.update(release.sources)
    for compiler in DATA.compilers:
        assert compiler.sources, compiler
        cited.update(compiler.sources)
    assert cited - set(DATA.sources) == set()
    assert all(build.sources["build"] or "build" in build.unconfirmed for r in DATA.torch for build in r.builds)


def test_pypi_pinned_facts() -> None:
    build = DATA.torch_release("2.3.1").build_for("12.1")
    assert (build.cudnn, build.nccl, build.default) == ("8.9.2.26", "2.20.5", True)
    assert DATA.torch_release("2.7").build_for("12.8").cudnn == "9.7.1.26"
    assert DATA.torch_release("2.11.0").build_for("13.0").cudnn == "9.19.0.56", "wheel pin beats RELEASE.md"


def test_short_versions_resolve_to_newest_patch() -> None:
    assert DATA.torch_release("2.3").version == "2.3.1"
    assert DATA.torch_release("2.1").version == "2.1.2", "2.1 must not match 2.10"
    assert DATA.torch_release("2.10").version == "2.10.0"


def test_drivers() -> None:
    assert DATA.min_driver("12.1.1") == "530.30.02"
    assert DATA.min_driver("12.8") == "570.124.06", "newest known patch of 12.8"
    assert DATA.family_min_driver("12.4") == "525"
    assert DATA.family_min_driver("13.0") == "580"


def test_cuda_image_tags() -> None:
    assert DATA.cuda_patches("12.1") == ["12.1.0", "12.1.1"]
    assert "24.04" in DATA.ubuntu_by_cuda["13.0.2"]


def test_unconfirmed_marks_survive_import() -> None:
    release = DATA.ngc_release("26.03")
    assert "cudnn" in release.unconfirmed
    assert "nccl" in DATA.torch_release("2.3.1").build_for("11.8").unconfirmed


def test_driver_labels_are_the_recorded_facts() -> None:
    """min-driver and min-driver-minor-compat, as rendered for matrix.yaml's images, against compat.yaml read raw."""
    raw = yaml.safe_load((ROOT / "torchimages" / "data" / "compat.yaml").read_text())["cuda_min_driver"]
    plan = specs.resolve(matrix.load(ROOT / "matrix.yaml"))
    checked = 0
    for spec in plan.specs:
        for variant in ("base", *spec.variants):
            found = render.labels(plan, spec, "v1", variant)
            if spec.flavor == "cpu":
                assert (found["io.torchimages.min-driver"], found["io.torchimages.min-driver-minor-compat"]) == ("none", "none")
                continue
            # The toolkit of the base image; a patch the driver table lacks takes its newest recorded X.Y patch.
            toolkit = spec.cuda_image if spec.cuda_image in raw["toolkit"] else max(
                (v for v in raw["toolkit"] if v.startswith(f"{spec.cuda}.")), key=lambda v: [int(p) for p in v.split(".")])
            assert found["io.torchimages.min-driver"] == raw["toolkit"][toolkit], (spec.name, variant)
            family = raw["minor_version_compat_family"][spec.cuda.split(".")[0]]
            assert found["io.torchimages.min-driver-minor-compat"] == family, (spec.name, variant)
            checked += 1
    assert checked >= 6


def test_the_compiled_compat_data_is_current_and_equal_to_the_yaml() -> None:
    """Every command reads compat.json when it was compiled from the current compat.yaml: it must say the same."""
    folder = ROOT / "torchimages" / "data"
    text = (folder / "compat.yaml").read_text()
    cached = json.loads((folder / "compat.json").read_text())
    assert cached["compat_yaml_sha256"] == hashlib.sha256(text.encode()).hexdigest(), (
        "compat.json is stale: run python -m torchimages.input.compat")
    assert cached["data"] == yaml.safe_load(text)
    assert compat.packaged_raw() == yaml.safe_load(text)


def test_a_stale_compiled_copy_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "torchimages"
    shutil.copytree(ROOT / "torchimages" / "data", package / "data")
    (package / "__init__.py").write_text("")
    (package / "data" / "compat.yaml").write_text((package / "data" / "compat.yaml").read_text() + "\n# edited\n")
    monkeypatch.setattr(compat.resources, "files", lambda _name: package)
    assert compat.packaged_raw() == yaml.safe_load((package / "data" / "compat.yaml").read_text())
    (package / "data" / "compat.json").write_text('{"compat_yaml_sha256": "x", "data": {"torch": []}}')
    assert compat.packaged_raw()["torch"], "a compiled copy of other bytes was used"
