"""`build.py audit` on the session's CPU images (a real engine): the packages read in a container of each image,
matched against OSV advisories written for what those images really hold (Jinja2 in the jupyter image, Debian 12's
openssl and zlib in every image), with the allowlist and the gate as a release would use them."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest

from ...buildpy import build_py
from ..conftest import CPU_GLOB, RELEASE, EntryBuild

pytestmark = [pytest.mark.lane("main")]


def advisory(ident: str, ecosystem: str, name: str, events: list[dict] | None = None, **more: object) -> dict:
    affected: dict = {"package": {"ecosystem": ecosystem, "name": name}}
    if events is not None:
        affected["ranges"] = [{"type": "ECOSYSTEM", "events": events}]
    affected.update(more.pop("affected_more", {}))
    return {"id": ident, "modified": "2026-12-01T00:00:00Z", "affected": [affected], **more}


@pytest.fixture(scope="module")
def listed(cpu_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What each image holds, read as the audit reads it (dpkg-query and importlib.metadata in a container): the
    advisories below are written for these real versions."""
    from torchimages.verify import audit

    tags = {record["image"]: record["tag"] for record in cpu_build.report["images"]}
    return audit.image_packages(tags)


def version_of(listed: dict, image: str, name: str) -> str:
    return next(version for _eco, package, version in listed[image] if package.lower() == name.lower())


def run_audit(folder: Path, *options: str) -> tuple[int, str, str]:
    """The audit as a split pipeline runs it, its results recorded in `folder`'s copy of the session's report."""
    result = build_py("audit", "--tag", RELEASE, "--only", CPU_GLOB, "--out", str(folder / "audit.json"),
                      "--report", str(folder / "report.json"), *options)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr


def recorded(folder: Path) -> dict[str, str]:
    return {r["image"]: r["stages"]["audit"]["status"]
            for r in json.loads((folder / "report.json").read_text())["images"] if "audit" in r["stages"]}


def test_a_fixable_advisory_stops_the_audit_an_allowlist_entry_passes_it_and_its_expiry_fails_it_again(
        listed: dict, cpu_build: EntryBuild, tmp_path: Path) -> None:
    jupyter = next(r["image"] for r in cpu_build.report["images"] if r["variant"] == "jupyter")
    jinja2, zlib = version_of(listed, jupyter, "jinja2"), version_of(listed, jupyter, "zlib")
    openssl = version_of(listed, jupyter, "openssl")
    folder = tmp_path / "osv"
    folder.mkdir()
    documents = [
        advisory("GHSA-test-jinj-0001", "PyPI", "Jinja2", [{"introduced": "0"}, {"fixed": f"{jinja2}.post1"}],
                 aliases=["CVE-2026-90001"], database_specific={"severity": "HIGH"}),
        advisory("DSA-9999-1", "Debian:12", "openssl", [{"introduced": "0"}, {"fixed": f"{openssl}+fix1"}],
                 severity=[{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:L"}]),  # 5.3
        advisory("DLA-9999-1", "Debian:12", "zlib", affected_more={"versions": [zlib]}),  # no fix
        advisory("GHSA-test-wdrn-0002", "PyPI", "Jinja2", [{"introduced": "0"}], withdrawn="2026-11-30T00:00:00Z"),
    ]
    for document in documents:
        (folder / f"{document['id']}.json").write_text(json.dumps(document))
    shutil.copyfile(cpu_build.report_path, tmp_path / "report.json")

    code, _out, err = run_audit(tmp_path, "--advisories", str(folder))
    assert code == 1, err
    assert set(recorded(tmp_path).values()) == {"failed"} and set(recorded(tmp_path)) == set(listed)
    # the push of that report is refused before it reaches any registry (nothing listens on port 1)
    pushed = build_py("push", "--tag", RELEASE, "--report", str(tmp_path / "report.json"), "--registry",
                      "127.0.0.1:1/ml/pytorch", "--manifest", str(tmp_path / "release.json"))
    assert pushed.returncode == 2 and "nothing pushed" in pushed.stderr, pushed.stderr
    assert f"fixed in {jinja2}.post1" in pushed.stderr and not (tmp_path / "release.json").exists()
    assert (f"error: {jupyter}: GHSA-test-jinj-0001 (CVE-2026-90001): Jinja2 {jinja2} is affected, fixed in "
            f"{jinja2}.post1, severity HIGH") in err
    assert "DSA-9999-1" not in err and "DLA-9999-1" not in err and "GHSA-test-wdrn" not in err  # MEDIUM, no fix, withdrawn
    results = json.loads((tmp_path / "audit.json").read_text())
    found = {(i["image"], f["id"]) for i in results["images"] for f in i["findings"]}
    assert (jupyter, "DSA-9999-1") in found and (jupyter, "DLA-9999-1") in found
    assert not any(f["id"] == "GHSA-test-wdrn-0002" for i in results["images"] for f in i["findings"])
    # torch requires Jinja2: every image holds it, and each is named
    assert {image for image, ident in found if ident == "GHSA-test-jinj-0001"} == set(listed)
    assert "| no fix |" in (tmp_path / "audit.md").read_text()

    later = (datetime.date.today() + datetime.timedelta(days=30)).isoformat()
    allowlist = tmp_path / "vulnerabilities.yaml"
    allowlist.write_text(f"- id: CVE-2026-90001\n  packages: jinja2\n  reason: no template comes from users\n"
                         f"  expires: {later}\n")
    code, out, err = run_audit(tmp_path, "--advisories", str(folder), "--allowlist", str(allowlist))
    assert code == 0, err
    assert set(recorded(tmp_path).values()) == {"passed"}
    assert f"GHSA-test-jinj-0001 in Jinja2 allowed by {allowlist}: entries[0]: no template comes from users" in out

    allowlist.write_text(allowlist.read_text().replace(later, "2026-01-01"))
    code, _out, err = run_audit(tmp_path, "--advisories", str(folder), "--allowlist", str(allowlist))
    assert code == 1 and "CVE-2026-90001 expired on 2026-01-01" in err and "GHSA-test-jinj-0001" in err, err

    code, out, _err = run_audit(tmp_path)
    assert code == 0 and "audit: not checked: no advisory source given" in out
    assert run_audit(tmp_path, "--require-audit")[0] == 1
