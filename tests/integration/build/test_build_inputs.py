"""Build inputs on a real build: --torch-index-url and --pip-index-url served over TLS by a local index whose CA
only --ca-bundle gives, and --apt-mirror pointing apt at Debian's mirror by another address. The build must
fetch torch from that index (so pip in the builder trusted the bundle), apt must use the mirror, and the
image must keep neither the CA nor the mirror in its files. What is proven is where the wheels come from, not torch:
the index serves a stub `torch` wheel (a version and `torch.version.cuda`, all the build reads of it) beside the real
numpy and six, so the build installs, commits and scans kilobytes where torch's are 1 GB."""

from __future__ import annotations

import fcntl
import re
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import pytest

from ..conftest import build_py, render_cpu_entry, run_in
from ..layers import scan_layers
from ..stub_wheels import stub_torch_wheel

pytestmark = [pytest.mark.lane("side")]

NAME = "inputs-probe"


@dataclass
class Index:
    url: str
    ca: Path
    requests: list[str] = field(default_factory=list)


def make_certificates(folder: Path, address: str) -> tuple[Path, Path, Path]:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=torchimages index test CA",
            "-keyout", "ca.key", "-out", "ca.crt")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={address}", "-keyout", "server.key", "-out", "server.csr")
    (folder / "san.ext").write_text(f"subjectAltName=IP:{address}\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "san.ext", "-out", "server.crt")
    return folder / "ca.crt", folder / "server.crt", folder / "server.key"


STUB_TORCH = "2.13.0+stub"  # the matrix's torch 2.13.0 (`torch==2.13.0` matches it), marked as this test's


def write_simple_index(wheelhouse: Path, root: Path) -> None:
    """A PEP 503 index of the wheelhouse, its torch replaced by the stub: /simple/NAME/ links to /files/WHEEL."""
    (root / "files").mkdir(parents=True)
    projects: dict[str, list[str]] = {}
    real = [wheel for wheel in wheelhouse.glob("*.whl") if not wheel.name.startswith("torch-")]
    for wheel in sorted([*real, stub_torch_wheel(root, STUB_TORCH, None)]):
        (root / "files" / wheel.name).symlink_to(wheel.resolve())
        projects.setdefault(re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower(), []).append(wheel.name)
    for project, wheels in projects.items():
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True)
        links = "".join(f'<a href="../../files/{w}">{w}</a>\n' for w in wheels)
        page.write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")


def bridge_address(api: docker.APIClient) -> str:
    """The host's address on the engine's default bridge, which containers reach. The network's IPAM config names
    it, except when dockerd found the bridge's interface already set up (a restarted engine): then only the
    interface has it."""
    network = api.inspect_network("bridge")
    gateway = network["IPAM"]["Config"][0].get("Gateway")
    if gateway:
        return gateway.split("/")[0]
    interface = (network.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # SIOCGIFADDR: the interface's IPv4 address
        answer = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", interface.encode()[:15]))
    return socket.inet_ntoa(answer[20:24])


@pytest.fixture(scope="module")
def index(api: docker.APIClient, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """The wheelhouse served over HTTPS on the engine's bridge address, with a CA made here."""
    folder = tmp_path_factory.mktemp("index")
    address = bridge_address(api)
    ca, certificate, key = make_certificates(folder, address)
    write_simple_index(wheelhouse, folder / "www")
    served = Index(url="", ca=ca)

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            served.requests.append(self.path)

    server = ThreadingHTTPServer((address, 0), partial(Handler, directory=str(folder / "www")))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    served.url = f"https://{address}:{server.server_address[1]}/simple"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served
    server.shutdown()


@dataclass
class Mirror:
    url: str
    requests: list[str] = field(default_factory=list)


UPSTREAM = "http://deb.debian.org"  # the image's own sources; the mirror forwards to it under another address


@pytest.fixture(scope="module")
def mirror(api: docker.APIClient) -> Iterator[Mirror]:
    """An apt mirror on the engine's bridge address that forwards to Debian's and logs what apt fetched."""
    address = bridge_address(api)
    served = Mirror(url="")

    class Forward(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests.append(self.path)
            try:
                upstream = urllib.request.urlopen(UPSTREAM + self.path, timeout=120)
            except urllib.error.HTTPError as exc:
                upstream = exc
            with upstream:
                self.send_response(upstream.status)
                for header in ("Content-Type", "Content-Length", "Last-Modified", "ETag"):
                    if upstream.headers.get(header):
                        self.send_header(header, upstream.headers[header])
                self.end_headers()
                shutil.copyfileobj(upstream, self.wfile)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Forward)
    served.url = f"http://{address}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served
    server.shutdown()


@pytest.fixture(scope="module")
def inputs_build(api: docker.APIClient, base_image: str, index: Index, mirror: Mirror,
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, str]:
    folder = tmp_path_factory.mktemp("inputs-build")
    matrix_file, images = render_cpu_entry(folder, NAME, "    pip: [six]\n")  # a `pip:` package: the rest layer's install
    result = build_py("build", "--matrix", str(matrix_file), "--tag", "fail", "--images", str(images), "--plain",
                      "--base-image", base_image, "--torch-index-url", index.url, "--pip-index-url", index.url,
                      "--ca-bundle", str(index.ca), "--apt-mirror", mirror.url, "--report", str(folder / "r.json"),
                      "--logs", str(folder / "logs"), timeout=1200)
    assert result.returncode == 0, f"build with the inputs failed:\n{result.stdout[-3000:]}\n{result.stderr[-4000:]}"
    return result, folder / "logs" / f"{NAME}.log", f"registry.example.com/ml/failures:fail-{NAME}"


def test_torch_comes_from_the_replaced_index_over_tls_with_the_extra_ca(inputs_build: tuple, index: Index) -> None:
    wheels = [urllib.parse.unquote(path) for path in index.requests if path.startswith("/files/")]
    assert f"/files/torch-{STUB_TORCH}-py3-none-any.whl" in wheels, index.requests
    assert any(path.startswith("/files/numpy-") for path in wheels), "torch's layer did not install numpy from the index"
    assert any(path.startswith("/files/six-") for path in wheels), "the entry's `pip:` install did not use --pip-index-url"


def test_apt_uses_the_mirror_during_the_build_and_the_sources_are_restored(api: docker.APIClient, inputs_build: tuple,
                                                                          mirror: Mirror, base_image: str) -> None:
    _, log, tag = inputs_build
    assert re.search(rf"^Get:\d+ {re.escape(mirror.url)}/debian bookworm", log.read_text(), re.M), "apt did not use the mirror"
    assert any(path.endswith(".deb") for path in mirror.requests), f"no package came through the mirror: {mirror.requests}"
    command = ["sh", "-c", "find /etc/apt -name '*.list' -o -name '*.sources' | sort | xargs cat"]
    _, sources = run_in(api, tag, command)
    _, original = run_in(api, base_image, command)
    assert sources == original and "deb.debian.org" in sources and mirror.url not in sources


def test_the_extra_ca_reaches_no_layer_of_the_image(api: docker.APIClient, inputs_build: tuple, index: Index) -> None:
    _, _, tag = inputs_build
    body = index.ca.read_text().splitlines()[3].encode()  # a line of the certificate's base64, found nowhere else
    scan = scan_layers(api, tag, (body,))
    assert scan.layers > 3 and scan.found == [], f"the extra CA is in the image: {scan.found}"
    config = api.inspect_image(tag)["Config"]
    leaked = [e for e in config["Env"] if e.split("=")[0] in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
                                                                "PIP_INDEX_URL", "TORCH_INDEX_URL")]
    assert leaked == [], leaked
