"""OSV advisories (torchimages/verify/osv.py) read as input and matched in each ecosystem's version order: Debian's
checked against dpkg itself, PEP 440's through packaging, every range field of the schema, hostile files refused with
one line. The packages are real ones of the CPU image (pip's jinja2 and setuptools, Debian 12's openssl and zlib)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import zipfile
from itertools import combinations
from pathlib import Path

import pytest

from torchimages.errors import UserError
from torchimages.verify import osv

DEBIAN_VERSIONS = ["1.0", "1.0-1", "1.0-1+deb12u1", "1.0~rc1", "1.0~rc1-1", "1:0.9", "1.0a", "1.0+b1", "1.00",
                   "1.0.1", "3.0.15-1~deb12u1", "3.0.15-1", "2.36-9+deb12u9", "2.36-9+deb12u10", "1:1.2.13.dfsg-1",
                   "1.2.13.dfsg-1", "0", "1.0-1~bpo12+1", "10", "9", "1.0-1.1", "1.0-1a", "a", "1~~", "1~"]


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is Debian's; this machine is Debian")
def test_debian_order_is_dpkgs_own() -> None:
    for a, b in combinations(DEBIAN_VERSIONS, 2):
        for relation, expected in (("lt", -1), ("eq", 0), ("gt", 1)):
            said = subprocess.run(["dpkg", "--compare-versions", a, relation, b], check=False).returncode == 0
            assert said == (osv.debian_compare(a, b) == expected), (a, relation, b)


def advisory(ident: str, ecosystem: str, name: str, *, ranges: list | None = None, versions: list | None = None,
             **more: object) -> dict:
    affected: dict = {"package": {"ecosystem": ecosystem, "name": name}}
    if ranges is not None:
        affected["ranges"] = ranges
    if versions is not None:
        affected["versions"] = versions
    return {"id": ident, "modified": "2026-11-01T00:00:00Z", "affected": [affected], **more}


def events(*pairs: tuple[str, str], kind: str = "ECOSYSTEM") -> dict:
    return {"type": kind, "events": [{key: value} for key, value in pairs]}


ADVISORIES = [
    # fixed in a later version: jinja2 3.1.6 is affected below 3.1.7 (a PyPI range, PEP 440 order: 3.1.10 > 3.1.7)
    advisory("GHSA-test-fixd-0001", "PyPI", "Jinja2", aliases=["CVE-2026-0001"],
             ranges=[events(("introduced", "3.0.0"), ("fixed", "3.1.10"), ("introduced", "3.1.5"), ("fixed", "3.1.7"))],
             database_specific={"severity": "MODERATE"}),
    # no fix: every setuptools from 0 on
    advisory("PYSEC-test-nofix", "PyPI", "setuptools", ranges=[events(("introduced", "0"))],
             severity=[{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}]),
    # withdrawn: never counts
    advisory("GHSA-test-wdrn-0003", "PyPI", "jinja2", withdrawn="2026-10-01T00:00:00Z",
             ranges=[events(("introduced", "0"))]),
    # a Debian range: openssl of Debian 12 before 3.0.17-1~deb12u2
    advisory("DSA-0000-1", "Debian:12", "openssl", ranges=[events(("introduced", "0"), ("fixed", "3.0.17-1~deb12u2"))]),
    # only `versions`: zlib's exact Debian version, with an epoch
    advisory("DLA-0000-1", "Debian:12", "zlib", versions=["1:1.2.13.dfsg-1"]),
    # another release of Debian: not this image's
    advisory("DSA-0000-2", "Debian:11", "openssl", ranges=[events(("introduced", "0"))]),
    # a last_affected range: numpy up to 2.4.6 included
    advisory("GHSA-test-last-0006", "PyPI", "numpy", ranges=[events(("introduced", "2.0"), ("last_affected", "2.4.6"))]),
]
INSTALLED = [("PyPI", "jinja2", "3.1.6"), ("PyPI", "setuptools", "66.1.1"), ("PyPI", "numpy", "2.4.6"),
             ("PyPI", "MarkupSafe", "3.0.2"), ("Debian:12", "openssl", "3.0.17-1~deb12u1"),
             ("Debian:12", "zlib", "1:1.2.13.dfsg-1"), ("Debian:12", "libc6", "2.36-9+deb12u10")]


def test_each_advisory_affects_exactly_the_installed_versions_its_fields_say(tmp_path: Path) -> None:
    for index, document in enumerate(ADVISORIES):
        (tmp_path / f"{index}.json").write_text(json.dumps(document))
    found = {(f.advisory.id, f.package, f.installed, f.fixed) for f in osv.findings(osv.read(tmp_path), INSTALLED)}
    assert found == {
        ("GHSA-test-fixd-0001", "jinja2", "3.1.6", "3.1.7"),
        ("PYSEC-test-nofix", "setuptools", "66.1.1", None),
        ("DSA-0000-1", "openssl", "3.0.17-1~deb12u1", "3.0.17-1~deb12u2"),
        ("DLA-0000-1", "zlib", "1:1.2.13.dfsg-1", None),
        ("GHSA-test-last-0006", "numpy", "2.4.6", None),
    }
    severities = {a.id: a.severity for a in osv.read(tmp_path)}
    assert severities["GHSA-test-fixd-0001"] == "MEDIUM" and severities["PYSEC-test-nofix"] == "CRITICAL"
    assert severities["DSA-0000-1"] is None
    # outside the ranges: a fixed jinja2, an openssl at its fix, numpy past last_affected
    later = [("PyPI", "jinja2", "3.1.7"), ("Debian:12", "openssl", "3.0.17-1~deb12u2"), ("PyPI", "numpy", "2.4.7"),
             ("PyPI", "jinja2", "2.11.3")]
    assert osv.findings(osv.read(tmp_path), later) == []


@pytest.mark.parametrize(("vector", "score"), [
    ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8),
    ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1),
    ("CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:N/A:N", 5.5),
    ("CVSS:3.0/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0),
    ("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H", 9.9),
])
def test_a_cvss_vector_gets_firsts_base_score(vector: str, score: float) -> None:
    assert osv.cvss3_score(vector) == score


def zipped(folder: Path, members: dict[str, bytes]) -> Path:
    path = folder / "export.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    path.write_bytes(buffer.getvalue())
    return path


def test_a_zip_export_reads_like_a_folder(tmp_path: Path) -> None:
    path = zipped(tmp_path, {f"{a['id']}.json": json.dumps(a).encode() for a in ADVISORIES})
    assert sorted(a.id for a in osv.read(path)) == sorted(a["id"] for a in ADVISORIES)


@pytest.mark.parametrize(("members", "words"), [
    ({"a.json": b"{not json"}, "a.json: not JSON"),
    ({"b.json": json.dumps(advisory("X-1", "PyPI", "jinja2", ranges=[events(("fixed", "3.1.7"))])).encode()},
     "ranges[0]: a range without an 'introduced' event"),
    ({"c.json": json.dumps({"id": "X" * (10 * 1024 * 1024), "affected": []}).encode()}, "more than an advisory's"),
    ({"d.json": json.dumps({"id": "X" * 200, "affected": []}).encode()}, "field 'id' must be at most 100 characters"),
    ({"../e.json": b"{}"}, "../e.json: a member whose name leads out of the archive"),
    ({"f.json": json.dumps(advisory("X-2", "PyPI", "jinja2", ranges=[{"type": "ECOSYSTEM",
                                                                      "events": [{"introduced": "0", "fixed": "1"}]}]))
      .encode()}, "each event is one of introduced"),
    ({"g.json": b"[]"}, "not an OSV advisory"),
    ({"h.json": json.dumps({"id": "X-3\u202e", "affected": []}).encode()}, "U+202E"),
])
def test_a_hostile_advisory_file_is_refused_with_one_line(tmp_path: Path, members: dict, words: str) -> None:
    with pytest.raises(UserError) as refused:
        osv.read(zipped(tmp_path, members))
    assert words in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
