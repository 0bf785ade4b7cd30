"""Helpers for unit tests: no Docker engine is used here."""

from __future__ import annotations

import hashlib
import http.server
import shlex
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.buildpy import ROOT, build_py
from torchimages.errors import UserError
from torchimages.input import matrix, specs

GOLDEN = Path(__file__).parent / "golden"  # the reviewed render of golden/matrix.yaml (build/test_render.py)
# The unit tier uses no engine: it fills the lanes' time to spare, by stage folder (tests/session/lanes.py); the rest,
# and a new folder, run in the main lane. About 55 s of its 175 s run in the side lane, which is that much shorter.
SIDE_LANE_FOLDERS = ("input", "verify")


def option_variables() -> set[str]:
    """Every TORCHIMAGES_* variable an option of a command reads (options.py declares them)."""
    import click

    from torchimages.cli import main

    found, commands = set(), [main]
    while commands:
        command = commands.pop()
        found |= {param.envvar for param in command.params if isinstance(param.envvar, str)}
        commands += list(command.commands.values()) if isinstance(command, click.Group) else []
    return found


OPTION_VARIABLES = option_variables()


@pytest.fixture(autouse=True)
def no_runner_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner's settings (TORCHIMAGES_WHEELHOUSE, _OFFLINE, _BASE_IMAGE: the workflows' stand-in runner has them, as
    a self-hosted one does) are not a unit test's input: a test that reads one sets it."""
    for name in OPTION_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def pytest_itemcollected(item: pytest.Item) -> None:
    """The unit tier's lane, given here once rather than in each module (as each test is collected: before the
    session orders its tests by lane)."""
    folder = Path(item.path).relative_to(Path(__file__).parent).parts[0]
    item.add_marker(pytest.mark.lane("side" if folder in SIDE_LANE_FOLDERS else "main"))


def golden_plan() -> specs.Plan:
    return specs.resolve(matrix.load(GOLDEN / "matrix.yaml"))


def shell_words(command: str) -> list[str]:
    """The words of a shell command as the shell reads them: quotes removed, and `;`, `|`, `&`, `<`, `>`, `(`, `)`
    words of their own (`pip install 'a b';` is the word 'a b', then ';')."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def plan_of(text: str) -> specs.Plan:
    """Validate matrix text fully (shape and compatibility)."""
    return specs.resolve(matrix.loads(textwrap.dedent(text), "matrix.yaml"))


def problems_of(text: str) -> list[str]:
    """The problems validation reports for matrix text; fails the test if it is accepted."""
    with pytest.raises(UserError) as caught:
        plan_of(text)
    return [str(p) for p in caught.value.problems]


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `python build.py ARGS` as a user would: the shared helper, with a unit test's shorter timeout."""
    return build_py(*args, cwd=cwd, timeout=timeout)


def digest(seed: object) -> str:
    """A well-formed sha256 digest, different for each seed."""
    return "sha256:" + hashlib.sha256(str(seed).encode()).hexdigest()


class AnsweringHandler(http.server.BaseHTTPRequestHandler):
    """A local server's request handler: `answer` sends a whole response; nothing is logged to the test's output."""

    def answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


def tls_server(handler: type, folder: Path) -> tuple[object, str, Path]:
    """An HTTPS server on 127.0.0.1 (its certificate also names localhost) running `handler` in a thread: the
    server, its host:port and its CA."""
    import ssl
    import threading

    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True, timeout=60)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"127.0.0.1:{httpd.server_port}", folder / "cert.pem"
