"""`build.py audit` (torchimages/verify/audit.py): which findings fail the gate, the allowlist (its expiry checked
against a fixed date, an entry that matched nothing a warning), the package listing read as input. Through a real
engine and the CPU image: tests/integration/verify/test_audit.py."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from torchimages.errors import UserError
from torchimages.verify import audit, osv

TODAY = datetime.date(2026, 12, 7)
IMAGE = "torch2.13.0-cpu-py3.11"


def advisory(ident: str, name: str, fixed: str | None, severity: str | None, ecosystem: str = "PyPI") -> osv.Advisory:
    events = (("introduced", "0"), *((("fixed", fixed),) if fixed else ()))
    return osv.Advisory(ident, (f"CVE-{ident}",), severity, None,
                        (osv.Affected(ecosystem, name, (osv.Range("ECOSYSTEM", events),), frozenset()),), "test")


ADVISORIES = [advisory("A-fixed-high", "jinja2", "3.1.7", "HIGH"), advisory("B-fixed-low", "jinja2", "3.1.7", "LOW"),
              advisory("C-nofix-critical", "setuptools", None, "CRITICAL"),
              advisory("D-fixed-unknown", "openssl", "3.0.18-1", None, "Debian:12")]
PACKAGES = {IMAGE: [("PyPI", "Jinja2", "3.1.6"), ("PyPI", "setuptools", "66.1.1"),
                    ("Debian:12", "openssl", "3.0.17-1~deb12u1")]}


def allowlist(tmp_path: Path, entries: list[dict]) -> list[audit.AllowEntry]:
    path = tmp_path / "vulnerabilities.yaml"
    path.write_text(json.dumps(entries))  # JSON is YAML
    return audit.read_allowlist(path)


def test_a_fixable_advisory_at_or_above_the_level_fails_and_no_fix_or_a_lower_one_does_not() -> None:
    result = audit.audit(PACKAGES, ADVISORIES, [], fail_on="HIGH", today=TODAY)
    assert sorted(f.advisory.id for f in result.images[0].failing("HIGH")) == ["A-fixed-high", "D-fixed-unknown"]
    assert sorted(f.advisory.id for f in result.images[0].failing("LOW")) == ["A-fixed-high", "B-fixed-low",
                                                                              "D-fixed-unknown"]
    assert result.failed
    lines = audit.problems(result)
    assert f"{IMAGE}: A-fixed-high (CVE-A-fixed-high): Jinja2 3.1.6 is affected, fixed in 3.1.7, severity HIGH" in lines
    assert any("D-fixed-unknown" in line and "severity unknown" in line for line in lines)


def test_an_entry_with_a_reason_and_a_future_expiry_allows_it_and_an_expired_one_fails_again(tmp_path: Path) -> None:
    entries = allowlist(tmp_path, [
        {"id": "CVE-A-fixed-high", "packages": "jinja2", "images": "torch*-cpu-*", "reason": "no template from users",
         "expires": "2027-01-31"},
        {"id": "D-fixed-unknown", "reason": "openssl's fix is in the next base", "expires": "2026-12-08"},
        {"id": "Z-unused", "reason": "kept from an older release", "expires": "2027-06-01"}])
    allowed = audit.audit(PACKAGES, ADVISORIES, entries, fail_on="HIGH", today=TODAY)
    assert not allowed.failed and audit.problems(allowed) == []
    assert [entry.id for entry in allowed.unused] == ["Z-unused"]
    covered = {allowed.images[0].findings[i].advisory.id: e.reason for i, e in allowed.images[0].covered.items()}
    assert covered == {"A-fixed-high": "no template from users", "D-fixed-unknown": "openssl's fix is in the next base"}
    later = audit.audit(PACKAGES, ADVISORIES, entries, fail_on="HIGH", today=datetime.date(2026, 12, 9))
    assert later.failed and [entry.id for entry in later.expired] == ["D-fixed-unknown"]
    assert any("entries[1]: D-fixed-unknown expired on 2026-12-08" in line for line in audit.problems(later))
    # an entry for other images covers nothing here
    other = allowlist(tmp_path, [{"id": "A-fixed-high", "images": "*-cu121-*", "reason": "r", "expires": "2027-01-01"}])
    assert audit.audit(PACKAGES, ADVISORIES, other, fail_on="HIGH", today=TODAY).images[0].covered == {}


@pytest.mark.parametrize(("entries", "words"), [
    ([{"id": "A", "expires": "2027-01-01"}], "entries[0]: field 'reason' must be one line of text (why"),
    ([{"id": "A", "reason": "r", "expires": "soon"}], "entries[0]: field 'expires' must be a date"),
    ([{"id": "A", "reason": "r", "expires": "2027-01-01", "owner": "me"}], "entries[0]: must be an object of"),
    ({"id": "A"}, "must be a list of entries"),
    ([{"id": "A\u202e", "reason": "r", "expires": "2027-01-01"}], "field 'id' must be one line of text"),
])
def test_an_allowlist_entry_that_is_not_one_is_refused_naming_it(tmp_path: Path, entries: object, words: str) -> None:
    with pytest.raises(UserError, match=pytest.importorskip("re").escape(words)):
        allowlist(tmp_path, entries)  # type: ignore[arg-type]


def test_the_package_listing_is_read_as_input() -> None:
    output = ("os\tdebian\t12\ndeb\topenssl\t3.0.17-1~deb12u1\ndeb\topenssl\t3.0.17-1~deb12u1\n"
              "pypi\tJinja2\t3.1.6\npypi\tnumpy\t2.4.6\n")
    assert audit.parse_packages(output, IMAGE) == [("Debian:12", "openssl", "3.0.17-1~deb12u1"),
                                                   ("PyPI", "Jinja2", "3.1.6"), ("PyPI", "numpy", "2.4.6")]
    ubuntu = audit.parse_packages("os\tubuntu\t22.04\ndeb\tglibc\t2.35-0ubuntu3.8\n", IMAGE)
    assert ubuntu == [("Ubuntu:22.04", "glibc", "2.35-0ubuntu3.8")]
    with pytest.raises(UserError, match=f"{IMAGE}: the package listing printed"):
        audit.parse_packages("os\tdebian\t12\nsomething else\n", IMAGE)
