"""`build.py diff OLD NEW` over two release manifests and their SBOMs (SPDX JSON as syft writes it:
each package with its package URL)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchimages.publish import sbom

from ..conftest import ROOT, digest


def spdx(packages: dict[str, str]) -> dict:
    """An SPDX document listing `packages` ("deb:bash" -> version) by purl, with a CPE first as syft writes them."""
    entries = []
    for key, version in packages.items():
        kind, name = key.split(":")
        locator = (f"pkg:deb/debian/{name}@{version.replace('+', '%2B')}?arch=amd64&distro=debian-12" if kind == "deb"
                   else f"pkg:pypi/{name}@{version.replace('+', '%2B')}")
        entries.append({"name": name, "versionInfo": version, "externalRefs": [
            {"referenceCategory": "SECURITY", "referenceType": "cpe23Type", "referenceLocator": f"cpe:2.3:a:{name}"},
            {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": locator}]})
    return {"spdxVersion": "SPDX-2.3", "name": "sha256:1", "packages": entries}


def release(folder: Path, name: str, *, torch: str, size: int, packages: dict[str, str], passed: int) -> Path:
    (folder / f"{name}.sbom").mkdir(parents=True)
    document = json.dumps(spdx(packages)).encode()
    (folder / f"{name}.sbom" / "cpu.spdx.json").write_bytes(document)
    manifest = {"release": name, "repository": "r/x", "candidate": None, "images": [
        {"image": "cpu", "variant": "base", "digest": digest(name), "size_bytes": size, "layers": 12,
         "versions": {"torch": torch, "cuda": None, "cudnn": None, "nccl": None, "python": "3.11"},
         "smoke": {"passed": passed, "failed": 0, "skipped": 15, "skipped_no_gpu": 8},
         "sbom": {"path": f"{name}.sbom/cpu.spdx.json", "sha256": hashlib.sha256(document).hexdigest(), "packages": {}}},
        *([{"image": "old-only", "variant": "base", "digest": digest("o"), "versions": {},
            "smoke": {"passed": 1, "failed": 0, "skipped": 0, "skipped_no_gpu": 0}}] if name == "v1" else [])]}
    (folder / f"{name}.json").write_text(json.dumps(manifest))
    return folder / f"{name}.json"


def test_the_purls_give_type_name_and_version() -> None:
    document = spdx({"deb:bash": "5.2.15-2+b2", "pypi:Torch": "2.13.0+cpu"})
    assert sbom.purls(document) == [("deb", "bash", "5.2.15-2+b2"), ("pypi", "torch", "2.13.0+cpu")]


def test_diff_names_versions_packages_size_and_smoke(tmp_path: Path) -> None:
    old = release(tmp_path, "v1", torch="2.12.0", size=1_400_000_000, passed=13,
                  packages={"deb:bash": "5.2.15-2", "deb:curl": "7.88.1", "pypi:torch": "2.12.0+cpu", "pypi:six": "1.16"})
    new = release(tmp_path, "v2", torch="2.13.0", size=1_470_000_000, passed=14,
                  packages={"deb:bash": "5.2.15-2+b2", "pypi:torch": "2.13.0+cpu", "pypi:six": "1.16",
                            "pypi:einops": "0.8.1"})
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", str(old), str(new)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("# Changes from v1 to v2\n")
    assert "## cpu: changed\n- torch: 2.12.0 -> 2.13.0\n- size: 1400 MB -> 1470 MB (+5.0%)\n" in text
    assert "- smoke passed: 13 -> 14\n" in text
    assert "- Debian packages: 0 added, 1 removed, 1 changed\n  - removed curl 7.88.1\n  - bash 5.2.15-2 -> 5.2.15-2+b2" in text
    assert "- Python packages: 1 added, 0 removed, 1 changed\n  - added einops 0.8.1\n  - torch 2.12.0+cpu -> 2.13.0+cpu" in text
    assert "## old-only: removed" in text
    as_json = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", str(old), str(new), "--format", "json"],
                             capture_output=True, text=True, timeout=60, check=False)
    data = json.loads(as_json.stdout)
    cpu = next(i for i in data["images"] if i["image"] == "cpu")
    assert cpu["packages"]["pypi"]["added"] == {"einops": "0.8.1"} and cpu["versions"]["torch"] == ["2.12.0", "2.13.0"]


def test_a_missing_manifest_is_one_clear_error(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", str(tmp_path / "a.json"),
                             str(tmp_path / "b.json")], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2 and "a release manifest could not be read (No such file" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_image_reused_with_new_release_labels_is_unchanged(tmp_path: Path) -> None:
    packages = {"deb:bash": "5.2.15-2", "pypi:torch": "2.13.0+cpu"}
    paths = [release(tmp_path, name, torch="2.13.0", size=1_400_000_000, passed=14, packages=packages)
             for name in ("v1", "v2")]
    for path in paths:
        data = json.loads(path.read_text())
        data["images"][0]["content_digest"] = digest("same")  # v2 is v1's image with new labels: another image digest
        path.write_text(json.dumps(data))
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", *map(str, paths)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert "## cpu: unchanged\n" in result.stdout, result.stdout
    assert "only the release labels are new" in result.stdout

    data = json.loads(paths[1].read_text())
    data["images"][0]["content_digest"] = digest("other")
    paths[1].write_text(json.dumps(data))
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", *map(str, paths)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert "## cpu: changed\n" in result.stdout, result.stdout


def test_release_notes_escape_what_an_sbom_says(tmp_path: Path) -> None:
    """Package names and versions come from syft's reading of the image: a package can call itself anything."""
    old = release(tmp_path, "v1", torch="2.13.0", size=1, passed=1, packages={"pypi:six": "1.16"})
    new = release(tmp_path, "v2", torch="2.13.0", size=1, passed=1, packages={
        "pypi:six": "1.16\n## forged: unchanged", "pypi:evil": "<img src=x onerror=alert(1)>", "pypi:red": "\x1b[31m1"})
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", str(old), str(new)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "\n## forged" not in result.stdout and "<img" not in result.stdout and "\x1b" not in result.stdout
    assert "  - added evil &lt;img src=x onerror=alert(1)&gt;" in result.stdout
    assert "  - six 1.16 -> 1.16\\\\n\\#\\# forged: unchanged" in result.stdout  # renders as 1.16\\n## forged


def test_an_sbom_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    old = release(tmp_path, "v1", torch="2.13.0", size=1, passed=1, packages={})
    new = release(tmp_path, "v2", torch="2.13.0", size=1, passed=1, packages={})
    sbom_file = tmp_path / "v2.sbom" / "cpu.spdx.json"
    sbom_file.write_bytes(b"\xff not json")
    data = json.loads(new.read_text())
    data["images"][0]["sbom"]["sha256"] = hashlib.sha256(sbom_file.read_bytes()).hexdigest()
    new.write_text(json.dumps(data))
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", str(old), str(new)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 2 and "not an SPDX JSON SBOM" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("path", "value", "line"), [
    (("versions", "cuda"), "12.1", "- cuda: None -> 12.1"),
    (("versions", "cudnn"), "8.9.2.26", "- cudnn: None -> 8.9.2.26"),
    (("versions", "nccl"), "2.20.5", "- nccl: None -> 2.20.5"),
    (("versions", "python"), "3.12", "- python: 3.11 -> 3.12"),
    (("smoke", "failed"), 1, "- smoke failed: 0 -> 1"),
    (("smoke", "skipped"), 16, "- smoke skipped: 15 -> 16"),
    (("smoke", "skipped_no_gpu"), 9, "- smoke skipped_no_gpu: 8 -> 9"),
    (("layers",), 13, "- layers: 12 -> 13"),
])
def test_every_field_diff_compares_makes_the_image_changed(tmp_path: Path, path: tuple[str, ...], value: object,
                                                            line: str) -> None:
    packages = {"deb:bash": "5.2.15-2"}
    old = release(tmp_path, "v1", torch="2.13.0", size=1_400_000_000, passed=14, packages=packages)
    new = release(tmp_path, "v2", torch="2.13.0", size=1_400_000_000, passed=14, packages=packages)
    data = json.loads(new.read_text())
    target = data["images"][0]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    data["images"][0]["digest"] = json.loads(old.read_text())["images"][0]["digest"]  # only this field moves
    new.write_text(json.dumps(data))
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "diff", str(old), str(new)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "## cpu: changed\n" in result.stdout and f"\n{line}\n" in result.stdout, result.stdout
