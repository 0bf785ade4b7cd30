"""Advisories from an OSV query service (https://google.github.io/osv.dev/api/, or a mirror of it): asked in batches
for exactly the packages the images hold (POST /v1/querybatch, each result's next_page_token followed), then each
advisory it names read whole (GET /v1/vulns/ID) and checked by osv.parse as a file's would be.

Every answer is input: a body of more than MAX_ANSWER bytes, one that is not JSON, a batch answered with another
number of results than it asked, an id that is not one short line, more than MAX_PAGES pages for one package: each is
one UserError naming the URL. A service that does not answer (no connection, a timeout, a 5xx status) is NoAnswer: the
audit then says "not checked", as it does without any source (--require-audit fails it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from ..errors import UserError, visible
from ..input.grammar import short_line_problem
from . import osv

BATCH = 1000  # the most queries osv.dev answers in one batch
MAX_ANSWER = 32 << 20  # a batch of 1000 packages' ids is far less; one advisory is under osv.MAX_DOCUMENT
MAX_PAGES = 20  # pages of one package's ids: osv.dev pages after 1000 ids
TIMEOUT = 60  # seconds for one request, whole

Ask = Callable[[str, dict[str, Any] | None], object]  # (URL, JSON body to POST or None to GET) -> the answer's JSON


class NoAnswer(Exception):
    """The service could not be reached or failed (5xx): nothing was checked."""


def advisories(service: str, packages: Iterable[tuple[str, str, str]], ask: Ask | None = None) -> list[osv.Advisory]:
    """Every advisory the service names for the packages (ecosystem, name, version), each read whole."""
    ask = ask or http_ask()
    base = service.rstrip("/")
    queries = sorted(set(packages))
    ids: set[str] = set()
    for start in range(0, len(queries), BATCH):
        ids |= batch_ids(f"{base}/v1/querybatch", queries[start:start + BATCH], ask)
    documents = [(f"{base}/v1/vulns/{quote(ident, safe='')}", ident) for ident in sorted(ids)]
    return [osv.parse(ask(url, None), url) for url, _ident in documents]


def batch_ids(url: str, queries: list[tuple[str, str, str]], ask: Ask) -> set[str]:
    """The advisory ids of one batch, each query's pages followed."""
    pending: list[tuple[tuple[str, str, str], str | None]] = [(query, None) for query in queries]
    ids: set[str] = set()
    for _page in range(MAX_PAGES):
        if not pending:
            return ids
        answer = ask(url, {"queries": [query_body(query, token) for query, token in pending]})
        results = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(results, list) or len(results) != len(pending):
            raise UserError(f"{url}: answered {visible(str(answer))[:80]!r}, not one result for each of the "
                            f"{len(pending)} packages asked")
        following = []
        for (query, _token), result in zip(pending, results, strict=True):
            found, token = result_ids(url, result)
            ids |= found
            if token:
                following.append((query, token))
        pending = following
    if pending:
        raise UserError(f"{url}: more than {MAX_PAGES} pages of advisories for {pending[0][0][1]}: not an OSV service")
    return ids


def query_body(query: tuple[str, str, str], token: str | None) -> dict[str, Any]:
    ecosystem, name, version = query
    body: dict[str, Any] = {"package": {"ecosystem": ecosystem, "name": name}, "version": version}
    return {**body, "page_token": token} if token else body


def result_ids(url: str, result: object) -> tuple[set[str], str | None]:
    """One query's ids (each one short line) and its next page's token, if any."""
    if not isinstance(result, dict):
        raise UserError(f"{url}: a result is {visible(str(result))[:80]!r}, not an object of vulns")
    vulns = result.get("vulns") or []
    token = result.get("next_page_token")
    if not isinstance(vulns, list) or not all(isinstance(v, dict) and isinstance(v.get("id"), str)
                                              and not short_line_problem(v["id"]) for v in vulns):
        raise UserError(f"{url}: a result's vulns must be objects with an id of one line, at most 100 characters")
    if token is not None and (not isinstance(token, str) or not token or short_line_problem(token, 1000)):
        raise UserError(f"{url}: a next_page_token must be one line of text")
    return {v["id"] for v in vulns}, token


def http_ask(timeout: float = TIMEOUT) -> Ask:
    """JSON over HTTP(S) with the environment's proxy and CA bundle (REQUESTS_CA_BUNDLE), as pip's are; each answer
    whole within `timeout` seconds and at most MAX_ANSWER bytes."""
    import requests

    session = requests.Session()

    def ask(url: str, body: dict[str, Any] | None) -> object:
        ends = time.monotonic() + timeout
        try:
            with session.request("POST" if body is not None else "GET", url, json=body, timeout=timeout,
                                 stream=True) as response:
                if response.status_code >= 500:
                    raise NoAnswer(f"{url}: HTTP {response.status_code}")
                if response.status_code != 200:
                    raise UserError(f"{url}: HTTP {response.status_code}: not an OSV service answer")
                data = bytearray()
                while chunk := response.raw.read1(1 << 16, decode_content=True):
                    data += chunk
                    if len(data) > MAX_ANSWER:
                        raise UserError(f"{url}: more than {MAX_ANSWER >> 20} MB: not an OSV service answer")
                    if time.monotonic() > ends:
                        raise NoAnswer(f"{url}: not answered within {timeout:.0f} s")
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise NoAnswer(f"{url}: {type(exc).__name__}") from None
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise UserError(f"{url}: not JSON: not an OSV service answer") from None

    return ask
