"""Advisories from an OSV query service (torchimages/verify/osvservice.py), against a local HTTP server that answers
as osv.dev's API does (POST /v1/querybatch with pages, GET /v1/vulns/ID): no vulnerability service is reachable from
these machines, so this server stands in for it. The audit it makes must be the one a folder of the same documents
makes; every hostile answer is one line; a service that does not answer leaves the images "not checked"."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from torchimages.errors import UserError
from torchimages.report import Report
from torchimages.verify import audit, auditstage, osvservice

from .test_audit import IMAGE, PACKAGES, TODAY


def document(ident: str, name: str, fixed: str, ecosystem: str = "PyPI", severity: str = "HIGH") -> dict:
    return {"id": ident, "aliases": [f"CVE-{ident}"], "modified": "2026-12-01T00:00:00Z",
            "database_specific": {"severity": severity},
            "affected": [{"package": {"ecosystem": ecosystem, "name": name},
                          "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}]}]}


DOCUMENTS = {d["id"]: d for d in (document("PYSEC-1", "jinja2", "3.1.7"), document("PYSEC-2", "jinja2", "3.1.5"),
                                  document("DSA-1", "openssl", "3.0.18-1", "Debian:12", "MEDIUM"))}


class Service(http.server.BaseHTTPRequestHandler):
    """osv.dev's API for DOCUMENTS: jinja2's two ids on two pages; `mode` breaks one thing."""

    mode = "good"
    asked: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Service.asked.append(body)
        results = []
        for query in body["queries"]:
            name, token = query["package"]["name"].lower(), query.get("page_token")
            if name == "jinja2":
                results.append({"vulns": [{"id": "PYSEC-1"}], "next_page_token": "page2"} if token is None or
                               self.mode == "endless" else {"vulns": [{"id": "PYSEC-2"}]})
            elif name == "openssl" and query["package"]["ecosystem"] == "Debian:12":
                results.append({"vulns": [{"id": "DSA-1", "modified": "2026-12-01T00:00:00Z"}]})
            else:
                results.append({})
        answers = {"good": {"results": results}, "endless": {"results": results}, "short": {"results": results[1:]},
                   "long_id": {"results": [{"vulns": [{"id": "x" * 10_000_000}]} for _ in results]}}
        self.answer(200, json.dumps(answers.get(self.mode, {"results": results})).encode())

    def do_GET(self) -> None:
        ident = self.path.rsplit("/", 1)[-1]
        if self.mode == "not_json":
            self.answer(200, b"<html>proxy login</html>")
        elif self.mode == "down":
            self.answer(503, b"{}")
        else:
            self.answer(200, json.dumps(DOCUMENTS[ident]).encode()) if ident in DOCUMENTS else self.answer(404, b"{}")

    def answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Service.mode, Service.asked = "good", []
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "image_packages", lambda tags, _engine=None: {image: PACKAGES[IMAGE] for image in tags})


def audited(source: str | Path, tmp_path: Path) -> tuple[bool, Report, list[str]]:
    report, said = Report("v2.7", "matrix.yaml"), []
    passed = auditstage.run({IMAGE: "t"}, auditstage.AuditInputs.read(source, None), report=report,
                            out=tmp_path / "audit.json", today=TODAY, say=said.append)
    return passed, report, said


def test_the_service_s_audit_is_the_one_a_folder_of_the_same_advisories_makes(
        service: str, listed: None, tmp_path: Path) -> None:
    folder = tmp_path / "osv"
    folder.mkdir()
    for ident, data in DOCUMENTS.items():
        (folder / f"{ident}.json").write_text(json.dumps(data))
    passed_folder, _r, _s = audited(folder, tmp_path)
    from_folder = json.loads((tmp_path / "audit.json").read_text())
    passed_service, _r, said = audited(service, tmp_path)
    from_service = json.loads((tmp_path / "audit.json").read_text())
    assert passed_folder is passed_service is False
    assert from_service == from_folder  # PYSEC-2, read from the second page, is fixed below what is installed
    assert {f["id"] for f in from_service["images"][0]["findings"]} == {"PYSEC-1", "DSA-1"}
    assert f"audit: 3 advisories from {service}; results: {tmp_path / 'audit.json'} (audit.md)" in said
    # each installed package asked once, by its ecosystem, name and version; jinja2's second page by its token
    first, second = Service.asked
    assert {"package": {"ecosystem": "PyPI", "name": "Jinja2"}, "version": "3.1.6"} in first["queries"]
    assert second["queries"] == [{"package": {"ecosystem": "PyPI", "name": "Jinja2"}, "version": "3.1.6",
                                  "page_token": "page2"}]


@pytest.mark.parametrize(("mode", "words"), [
    ("short", "not one result for each of the 3 packages asked"),
    ("long_id", "vulns must be objects with an id of one line, at most 100 characters"),
    ("not_json", "not JSON: not an OSV service answer"),
    ("endless", f"more than {osvservice.MAX_PAGES} pages of advisories for Jinja2"),
])
def test_a_hostile_answer_is_refused_in_one_line(service: str, listed: None, tmp_path: Path, mode: str,
                                                 words: str) -> None:
    Service.mode = mode
    with pytest.raises(UserError) as refused:
        audited(service, tmp_path)
    message = str(refused.value)
    assert words in message and service in message and "\n" not in message and len(message) < 400, message


def test_a_service_that_does_not_answer_leaves_the_images_not_checked(service: str, listed: None,
                                                                     tmp_path: Path) -> None:
    Service.mode = "down"
    passed, report, said = audited(service, tmp_path)
    assert passed and said[0].startswith(f"audit: not checked: the OSV service did not answer ({service}/v1/vulns/")
    assert "HTTP 503" in said[0]
    closed = "http://127.0.0.1:1"
    passed, _report, said = audited(closed, tmp_path)
    assert passed and "ConnectionError" in said[0], said
    required = auditstage.AuditInputs.read(closed, None, require=True)
    assert not auditstage.run({IMAGE: "t"}, required, report=report, out=tmp_path / "a.json", today=TODAY,
                              say=said.append)
